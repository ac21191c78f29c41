"""The train job: spec validation, reports, artifacts, time budget, refusal of bad input before work."""

from __future__ import annotations

import hashlib
import json
import math

import pytest
import torch

from looplab.model.errors import ConfigError
from looplab.orchestrator.schema import TrainResult
from looplab.workers import checkpoint as ckpt
from looplab.workers import jobs
from looplab.workers.artifacts import resume_from
from looplab.workers.data.shards import prepare, unigram_xent
from looplab.workers.reporter import UNIGRAM_XENT, MemoryReporter
from looplab.workers.train import job as train
from tests.workers.conftest import TINY_MODEL, tiny_spec


def test_spec_round_trip_fills_defaults():
    d = train.Spec.from_dict({"recipe": "lean", "tokens": 2e6}).to_dict()
    assert d["tokens"] == 2_000_000 and d["time_s"] is None and d["optimizer"] == "parcae"
    assert d["lr"] is None and d["adam_lr"] is None and d["weight_decay"] is None  # the optimizer's own
    assert d["eval_loops"] is None
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
        ({"weight_decay": -0.1}, "weight_decay"),
        ({"eval_loops": [0]}, "eval_loops"),
        ({"eval_loops": 4}, "eval_loops"),
        ({"data": {"vocab_size": 100}}, "data.vocab_size"),
        ({"data": {"corpus": "offline", "bogus": 1}}, "data: unknown key 'bogus'"),
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
    # every column but the key and what only the queue's driver knows (what else ran beside the job)
    cols = {c.name for c in TrainResult.__table__.columns} - {"job_id", "concurrent_jobs"}
    assert set(rows[0]) == cols
    row = rows[0]
    assert row["steps"] == 200 and row["tokens"] == 200 * 8 * 32 and row["device"] == "cpu"
    assert row["final_val_loss"] < math.log(256) and row["final_val_bpb"] > 0
    assert row["train_seconds"] > 0 and row["eval_seconds"] > 0 and row["ckpt_seconds"] > 0
    keys = {p["key"] for p in rep.of("metric")}
    depth_keys = {"val_loss@1", "val_loss@2", "val_loss@4", "val_loss@8"}  # fixed4 is looped: the default
    assert keys == {
        "train_loss",
        "val_loss",
        "val_bpb",
        "lr",
        "tokens_per_s",
        "peak_mem_mb",
        UNIGRAM_XENT,
    } | (depth_keys)
    # the data's unigram baseline, once at step 0 (the health rule `unigram`), which the run is under
    baseline = unigram_xent(prepare(train.Spec.from_dict(tiny_spec(tokens=8 * 32 * 200)).data))
    assert rep.curve(UNIGRAM_XENT) == [(0, baseline)] and row["final_val_loss"] < baseline
    lr = dict(rep.curve("lr"))
    assert lr[199] == 0.0 and lr[0] > 0  # the decay completes on the last step
    tl = rep.curve("train_loss")
    assert tl[-1][1] < tl[0][1]
    walls = [p["wall_s"] for p in rep.of("metric") if p["key"] == "train_loss"]
    assert walls == sorted(walls) and walls[-1] == pytest.approx(row["train_seconds"], rel=1e-6)
    assert [p["step"] for p in rep.of("checkpoint")] == [50, 100, 150, 200, 200]
    assert json.loads((out / "spec.json").read_text())["tokens"] == 200 * 8 * 32
    final = ckpt.load(out / "final.pt")
    assert final["final"] and final["trainer"]["step"] == 200 and "optimizers" not in final


def test_train_time_depth_curves_share_the_evaluations_points(trained_fixed4):
    """val_loss@N at each evaluation, at val_loss's step/tokens/wall_s; @4 (trained count) is val_loss."""
    _, rep = trained_fixed4
    points = {}
    for p in rep.of("metric"):
        if p["key"].startswith("val_loss"):
            points.setdefault(p["key"], []).append(p)
    where = [(p["step"], p["tokens"], p["wall_s"]) for p in points["val_loss"]]
    assert [s for s, _, _ in where] == [99, 199]
    for n in (1, 2, 4, 8):
        assert [(p["step"], p["tokens"], p["wall_s"]) for p in points[f"val_loss@{n}"]] == where
    assert [p["value"] for p in points["val_loss@4"]] == [p["value"] for p in points["val_loss"]]
    last = {n: points[f"val_loss@{n}"][-1]["value"] for n in (1, 2, 4, 8)}
    assert len(set(last.values())) == 4 and last[4] < last[1]  # distinct evaluations; loops help


def test_eval_loops_default_by_recipe_and_explicit():
    plain = train.Spec.from_dict(tiny_spec(recipe="plain"))
    assert plain.resolved_eval_loops(plain.model_config(256)) == [1]
    looped = train.Spec.from_dict(tiny_spec(recipe="parcae"))
    assert looped.resolved_eval_loops(looped.model_config(256)) == [1, 2, 4, 8]
    given = train.Spec.from_dict(tiny_spec(recipe="plain", eval_loops=[3, 1, 3]))
    assert given.eval_loops == [1, 3] and given.resolved_eval_loops(given.model_config(256)) == [1, 3]


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
    before = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in out.rglob("*") if p.is_file()}
    with pytest.raises(ConfigError, match="seed"):
        train.run(train.Spec.from_dict(d), MemoryReporter(), out)
    assert {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in out.rglob("*") if p.is_file()
    } == before


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
    assert ckpt.load(resume_from(tmp_path))["trainer"]["step"] == 7
    rep = MemoryReporter()
    train.run(spec, rep, tmp_path)
    assert rep.of("resumed") == [{"step": 7}] and [s for s, _ in rep.curve("train_loss")] == list(
        range(7, 12)
    )


@pytest.mark.parametrize(
    "recipe, overrides",
    [
        ("base_loop", {"injection": "scalar", "history": 1, "timestep": "loop_gate"}),
        ("core_loop", {"injection": "dense", "timestep": "adaln"}),
        ("base_loop", {"injection": "channel", "timestep": "branch_gate", "history": 2}),
    ],
    ids=["base_loop-scalar-history1-loop_gate", "core_loop-dense-adaln", "base_loop-channel-branch_gate-h2"],
)
def test_loop_design_variants_resume_bit_for_bit(looplab_cache, tmp_path, recipe, overrides):
    """A loop-design variant (injection maps, history maps, per-round timestep parameters in the
    checkpoint and the optimizer state) stopped at step 7 and resumed gives the uninterrupted curve."""

    class StopAt(MemoryReporter):
        def should_stop(self):
            return len(self.curve("train_loss")) >= 7

    spec = train.Spec.from_dict(
        tiny_spec(recipe=recipe, tokens=8 * 32 * 12, ckpt_every=5, model={**TINY_MODEL, **overrides})
    )
    ref = MemoryReporter()
    train.run(spec, ref, tmp_path / "ref")
    with pytest.raises(jobs.JobInterrupted):
        train.run(spec, StopAt(), tmp_path / "run")
    resumed = MemoryReporter()
    train.run(spec, resumed, tmp_path / "run")
    assert resumed.of("resumed") == [{"step": 7}]
    want = dict(ref.curve("train_loss"))
    got = dict(resumed.curve("train_loss"))
    assert sorted(got) == list(range(7, 12)) and all(got[s] == want[s] for s in got)  # exact equality
    a = ckpt.load(tmp_path / "ref" / "final.pt")["model"]
    b = ckpt.load(tmp_path / "run" / "final.pt")["model"]
    assert any("timestep" in k for k in a) and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow  # docs/testing.md: trains for its 6-second budget
def test_time_budget_lands_within_ten_percent(looplab_cache, tmp_path, monkeypatch):
    from looplab.workers.train import trainer

    resets = []
    monkeypatch.setattr(trainer, "reset_peak_mem", lambda device: resets.append(device))
    spec = train.Spec.from_dict(tiny_spec(tokens=None, time_s=6.0, log_every=10))
    rep = MemoryReporter()
    row = train.run(spec, rep, tmp_path)
    assert len(resets) == 1  # the peak is measured from after the calibration's copy
    schedule = ckpt.load(resume_from(tmp_path))["trainer"]["schedule"]  # saved with the run
    assert schedule["total_steps"] == row["steps"] and schedule["last_step"] == row["steps"] - 1
    assert row["time_budget_s"] == 6.0 and row["calib_tokens_per_s"] > 0
    assert (
        json.loads((tmp_path / "calibration.json").read_text())["calib_tokens_per_s"]
        == row["calib_tokens_per_s"]
    )
    assert dict(rep.curve("lr"))[row["steps"] - 1] == 0.0
    assert abs(row["train_seconds"] - 6.0) / 6.0 < 0.10, row


def test_cli_bad_input_prints_one_line_and_exits_2(tmp_path, capsys):
    """In-process, as the next test: `python -m looplab.workers.train` is this `main` (test_resume.py runs
    the real command)."""
    from looplab.workers.train.cli import main

    for args, field in [
        (["--preset", "nope", "--tokens", "1e3"], "recipe"),
        (["--tokens", "-5"], "tokens"),
        (["--corpus", str(tmp_path / "missing.txt"), "--tokens", "1e3"], "data.corpus"),
    ]:
        with pytest.raises(SystemExit) as e:
            raise SystemExit(main([*args, "--out", str(tmp_path / "x")]))
        err = capsys.readouterr().err
        assert e.value.code == 2 and field in err, err
        assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()  # nothing was started


@pytest.mark.parametrize(
    "args,line",
    [
        (["--tokens", "abc"], "error: tokens: expected an integer or null, got 'abc'"),
        (["--tokens", "1e3", "--model", "d_model"], "error: model: expected KEY=VALUE, got 'd_model'"),
        (["--tokens", "1e3", "--eval-loops", "1,x"], "error: eval_loops: expected an integer"),
        (["--tokens", "1e3", "--optimizer", "sgd"], "error: optimizer: unknown 'sgd'"),
        (["--tokens"], "error: tokens: expected one argument"),
        (["--tokens", "1e3", "--bogus", "1"], "error: unrecognized arguments: --bogus 1"),
    ],
)
def test_cli_errors_are_one_line_naming_the_field(args, line, tmp_path, capsys):
    from looplab.workers.train.cli import main

    out = tmp_path / "x"
    with pytest.raises(SystemExit) as e:
        raise SystemExit(main([*args, "--out", str(out)]))
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and err.startswith(line) and len(err.splitlines()) == 1, err
    assert not out.exists()


def test_cli_passes_only_given_flags_so_defaults_live_in_the_spec():
    from looplab.workers.train.cli import build_parser

    parser = build_parser()
    args = parser.parse_args(
        [
            "--preset",
            "parcae",
            "--tokens",
            "2e6",
            "--out",
            "o",
            "--model",
            "loops=3",
            "--model",
            "value_embeds=[1,3]",
            "--eval-loops",
            "1,4",
            "--no-compile",
            "--vocab-size",
            "300",
            "--tokenizer",
            "bpe",
        ]
    )
    given = parser.spec_dict(args)
    assert given == {
        "recipe": "parcae",
        "tokens": 2e6,
        "model": {"loops": 3, "value_embeds": [1, 3]},
        "eval_loops": [1, 4],
        "compile": False,
        "data": {"vocab_size": 300, "tokenizer": "bpe"},
    }
    spec = train.Spec.from_dict(given)
    assert spec.tokens == 2_000_000 and spec.batch_size == train.Spec.batch_size
    assert spec.to_dict() == train.Spec.from_dict({**spec.to_dict()}).to_dict()
    assert parser.spec_dict(parser.parse_args(["--out", "o"])) == {}


def test_every_cli_has_a_flag_with_help_for_every_spec_field():
    import dataclasses

    from looplab.workers.data.shards import DataSpec
    from looplab.workers.evaluate import decode_bench, depth_sweep
    from looplab.workers.spec_cli import field_docs
    from looplab.workers.train.cli import build_parser

    for spec_cls, parser in [
        (train.Spec, build_parser()),
        (depth_sweep.Spec, depth_sweep.build_parser()),
        (decode_bench.Spec, decode_bench.build_parser()),
    ]:
        names = [f.name for f in dataclasses.fields(spec_cls) if f.name != "data"]
        if spec_cls is train.Spec:
            names += [f.name for f in dataclasses.fields(DataSpec)]
        help_text = "".join(parser.format_help().split())  # no whitespace: lines wrap at hyphens too
        docs = {**field_docs(spec_cls), **field_docs(DataSpec)}
        for name in names:
            assert f"--{name.replace('_', '-')}" in help_text, name
            assert "".join(docs[name].split()) in help_text, name
    assert "(default:1234)" in "".join(depth_sweep.build_parser().format_help().split())


def test_compile_time_is_kept_out_of_train_seconds(looplab_cache, tmp_path, monkeypatch):
    """The first step of an attempt (where the compiled parts compile) is timed as compile_seconds."""
    import time

    import torch

    class SlowFirstCall:  # stands in for a compiled part: the first call takes a while
        def __init__(self, part, **compile_kwargs):
            self.part, self.calls = part, 0

        def __call__(self, *args, **kwargs):
            self.calls += 1
            if self.calls == 1:
                time.sleep(0.2)
            return self.part(*args, **kwargs)

    monkeypatch.setattr(torch, "compile", SlowFirstCall)
    rep = MemoryReporter()
    out = train.run(train.Spec.from_dict(tiny_spec(tokens=8 * 32 * 3, compile=True)), rep, tmp_path)
    assert out["compile_seconds"] >= 3 * 0.2  # stem, round and tail each compile in the first step
    walls = [p["wall_s"] for p in rep.of("metric") if p["key"] == "train_loss"]
    assert walls[0] == 0.0 and walls[-1] == out["train_seconds"] > 0  # step 0 is not training time
    assert "compile_seconds" not in next(e["row"] for e in rep.of("result"))  # not a result column


def test_trainer_passes_the_loop_counts_on_the_cpu(looplab_cache, tmp_path, monkeypatch):
    """The sampler's CPU tensor goes to the model as it is: a device copy would cost a sync per step
    on a GPU (on the CPU `.to` is free, so the counts refuse to be moved at all)."""
    import torch

    from looplab.families.looped.model import LoopedLM

    class StayOnHost(torch.Tensor):
        def to(self, *args, **kwargs):
            raise AssertionError("the loop counts were moved to the device")

    sample = LoopedLM.sample_loops
    monkeypatch.setattr(
        LoopedLM, "sample_loops", lambda *a, **kw: torch.Tensor._make_subclass(StayOnHost, sample(*a, **kw))
    )
    out = train.run(
        train.Spec.from_dict(tiny_spec(tokens=8 * 32 * 2, recipe="parcae")), MemoryReporter(), tmp_path
    )
    assert out["steps"] == 2


@pytest.mark.slow
def test_cli_compiled_training_of_a_per_batch_recipe(looplab_cache, tmp_path):
    """The command that used to fail at its second step: per-batch Poisson loop counts, compiled with
    the default backend. It finishes, and the compiler never hits its recompile limit (which would
    fall back to running uncompiled)."""
    import os
    import subprocess
    import sys

    out = tmp_path / "run"
    args = ["--preset", "parcae_per_batch", "--size", "tiny", "--tokens", "2000", "--compile"]
    args += ["--eval-tokens", "256", "--eval-loops", "8", "--eval-every", "1000", "--ckpt-every", "1000"]
    r = subprocess.run(
        [sys.executable, "-m", "looplab.workers.train.job", *args, "--device", "cpu", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "recompile_limit" not in r.stderr and "compile_seconds" in r.stdout
    final = ckpt.load(out / ckpt.FINAL)
    assert final["trainer"]["step"] == 3 and final["trainer"]["compile_seconds"] > 0


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
