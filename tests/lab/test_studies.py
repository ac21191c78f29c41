"""The iso-depth study grid: every (r, width) member at every FLOP budget and seed, with the token
budget the queue derives from the FLOP model for that member, a label per variant and a depth sweep per
run. Validation and submission only: nothing trains."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

from looplab import Queue
from looplab.lab.studies import iso_depth_grid, iso_depth_label
from looplab.model.counts import arch_summary, tokens_for_flops
from looplab.model.errors import ConfigError
from looplab.model.presets import iso_depth
from looplab.orchestrator.grid import expand
from looplab.workers import jobs

DATA = {"corpus": "offline", "tokenizer": "byte"}  # byte tokenizer: vocabulary 256, no file needed
TRAIN = {"batch_size": 4, "seq_len": 32}


def _trains(q: Queue) -> list[dict]:
    with q.eng.connect() as conn:
        rows = conn.execute(sa.text("SELECT * FROM jobs WHERE kind = 'train' ORDER BY id"))
        return [dict(row._mapping) for row in rows]


def test_budgets_match_the_flop_model_for_each_variant(tmp_path):
    flops = [2e10, 6e10]
    grids = iso_depth_grid(
        r=[1, 2, 4], widths=[32, 64], flops=flops, seeds=[0, 1], name="iso", data=DATA, head_dim=16, **TRAIN
    )
    q = Queue(db=tmp_path / "q.db", artifacts=tmp_path / "art")
    q.submit(grids)
    rows = _trains(q)
    assert len(rows) == 3 * 2 * 2 * 2
    seen = set()
    for row in rows:
        spec = json.loads(row["config"])
        r, width = row["loops"], row["d_model"]
        # the member rebuilt independently, at the byte vocabulary and the grid's sequence length
        cfg = iso_depth(r, width, head_dim=16, vocab_size=256, seq_len=32)
        assert tokens_for_flops(cfg, spec["flops"], 4, 32) == row["budget_tokens"], (r, width)
        assert row["budget_flops"] == spec["flops"] and spec["flops"] in flops
        summary = arch_summary(cfg, 4)
        assert (row["n_once"], row["n_rec"]) == (summary["n_once"], summary["n_rec"])
        assert row["flops_per_token"] == pytest.approx(summary["flops_per_token"])
        assert row["effective_depth"] == 20.0 and row["n_recurrent"] * r == 16
        assert row["injection"] == ("none" if r == 1 else "diagonal")
        assert row["variant_label"] == iso_depth_label(r, width)
        assert spec["eval_loops"] == [r]
        seen.add((r, width, spec["flops"], row["seed"]))
    assert len(seen) == len(rows)  # every combination once
    # a bigger budget buys more tokens; at one budget the cheaper (narrower) member trains on more
    by = {(row["loops"], row["d_model"], row["budget_flops"]): row["budget_tokens"] for row in rows}
    assert by[(2, 32, 6e10)] > by[(2, 32, 2e10)] and by[(2, 32, 2e10)] > by[(2, 64, 2e10)]
    with q.eng.connect() as conn:
        sweeps = conn.execute(sa.text("SELECT COUNT(*) FROM jobs WHERE kind = 'depth_sweep'")).scalar()
    assert sweeps == len(rows)
    assert q.submit(grids) and q.last_added == []  # idempotent


def test_variants_are_one_zip_group_and_train_keys_pass_through():
    (grid,) = iso_depth_grid(
        r=[8, 1], widths=[64], flops=[1e12], seeds=[3], data=DATA, eval_every=7, then=[], **TRAIN
    )
    plans = expand([grid], jobs)
    assert [p.kind for p in plans] == ["train", "train"]
    specs = [p.spec for p in plans]
    assert [s["model"]["loops"] for s in specs] == [1, 8]  # sorted
    assert [s["model"]["n_recurrent"] for s in specs] == [16, 2]
    assert all(s["eval_every"] == 7 and s["seed"] == 3 and s["recipe"] == "iso_depth" for s in specs)
    assert [p.label for p in plans] == ["iso_depth r=1 d=64", "iso_depth r=8 d=64"]


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"r": [3]}, "r: must divide the recurrent depth 16"),
        ({"r": []}, "r: expected a non-empty list"),
        ({"widths": [50]}, "d_model: must be a multiple of head_dim 32"),
        ({"flops": [0]}, "flops: must be > 0"),
        ({"flops": 1e12}, "flops: expected a non-empty list"),
        ({"injection": "dense"}, "injection: unknown 'dense'"),
        ({"tokens": 1000}, "tokens: set by the helper"),
        ({"then": ["benchmark"]}, "then: unknown 'benchmark'"),
    ],
)
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(ConfigError) as e:
        iso_depth_grid(**kwargs)
    assert message in str(e.value) and "iso_depth_grid 'iso-depth'" in str(e.value), str(e.value)


def test_a_bad_train_key_is_refused_at_expansion():
    (grid,) = iso_depth_grid(r=[1, 2], widths=[64], flops=[1e12], batch_sise=4)
    with pytest.raises(ConfigError, match="batch_sise"):
        expand([grid], jobs)


@pytest.mark.parametrize("fast,runs", [(False, 27), (True, 12)])
def test_the_demo_study_can_identify_the_law(fast, runs):
    from looplab.lab.demo import iso_depth_grids
    from looplab.orchestrator.variants import flop_budget_tokens, resolve

    plans = expand(iso_depth_grids(fast), jobs)
    assert [p.kind for p in plans] == ["train"] * runs  # no depth sweeps: the time goes to the runs
    members = {(p.spec["model"]["loops"], p.spec["model"]["d_model"]) for p in plans}
    tokens = {flop_budget_tokens(resolve("train", p.spec), p.spec["flops"]) for p in plans}
    assert runs >= 6 + 2 and len({r for r, _ in members}) >= 2 and len(tokens) >= 3
    assert all(sum(1 for m in members if m[0] == r) >= 2 for r, _ in members)  # two widths per r


# ---------------------------------------------------------------- loop design


def test_loop_design_grid_expands_to_readable_variants_at_equal_compute():
    from looplab.lab.studies import loop_design_grid
    from looplab.orchestrator.variants import variant_columns

    grids = loop_design_grid(seeds=[0, 1], data=DATA, follow={"depth_sweep": {"eval_tokens": 512}}, **TRAIN)
    assert [g.name for g in grids] == ["loop-design-4loops", "loop-design-2loops", "loop-design-1loops"]
    plans = expand(grids, jobs)
    trains = [p for p in plans if p.kind == "train"]
    sweeps = [p for p in plans if p.kind == "depth_sweep"]
    assert len(trains) == len(sweeps) == 11 * 2
    labels = sorted({p.label for p in trains})
    assert labels == sorted(
        [
            "base_loop 2x4",
            "base_loop 4x2",
            "non_loop 8",
            "base_loop 2x4 · injection=scalar",
            "base_loop 2x4 · injection=channel",
            "base_loop 2x4 · injection=dense",
            "base_loop 2x4 · injection=diagonal",
            "base_loop 2x4 · history=1",
            "base_loop 2x4 · timestep=loop_gate",
            "base_loop 2x4 · timestep=branch_gate",
            "base_loop 2x4 · timestep=adaln",
        ]
    )
    columns = {p.label: variant_columns("train", p.spec) for p in trains}
    assert len({c["variant_id"] for c in columns.values()}) == 11  # every variant its own row
    assert {c["effective_depth"] for c in columns.values()} == {8.0}
    assert {p.spec["tokens"] for p in trains} == {8 * 64 * 100}  # the same tokens for every run
    # same layers applied 8 times per token: training FLOPs per token within 2 % of BaseLoop 2x4's
    reference = columns["base_loop 2x4"]["flops_per_token"]
    for label, c in columns.items():
        assert c["flops_per_token"] == pytest.approx(reference, rel=0.02), label
    shape = {label: (c["n_recurrent"], c["loops"], c["injection"]) for label, c in columns.items()}
    assert shape["base_loop 4x2"] == (4, 2, "none") and shape["non_loop 8"] == (8, 1, "none")
    assert shape["base_loop 2x4 · injection=dense"] == (2, 4, "dense")
    by_label = {p.label: p.spec for p in trains}
    assert by_label["base_loop 2x4 · timestep=adaln"]["model"]["timestep"] == "adaln"
    assert by_label["base_loop 2x4 · history=1"]["model"]["history"] == 1
    assert by_label["base_loop 4x2"]["eval_loops"] == [2]
    # depth sweeps to 3x the trained loop count, interactions at the trained and twice the trained count
    loops_of = {
        (tuple(s["loops"]), tuple(s["interaction_loops"]), s["eval_tokens"]) for s in (p.spec for p in sweeps)
    }
    assert loops_of == {
        (tuple(range(1, 13)), (4, 8), 512),
        (tuple(range(1, 7)), (2, 4), 512),
        ((1, 2, 3), (2,), 512),
    }


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"layouts": [("flat_loop", 2, 4)]}, "layouts: unknown 'flat_loop'"),
        ({"layouts": [("base_loop", 2)]}, "layouts: expected (layout, shared, loops) triples"),
        ({"layouts": [("non_loop", 8, 2)]}, "loops: non_loop runs every layer once"),
        ({"injections": ["sparse"]}, "injections: unknown 'sparse'"),
        ({"timesteps": ["film"]}, "timesteps: unknown 'film'"),
        ({"histories": [-1]}, "histories: must be >= 0"),
        ({"variants_on": 3}, "variants_on: must be <= 2"),
        ({"tokens": 0}, "tokens: must be >= 1"),
        ({"recipe": "fixed4"}, "recipe: set by the helper"),
        ({"follow": {"depth_sweep": {"loops": [1]}}}, "follow.depth_sweep.loops: set by the helper"),
    ],
)
def test_loop_design_bad_arguments_are_named(kwargs, message):
    from looplab.lab.studies import loop_design_grid

    with pytest.raises(ConfigError) as e:
        loop_design_grid(**kwargs)
    assert message in str(e.value) and "loop_design_grid 'loop-design'" in str(e.value), str(e.value)


def test_a_variant_equal_to_its_layout_is_left_out_and_one_loop_count_is_one_grid():
    from looplab.lab.studies import loop_design_grid

    (grid,) = loop_design_grid(
        layouts=[("base_loop", 2, 4)],
        injections=["none", "scalar"],
        histories=[0],
        timesteps=["none"],
        then=[],
    )
    assert grid.name == "loop-design" and grid.sweep["zip"]["label"] == [
        "base_loop 2x4",
        "base_loop 2x4 · injection=scalar",
    ]
    assert grid.follow == {}


@pytest.mark.parametrize("fast,runs", [(False, 11), (True, 5)])
def test_the_loop_design_demo_grids(fast, runs):
    from looplab.lab.demo import loop_design_grids

    plans = expand(loop_design_grids(fast), jobs)
    trains = [p for p in plans if p.kind == "train"]
    assert len(trains) == runs and sum(p.kind == "depth_sweep" for p in plans) == runs
    assert {p.spec["data"]["tokenizer"] for p in trains} == {"byte"} and len(
        {p.label for p in trains}
    ) == runs


# ---------------------------------------------------------------- adaptive compute


@pytest.mark.parametrize("fast,runs", [(False, 5), (True, 2)])
def test_the_adaptive_demo_grids(fast, runs):
    """Each run of the study gets a depth sweep and an adaptive job on the same validation tokens and
    batches (threshold 0 then reproduces the sweep); the designs sweep to twice their trained loops."""
    from looplab.lab.demo import adaptive_grids

    plans = expand(adaptive_grids(fast), jobs)
    trains = [p for p in plans if p.kind == "train"]
    assert len(trains) == runs and [p.kind for p in plans].count("adaptive") == runs
    assert [p.kind for p in plans].count("depth_sweep") == runs
    for sweep, job in zip(
        [p for p in plans if p.kind == "depth_sweep"], [p for p in plans if p.kind == "adaptive"]
    ):
        assert (sweep.spec["eval_tokens"], sweep.spec["batch_size"]) == (
            job.spec["eval_tokens"],
            job.spec["batch_size"],
        )
        assert sweep.spec["interaction_loops"] == [] and job.spec["max_rounds"] is None  # the trained loops
    if not fast:
        assert sorted(p.label or p.spec["recipe"] for p in trains) == [
            "base_loop 2x4",
            "base_loop 2x4 · timestep=loop_gate",
            "fixed4",
            "lean",
            "parcae",
        ]
        assert {p.spec["tokens"] for p in trains} == {16 * 64 * 1000}


def test_adaptive_grid_refuses_what_it_sets_itself():
    from looplab.lab.studies import adaptive_grid

    with pytest.raises(ConfigError, match="adaptive.eval_tokens: set by the helper"):
        adaptive_grid(adaptive={"eval_tokens": 10})
    with pytest.raises(ConfigError, match="recipes: unknown 'parcea'"):
        adaptive_grid(recipes=["parcea"])


# ---------------------------------------------------------------- model families


@pytest.mark.parametrize("fast", [False, True])
def test_the_families_demo_grids_compare_five_families_at_equal_data_and_flops(fast):
    """Every family x seed on the same tokens with a depth sweep; every family after parcae once more per
    seed on the training FLOPs parcae's run spends, each counted by its own model (within one step: 1 %)."""
    from looplab.lab.demo_families import families_grids
    from looplab.workers.train.cost import cost
    from looplab.workers.train.spec import Spec

    plans = expand(families_grids(fast), jobs)
    trains = [p for p in plans if p.kind == "train"]
    matched = [p for p in trains if p.spec.get("flops")]
    equal = [p for p in trains if not p.spec.get("flops")]
    assert sorted({p.label for p in equal}) == ["huginn", "mor", "ouro", "parcae", "universal transformer"]
    assert len(equal) == 5 * 2 and len({p.spec["tokens"] for p in equal}) == 1
    assert sum(p.kind == "depth_sweep" for p in plans) == len(equal)
    assert {p.spec["family"] for p in equal if p.label != "parcae"} == {
        "families.huginn:factory",
        "families.ouro:factory",
        "families.mor:factory",
        "examples.universal_transformer:factory",
    }
    assert all("family" not in p.spec for p in equal if p.label == "parcae")  # looplab's own: no key
    assert len(matched) == 4 * 2 and {p.label for p in matched} == {
        "huginn",
        "ouro",
        "mor",
        "universal transformer",
    }
    spent = lambda p: (c := cost(Spec.from_dict(p.spec))).flops_per_token * c.steps * c.tokens_per_step  # noqa: E731
    (reference,) = {spent(p) for p in equal if p.label == "parcae"}
    for p in matched:  # a cheaper family trains more tokens for the same compute
        assert 0.99 * reference <= spent(p) <= reference
        assert Spec.from_dict(p.spec).budget_tokens() > equal[0].spec["tokens"]


def test_families_grid_bad_arguments_are_named():
    from looplab.lab.studies import families_grid

    with pytest.raises(ConfigError, match="families_grid 'families': families: expected"):
        families_grid(families=[("a", "looped")])
    with pytest.raises(ConfigError, match="families recipe: unknown 'parcea'"):
        families_grid(families=[("a", "looped", {}, "parcea", {})])
    with pytest.raises(ConfigError, match="budget: set by the helper"):
        families_grid(budget={"time_s": 60})


@pytest.mark.parametrize(("fast", "runs"), [(True, 4), (False, 2 * 7 * 2)])
def test_the_learned_exits_demo_grids(fast, runs):
    """Every recipe x (no gate + each objective at each coefficient) x seed, each with a depth sweep and
    an adaptive job; the gated runs' adaptive jobs add the gate rule to the post-hoc ones."""
    from looplab.lab.demo import learned_exits_grids

    plans = expand(learned_exits_grids(fast), jobs)
    trains = [p for p in plans if p.kind == "train"]
    assert len(trains) == runs and [p.kind for p in plans].count("adaptive") == runs
    gates = {p.spec["model"].get("exit_gate", "none") for p in trains}
    assert gates == {"none", "entropy", "geometric", "act"}
    for job in (p for p in plans if p.kind == "adaptive"):
        assert set(job.spec["rules"]) >= {"state", "kl", "entropy", "argmax"}
    assert sum("gate" in p.spec["rules"] for p in plans if p.kind == "adaptive") == runs - runs // (
        1 + (3 if fast else 6)
    )


def test_learned_exits_grid_refuses_an_empty_objective():
    from looplab.lab.studies import learned_exits_grid

    with pytest.raises(ConfigError, match="objectives.act: expected a non-empty list"):
        learned_exits_grid(objectives={"act": []})
