"""A family's grid states its run's shape (model/shape.py: vocabulary, context, loops, batch, tokens) as
its own keys and names no `recipe` or `size` of looplab's: submission, the planner and the trainer
read the family's config from one `RunShape`, so the shape given is the shape checked, priced and
trained. A family grid that names a recipe and size (the families study's) keeps its stored spec and
hash, and looplab's own runs serialise as recipe/size/model as before."""

from __future__ import annotations

import json

import pytest

from looplab import Grid, Queue
from looplab.model.errors import ConfigError
from looplab.model.shape import FAMILY_BATCH, FAMILY_LOOPS, FAMILY_SEQ_LEN, RunShape
from looplab.orchestrator.grid import assign_hashes, expand
from looplab.workers import jobs
from looplab.workers.reporter import MemoryReporter
from tests.db_rows import rows
from tests.workers.conftest import tiny_spec

UT = "examples.universal_transformer:factory"
# a family's whole grid: no recipe, no size, no model overrides
SHAPED = {
    **{k: v for k, v in tiny_spec().items() if k not in ("recipe", "size", "model")},
    "family": UT,
    "family_config": {"d_model": 32, "n_heads": 2},
    "optimizer": "adamw",
    "seq_len": 48,
    "loops": 3,
    "batch_size": 4,
    "tokens": 4 * 48 * 6,
}
FOLLOW = {"decode_bench": {"context_lens": [40], "batch_sizes": [1], "steps": 2}}


def _plans(base: dict) -> list:
    plans = expand([Grid("g", base=base, then=["decode_bench"], follow=FOLLOW)], jobs)
    assign_hashes(plans, {}, jobs)
    return plans


def test_the_shape_is_checked_once_naming_the_field():
    assert RunShape(256, 64, 4, 8, 512).tokens_per_step == 512
    for bad, field in (((256, 1, 4), "seq_len"), ((256, 64, 0), "loops"), ((256, 64, 4, 0), "batch_size")):
        with pytest.raises(ConfigError, match=f"^{field}: "):
            RunShape(*bad)


def test_a_family_grid_names_no_recipe_or_size_and_its_shape_is_its_own():
    train, bench = _plans(SHAPED)
    for plan in (train, bench):  # nothing of looplab's own model is stored with a family's run
        assert not {"recipe", "size", "model"} & set(plan.spec), plan.spec
    assert train.spec["loops"] == 3 and train.spec["seq_len"] == 48
    assert bench.spec["loops"] == 3 and bench.spec["seq_len"] == 48  # the architecture it benches
    shape = jobs.validate("train", SHAPED)
    from looplab.workers.train.spec import Spec

    assert Spec.from_dict(shape).run_shape() == RunShape(256, 48, 3, 4, 4 * 48 * 6)


def test_looped_lm_keys_are_refused_on_a_shaped_family_and_loops_on_looplab_s_own():
    with pytest.raises(ConfigError, match="^loops: "):  # model.loops is the older spelling's, not both
        jobs.validate("train", {**SHAPED, "model": {"loops": 2}})
    with pytest.raises(ConfigError, match="^loops: "):
        jobs.validate("train", {"recipe": "fixed4", "loops": 2, "tokens": 512})
    with pytest.raises(ConfigError, match="^loops: "):
        jobs.validate("train", {**SHAPED, "loops": 0})


def test_a_family_s_defaults_are_the_shape_it_trained_at_before():
    spec = {k: v for k, v in SHAPED.items() if k not in ("seq_len", "loops", "batch_size")}
    from looplab.workers.train.spec import Spec

    shape = Spec.from_dict(spec).run_shape()
    assert (shape.seq_len, shape.loops, shape.batch_size) == (FAMILY_SEQ_LEN, FAMILY_LOOPS, FAMILY_BATCH)


def test_submission_checks_and_prices_the_family_at_its_shape(tmp_path):
    from looplab.lab.planner import Calibration
    from looplab.lab.planner.estimates import TimeModel

    train, _ = _plans(SHAPED)
    wide, _ = _plans({**SHAPED, "seq_len": 96})
    # the conformance check built the family at the shape's context: a longer context costs more FLOPs
    assert wide.family_facts["flops_per_token"] > train.family_facts["flops_per_token"] > 0
    cal = Calibration(
        device="cpu", flops_per_s=1e9, decode_layer_s=1e-4, save_bytes_per_s=1e12, startup_s=2.0
    )
    cost = TimeModel(None, cal, "cpu").train_cost("train", train.spec)
    assert cost.flops_per_token == train.family_facts["flops_per_token"] and cost.steps == 6
    # its memory is the family's own, priced at the shape (the context the factory is given)
    from looplab.model.memory import family_training_memory

    assert json.loads(cost.family.config_json)["seq_len"] == 48
    assert cost.memory["cpu"] == family_training_memory(cost.family, 3, 4, "cpu", "adamw") > 0
    q = Queue(db=tmp_path / "q.db", artifacts=tmp_path / "art")
    q.submit([Grid("shaped", base=SHAPED, then=["decode_bench"], follow=FOLLOW)])
    got = rows(q, "SELECT kind, recipe, size, loops, variant_label, n_params FROM jobs ORDER BY id")
    assert [r[0] for r in got] == ["train", "decode_bench"]
    for _, recipe, size, loops, label, n_params in got:
        assert recipe is None and size is None and loops == 3 and UT in label and n_params > 0


def test_a_family_trains_at_its_shape(tmp_path, looplab_cache):
    spec = jobs.validate("train", {**SHAPED, "micro_batch_size": "auto"})  # fitted by its own memory
    out = jobs.run("train", spec, MemoryReporter(), tmp_path)
    assert out["tokens"] == 4 * 48 * 6
    facts = json.loads((tmp_path / "family.json").read_text())
    assert facts["flops_per_token"] == out["flops_per_token"] > 0
    sweep = jobs.validate("depth_sweep", {"checkpoint": str(tmp_path), "loops": [1, 3], "eval_tokens": 1024})
    evals = jobs.run("depth_sweep", sweep, MemoryReporter(), tmp_path / "sweep")["depth_evals"]
    assert [e["loops"] for e in evals] == [1, 3]  # the trained count's loss is the run's final loss
    assert evals[1]["val_loss"] == pytest.approx(out["final_val_loss"], rel=1e-5)
    (bench_plan,) = [p for p in _plans(SHAPED) if p.kind == "decode_bench"]
    (row,) = jobs.run("decode_bench", bench_plan.spec, MemoryReporter(), tmp_path / "bench")["rows"]
    assert row["ms_per_token"] > 0 and row["arch"] == f"{UT} (full recompute)" and row["size"] is None


def test_a_family_grid_with_a_recipe_and_size_keeps_its_stored_spec():
    legacy = {k: v for k, v in SHAPED.items() if k != "loops"}
    train, bench = _plans({**legacy, "recipe": "fixed4", "size": "tiny", "model": {"loops": 3}})
    assert train.spec["recipe"] == "fixed4" and train.spec["model"] == {"loops": 3}
    assert "loops" not in train.spec and "loops" not in bench.spec and "seq_len" not in bench.spec
    # a family grid of the older spelling, its loop count as model.loops: read and stored as before
    (old, _) = _plans({**legacy, "model": {"loops": 3}})
    assert (old.spec["recipe"], old.spec["size"], old.spec["model"]) == ("lean", "tiny", {"loops": 3})


def test_the_own_model_page_s_grid_submits_as_a_shaped_family():
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "own-model.md").read_text()
    section = page[page.index("## In a grid") :]
    code = "\n".join(line[4:] for line in section.split("\n\n")[1].splitlines())  # its indented block
    grid = eval(code, {"Grid": Grid})  # noqa: S307 - the page's own example
    plans = expand([grid], jobs)
    train = plans[0]
    assert train.spec["loops"] == 3 and train.spec["seq_len"] == 32 and "recipe" not in train.spec
    assert {p.kind for p in plans} == {"train", "depth_sweep", "decode_bench", "eval"}


def test_the_planner_prices_every_job_of_a_shaped_family_and_a_wider_one_costs_more():
    from looplab.lab.planner import Calibration
    from looplab.lab.planner.estimates import TimeModel, estimate_plans

    cal = Calibration(
        device="cpu", flops_per_s=1e9, decode_layer_s=1e-4, save_bytes_per_s=1e12, startup_s=2.0
    )
    follow = {**FOLLOW, "eval": {"tasks": ["deduction"], "n_per_subset": 2}}
    priced = {}
    for width in (32, 64):
        base = {**SHAPED, "family_config": {"d_model": width, "n_heads": 2}}
        plans = expand(
            [Grid("g", base=base, then=["depth_sweep", "eval", "decode_bench"], follow=follow)], jobs
        )
        estimates = estimate_plans(TimeModel(None, cal, "cpu"), plans)
        priced[width] = {p.kind: e for p, e in zip(plans, estimates, strict=True)}
    assert set(priced[32]) == {"train", "depth_sweep", "eval", "decode_bench"}
    for kind, narrow in priced[32].items():  # twice the width: more FLOPs and time for every job
        assert priced[64][kind].flops > narrow.flops > 0 and priced[64][kind].seconds > narrow.seconds, kind
