"""Model families through the jobs (model/contract/): the family as a spec field that leaves every
looplab run's hash as it was, refused at submission when it breaks the contract (nothing stored), and
the example family (examples/universal_transformer.py) through train, depth_sweep, decode_bench and
eval, through the real queue on local Ray too."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from looplab import Grid, Queue
from looplab.model.errors import ConfigError
from looplab.orchestrator.grid import assign_hashes, expand
from looplab.workers import jobs
from looplab.workers.reporter import MemoryReporter
from tests.db_rows import rows
from tests.workers.conftest import tiny_spec

ROOT = Path(__file__).resolve().parents[2]
UT = "examples.universal_transformer:factory"
FAMILY = {"family": UT, "family_config": {"d_model": 32, "n_heads": 2}, "optimizer": "adamw"}
# The config hashes of a looplab grid as the code before families computed them: stored runs keep them.
PINNED = {
    ("train", 0): "902d3e516c234fc423295dc2ba2599ecd1cbec385bf653fcb877d69aff3ffa7c",
    ("depth_sweep", 0): "8cdb8664ed4ff76f58f24a508e954cff43955ac1e56bba9b653ffc1b5d983efe",
    ("decode_bench", 0): "d4c9bd948237a421c3eb36a95f6b829f192961f98c337bb7b66937dc09546f6c",
    ("eval", 0): "d7277937b410c55fe909e9825b2a5e39295bcc570ab326344201e104a9cb48a0",
    ("train", 1): "f888851f5378b39d8e640479d2e28a2800bf4796c074c2caa020d86044fae4cb",
    ("eval", 1): "f8f0b01d6bc226bd37f966168cfab0b5347285d1d6a1120a08d38bb1c44531fd",
}


def _plans(base: dict, sweep: dict | None = None) -> list:
    grid = Grid("g", base=base, sweep=sweep or {}, then=["depth_sweep", "decode_bench", "eval"])
    plans = expand([grid], jobs)
    assign_hashes(plans, {}, jobs)
    return plans


def test_looplab_runs_keep_their_hashes():
    plans = _plans(tiny_spec(), {"seed": [0, 1]})
    by_kind: dict[str, list[str]] = {}
    for p in plans:
        by_kind.setdefault(p.kind, []).append(p.config_hash)
    for (kind, n), want in PINNED.items():  # n: the n-th job of its kind (seed n; one decode bench)
        assert by_kind[kind][n] == want, kind
    assert all("family" not in p.spec and "family_config" not in p.spec for p in plans)


def test_a_family_is_part_of_the_run_and_of_its_variant():
    looped = {p.kind: p for p in _plans(tiny_spec())}
    ut = {p.kind: p for p in _plans(tiny_spec(**FAMILY))}
    assert ut["train"].spec["family"] == UT and ut["decode_bench"].spec["family_config"] == {
        "d_model": 32,
        "n_heads": 2,
    }
    assert all(ut[k].config_hash != looped[k].config_hash for k in ("train", "decode_bench"))
    facts = ut["train"].family_facts
    assert facts["n_params"] > 0 and facts["flops_per_token"] > 0 and ut["decode_bench"].family_facts == facts


def test_a_flop_budget_of_a_family_is_counted_at_its_own_flops(tmp_path, looplab_cache):
    from looplab.orchestrator.submission import model_columns

    flops = 2.0e9  # about 20 steps of 256 tokens at ~393k FLOPs per token
    spec = tiny_spec(**FAMILY, tokens=None, flops=flops)
    plans = _plans(spec)
    (cols,) = [c for p, c in zip(plans, model_columns(plans), strict=True) if p.kind == "train"]
    per_token, per_step = plans[0].family_facts["flops_per_token"], 8 * 32
    assert cols["budget_tokens"] == int(flops / per_token) // per_step * per_step
    assert cols["flops_per_token"] == per_token and cols["injection"] is None  # not LoopedLM's figures
    train = jobs.run("train", plans[0].spec, MemoryReporter(), tmp_path)
    assert train["tokens"] == cols["budget_tokens"]  # the trainer counts the same whole steps


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({"family_config": {"d": 1}}, "family_config: only for a family other than 'looped'"),
        ({"family": UT, "family_config": {"vocab_size": 9}}, "family_config.vocab_size: set by looplab"),
        ({"family": 3}, "family: expected 'looped'"),
        ({"family": UT, "family_config": [1]}, "family_config: expected a mapping"),
    ],
)
def test_bad_family_fields_are_refused_naming_the_field(given, expected):
    with pytest.raises(ConfigError, match=expected):
        jobs.validate("train", tiny_spec(**given))


@pytest.mark.parametrize(
    ("family", "expected"),
    [
        ("no_such_package_xyz:make", "does not import"),
        ("tests.model.test_contract:ignores_loops", "same logits at loops=1 and loops=2"),
        ("tests.model.test_contract:wrong_shape", "expected a tensor of shape (B, T, V)"),
    ],
)
def test_a_bad_family_is_refused_at_submission_and_nothing_is_stored(tmp_path, family, expected):
    q = Queue(db=tmp_path / "q.db", artifacts=tmp_path / "art")
    with pytest.raises(ConfigError) as e:
        q.submit([Grid("bad", base=tiny_spec(family=family), then=["depth_sweep"])])
    assert f"grid 'bad': family {family!r}" in str(e.value) and expected in str(e.value)
    assert rows(q, "SELECT COUNT(*) FROM jobs") == [(0,)]


def test_the_example_family_runs_every_job_kind(tmp_path, looplab_cache):
    spec = jobs.validate("train", tiny_spec(**FAMILY, model={"loops": 3}, tokens=8 * 32 * 40))
    train = jobs.run("train", spec, MemoryReporter(), tmp_path / "train")
    assert train["final_val_loss"] < math.log(256)  # it learned something
    facts = json.loads((tmp_path / "train" / "family.json").read_text())
    assert facts["flops_measured"] and facts["flops_per_token"] == train["flops_per_token"] > 0
    assert facts["capabilities"]["round_states"] and not facts["split_dependent"]

    sweep = jobs.validate(
        "depth_sweep",
        {
            "checkpoint": str(tmp_path / "train"),
            "loops": [1, 3],
            "eval_tokens": 1024,
            "interaction_loops": [2],
        },
    )
    out = jobs.run("depth_sweep", sweep, MemoryReporter(), tmp_path / "sweep")
    assert [e["loops"] for e in out["depth_evals"]] == [1, 3]
    assert out["depth_evals"][1]["val_loss"] == pytest.approx(train["final_val_loss"], rel=1e-5)
    assert len(out["round_deltas"]) == 1 + 3 and out["round_interactions"]  # its round_states

    arch = {k: spec[k] for k in ("recipe", "size", "model", "family", "family_config")}
    bench = jobs.validate("decode_bench", {**arch, "context_lens": [48], "batch_sizes": [1], "steps": 2})
    (row,) = jobs.run("decode_bench", bench, MemoryReporter(), tmp_path / "bench")["rows"]
    assert row["arch"].endswith("(full recompute)") and row["kv_cache_mb"] == 0 and row["ms_per_token"] > 0

    ev = jobs.validate(
        "eval",
        {"checkpoint": str(tmp_path / "train"), "tasks": ["deduction"], "loops": [1, 3], "n_per_subset": 2},
    )
    scores = jobs.run("eval", ev, MemoryReporter(), tmp_path / "eval")["task_scores"]
    assert {(s["loops"], s["subset"]) for s in scores} >= {(1, "all"), (3, "all")}


def test_a_split_dependent_family_refuses_another_split_on_resume(tmp_path, looplab_cache):
    from looplab.workers.train import job as train_job
    from looplab.workers.train.trainer import Trainer

    given = tiny_spec(family="tests.model.test_contract:dropping", optimizer="adamw", tokens=8 * 32 * 4)
    spec = train_job.Spec.from_dict(given)
    jobs.run("train", spec.to_dict(), MemoryReporter(), tmp_path)
    assert json.loads((tmp_path / "family.json").read_text())["split_dependent"]
    other = train_job.Spec.from_dict({**given, "micro_batch_size": 4})
    with pytest.raises(ConfigError, match="draws randomness from the global generator.*micro_batch_size"):
        Trainer(other, MemoryReporter(), tmp_path).run()
    Trainer(spec, MemoryReporter(), tmp_path).run()  # the same split resumes


HUGINN = {
    "family": "families.huginn:factory",
    "family_config": {"d_model": 32, "n_heads": 2, "mlp": 48, "mean_recurrence": 2},
    "optimizer": "adamw",
}


# the example family stating its own shape (model/shape.py): no recipe, size or model overrides
SHAPED = {**FAMILY, "loops": 2}


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.parametrize("family", [FAMILY, HUGINN, SHAPED], ids=["example", "huginn", "shaped"])
def test_a_grid_of_a_family_runs_through_the_queue(tmp_path, ray_cluster, monkeypatch, family):
    q = Queue(db=tmp_path / "q.db", artifacts=tmp_path / "art")
    if "loops" in family:
        base = {k: v for k, v in tiny_spec(**family).items() if k not in ("recipe", "size", "model")}
    else:
        base = {**tiny_spec(**family, model={"loops": 2}), "seed": 0}
    grid = Grid(
        "ut",
        base=base,
        then=["depth_sweep", "decode_bench", "eval"],
        follow={
            "depth_sweep": {"loops": [1, 2], "eval_tokens": 512, "interaction_loops": [2]},
            "decode_bench": {"context_lens": [48], "batch_sizes": [1], "steps": 2},
            "eval": {"tasks": ["deduction"], "loops": [1, 2], "n_per_subset": 2},
        },
    )
    ids = q.submit([grid])
    q.run(until_empty=True, progress=False, poll_s=0.2, max_concurrent=1)
    st = q.status().set_index("id")
    assert set(st["status"]) == {"succeeded"}, st[["kind", "status", "error"]]
    labels = rows(q, "SELECT DISTINCT variant_label, flops_per_token FROM jobs WHERE kind='train'")
    assert family["family"] in labels[0][0] and labels[0][1] > 0
    assert len(ids) == 4 and rows(q, "SELECT COUNT(*) FROM depth_evals") == [(2,)]

    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("LOOPLAB_DB", f"sqlite:///{tmp_path / 'q.db'}")
    at = AppTest.from_file(str(ROOT / "dashboard" / "app.py"), default_timeout=60)
    at.run()
    for page in ("runs", "compare", "depth"):
        at.switch_page(f"views/{page}.py").run()
        assert not at.exception, (page, [e.message for e in at.exception])
    at.switch_page("views/runs.py").run()
    (runs,) = [d.value for d in at.dataframe if "flops_per_token" in d.value.columns][:1]
    assert runs["variant_label"].str.contains(family["family"]).all() and (runs["flops_per_token"] > 0).all()
