"""The train job: spec validation, reports, artifacts, time budget, refusal of bad input before work."""

from __future__ import annotations

import hashlib
import json
import math

import pytest

from model.errors import ConfigError
from orchestrator.schema import TrainResult
from tests.workers.conftest import tiny_spec
from workers import checkpoint as ckpt
from workers import jobs, train
from workers.reporter import MemoryReporter


def test_spec_round_trip_fills_defaults():
    d = train.Spec.from_dict({"recipe": "lean", "tokens": 2e6}).to_dict()
    assert d["tokens"] == 2_000_000 and d["time_s"] is None and d["optimizer"] == "muon"
    assert d["data"] == {"corpus": "offline", "tokenizer": "byte", "vocab_size": 512}
    assert train.Spec.from_dict(d).to_dict() == d
    assert jobs.validate("train", {"recipe": "lean", "tokens": 2e6}) == d
    json.dumps(d)


@pytest.mark.parametrize(
    "bad,field",
    [
        ({"recipe": "nope"}, "recipe"),
        ({"size": "huge"}, "size"),
        ({"tokens": -5}, "tokens"),
        ({"tokens": None, "time_s": -1.0}, "time_s"),
        ({"tokens": 1000, "time_s": 5.0}, "tokens / time_s"),
        ({"tokens": None}, "tokens / time_s"),
        ({"data": {"corpus": "/no/such/dir"}}, "data.corpus"),
        ({"optimizer": "sgd"}, "optimizer"),
        ({"cooldown_frac": 0.0}, "cooldown_frac"),
        ({"batch_size": 0}, "batch_size"),
        ({"device": "tpu"}, "device"),
        ({"bogus": 1}, "bogus"),
        ({"model": {"no_such_field": 1}}, "no_such_field"),
    ],
)
def test_bad_spec_names_the_field(bad, field):
    with pytest.raises(ConfigError, match=field.replace("/", "/")):
        train.Spec.from_dict({**tiny_spec(), **bad})


def test_run_reports_curves_and_one_complete_result_row(trained_fixed4):
    out, rep = trained_fixed4
    rows = [e["row"] for e in rep.of("result") if e["table"] == "train_results"]
    assert len(rows) == 1
    cols = {c.name for c in TrainResult.__table__.columns} - {"job_id"}
    assert set(rows[0]) == cols
    row = rows[0]
    assert row["steps"] == 200 and row["tokens"] == 200 * 8 * 32 and row["device"] == "cpu"
    assert row["final_val_loss"] < math.log(256) and row["final_val_bpb"] > 0
    assert row["train_seconds"] > 0 and row["eval_seconds"] > 0 and row["ckpt_seconds"] > 0
    keys = {p["key"] for p in rep.of("metric")}
    assert keys == {"train_loss", "val_loss", "val_bpb", "lr", "tokens_per_s", "peak_mem_mb"}
    lr = dict(rep.curve("lr"))
    assert lr[199] == 0.0 and lr[0] > 0  # the decay completes on the last step
    tl = rep.curve("train_loss")
    assert tl[-1][1] < tl[0][1]
    walls = [p["wall_s"] for p in rep.of("metric") if p["key"] == "train_loss"]
    assert walls == sorted(walls) and walls[-1] == pytest.approx(row["train_seconds"], rel=1e-6)
    assert [p["step"] for p in rep.of("checkpoint")] == [50, 100, 150, 200, 200]
    assert json.loads((out / "spec.json").read_text())["tokens"] == 200 * 8 * 32
    final = ckpt.load(out / "final.pt")
    assert final["final"] and final["step"] == 200 and "optimizers" not in final


def test_rerun_of_finished_job_trains_nothing(trained_fixed4, tmp_path):
    out, rep = trained_fixed4
    rep2 = MemoryReporter()
    spec = train.Spec.from_dict(json.loads((out / "spec.json").read_text()))
    row = train.run(spec, rep2, out)
    assert rep2.of("resumed") == [{"step": 200}] and rep2.curve("train_loss") == []
    first = [e["row"] for e in rep.of("result")][0]
    assert row["final_val_loss"] == first["final_val_loss"]


def test_changed_spec_on_existing_dir_is_refused_naming_the_field(trained_fixed4):
    out, _ = trained_fixed4
    d = json.loads((out / "spec.json").read_text())
    d["seed"] = 99
    before = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in out.iterdir()}
    with pytest.raises(ConfigError, match="seed"):
        train.run(train.Spec.from_dict(d), MemoryReporter(), out)
    assert {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in out.iterdir()} == before


def test_corrupt_checkpoint_fails_before_work_and_is_untouched(looplab_cache, tmp_path):
    spec = train.Spec.from_dict(tiny_spec())
    out = tmp_path / "run"
    out.mkdir()
    (out / "checkpoint.pt").write_bytes(b"\x00garbage" * 100)
    digest = hashlib.sha256((out / "checkpoint.pt").read_bytes()).hexdigest()
    rep = MemoryReporter()
    with pytest.raises(ConfigError, match="checkpoint.pt"):
        train.run(spec, rep, out)
    assert rep.of("metric") == [] and rep.of("progress") == []
    assert hashlib.sha256((out / "checkpoint.pt").read_bytes()).hexdigest() == digest


def test_stop_request_checkpoints_then_raises_and_resumes(looplab_cache, tmp_path):
    class StopAt(MemoryReporter):
        def should_stop(self):
            return len(self.curve("train_loss")) >= 7

    spec = train.Spec.from_dict(tiny_spec(tokens=8 * 32 * 12))
    with pytest.raises(jobs.JobInterrupted):
        train.run(spec, StopAt(), tmp_path)
    assert ckpt.load(tmp_path / "checkpoint.pt")["step"] == 7
    rep = MemoryReporter()
    train.run(spec, rep, tmp_path)
    assert rep.of("resumed") == [{"step": 7}] and [s for s, _ in rep.curve("train_loss")] == list(
        range(7, 12)
    )


def test_time_budget_lands_within_ten_percent(looplab_cache, tmp_path):
    spec = train.Spec.from_dict(tiny_spec(tokens=None, time_s=6.0, log_every=10))
    rep = MemoryReporter()
    row = train.run(spec, rep, tmp_path)
    assert row["time_budget_s"] == 6.0 and row["calib_tokens_per_s"] > 0
    assert (
        json.loads((tmp_path / "calibration.json").read_text())["calib_tokens_per_s"]
        == row["calib_tokens_per_s"]
    )
    assert dict(rep.curve("lr"))[row["steps"] - 1] == 0.0
    assert abs(row["train_seconds"] - 6.0) / 6.0 < 0.10, row


def test_cli_bad_input_prints_one_line_and_exits_2(tmp_path):
    import subprocess
    import sys

    for args, field in [
        (["--preset", "nope", "--tokens", "1e3"], "recipe"),
        (["--tokens", "-5"], "tokens"),
        (["--corpus", str(tmp_path / "missing.txt"), "--tokens", "1e3"], "data.corpus"),
    ]:
        r = subprocess.run(
            [sys.executable, "-m", "workers.train", *args, "--out", str(tmp_path / "x")],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 2 and field in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()  # nothing was started


def test_tuple_overrides_are_canonical_so_the_same_spec_resumes(tmp_path):
    """A Python caller's tuple must not make the rerun of the same spec look like a different spec."""
    base = tiny_spec()
    d = {**base, "model": {**base["model"], "value_embeds": (1, 3)}}
    spec = train.Spec.from_dict(d)
    assert spec.to_dict()["model"]["value_embeds"] == [1, 3]
    assert jobs.validate("train", d) == train.Spec.from_dict(json.loads(json.dumps(d))).to_dict()
    train.check_artifact_dir(spec, tmp_path)
    train.check_artifact_dir(train.Spec.from_dict(d), tmp_path)  # used to raise "model: ... differing"
    with pytest.raises(ConfigError, match="model"):
        train.Spec.from_dict({**tiny_spec(), "model": {"h0_std": object()}})
