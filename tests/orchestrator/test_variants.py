"""Variant identity at submission: every train job (and the depth sweeps and decode benches that belong
to it) stores which model it is about, so that seeds of one variant group together and two variants
of one recipe never do; FLOP budgets are stored as given and as the whole-step token count they buy.
Validation only: nothing here trains."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

from looplab import Grid, Queue
from looplab.model.counts import arch_summary, tokens_for_flops
from looplab.model.errors import ConfigError
from looplab.model.presets import preset
from looplab.orchestrator.variants import ARCH_COLUMNS, run_variant_id, variant_columns, variant_id
from looplab.workers.train.spec import Spec


@pytest.fixture
def q(migrated_db_url, tmp_path):  # on SQLite and on PostgreSQL
    return Queue(db=migrated_db_url, artifacts=tmp_path / "art")  # the real job registry


def rows(q: Queue, where: str = "1=1") -> list[dict]:
    with q.eng.connect() as conn:
        return [
            dict(r._mapping) for r in conn.execute(sa.text(f"SELECT * FROM jobs WHERE {where} ORDER BY id"))
        ]


def train(recipe: str = "fixed4", **kw) -> dict:
    return {"recipe": recipe, "size": "tiny", "tokens": 1000, **kw}


BYTE_RUN = {"batch_size": 8, "vocab_size": 256}  # a tiny run's default batch, on the byte-level tokenizer


# ---------------------------------------------------------------- the identity itself


def test_overrides_equal_to_the_preset_are_the_preset():
    plain = variant_columns("train", train())
    assert variant_columns("train", train(model={"loops": 4}))["variant_id"] == plain["variant_id"]
    assert plain["variant_label"] == "fixed4"
    assert plain["variant_id"] == variant_id("fixed4", "tiny", {}, BYTE_RUN)
    assert plain["variant_id"] == run_variant_id(variant_id("fixed4", "tiny", {}), BYTE_RUN)  # in two steps
    assert (plain["global_batch"], plain["vocab_size"]) == (8, 256)
    assert len(plain["variant_id"]) == 12 and int(plain["variant_id"], 16) >= 0


def test_label_names_only_what_differs_from_the_preset():
    cols = variant_columns("train", train(model={"loops": 8, "d_model": 128, "head_dim": 64, "n_prelude": 2}))
    assert (
        cols["variant_label"] == "fixed4 · d_model=128 · head_dim=64 · loops=8"
    )  # n_prelude=2 is the preset's
    assert cols["variant_id"] == variant_id(
        "fixed4", "tiny", {"d_model": 128, "head_dim": 64, "loops": 8}, BYTE_RUN
    )
    windowed = variant_columns("train", train(model={"rounds": [{"window": 8}]}))
    assert windowed["variant_label"].startswith('fixed4 · rounds=[{"attention":true,')


def test_seeds_budgets_and_execution_share_a_variant_model_batch_and_vocabulary_do_not():
    ids = {
        name: variant_columns("train", spec)["variant_id"]
        for name, spec in {
            "base": train(),
            "seed": train(seed=3),
            "budget": train(tokens=None, time_s=5.0),
            "micro": train(micro_batch_size=2, compile=True, eval_every=7),
            "loops8": train(model={"loops": 8}),
            "seq32": train(seq_len=32),
            "size": train(size="small"),
            "recipe": train("fixed8"),
            "batch": train(batch_size=4),
            "vocab": train(data={"tokenizer": "bpe", "vocab_size": 1024}),
        }.items()
    }
    assert ids["base"] == ids["seed"] == ids["budget"] == ids["micro"]
    assert len({ids[k] for k in ("base", "loops8", "seq32", "size", "recipe", "batch", "vocab")}) == 7
    assert variant_columns("train", train(seq_len=32))["variant_label"] == "fixed4 · seq_len=32"


def test_architecture_columns_are_the_flop_models_summary():
    spec = train("parcae", model={"n_recurrent": 4}, batch_size=4)
    cols = variant_columns("train", spec)
    facts = arch_summary(preset("parcae", "tiny", n_recurrent=4), 4)
    assert {c: cols[c] for c in ARCH_COLUMNS} == {c: facts[c] for c in ARCH_COLUMNS}
    assert (cols["loop_sampler"], cols["loops"], cols["effective_depth"]) == ("poisson_seq", 8, 2 + 4 * 8 + 2)
    # a decode bench of that architecture carries the architecture's id, which is the run's before its
    # batch and vocabulary are added (its FLOPs counted at the size's default batch); it trains nothing
    bench = variant_columns("decode_bench", {"recipe": "parcae", "size": "tiny", "model": {"n_recurrent": 4}})
    arch = variant_id("parcae", "tiny", {"n_recurrent": 4})
    assert bench["variant_id"] == arch and cols["variant_id"] == run_variant_id(
        arch, {**BYTE_RUN, "batch_size": 4}
    )
    assert bench["n_params"] == cols["n_params"] and bench["global_batch"] is None


def test_no_model_no_columns():
    assert variant_columns("depth_sweep", {"checkpoint": "x"}) == {}
    assert variant_columns("train", {"recipe": "no_such_recipe"}) == {}
    assert variant_columns("train", {"recipe": "fixed4", "model": {"loops": 0}}) == {}
    assert variant_columns("noop", {"tag": 1}) == {}


# ---------------------------------------------------------------- what submission stores


def test_two_variants_of_one_recipe_are_two_variants_and_seeds_share_one(q):
    grid = Grid(
        "v",
        base={"recipe": "fixed4", "tokens": 1000},
        sweep={"model.loops": [4, 8], "seed": [0, 1]},
        then=["depth_sweep", "decode_bench"],
    )
    q.submit(grid)
    trains = rows(q, "kind = 'train'")
    by_loops: dict[int, set[str]] = {}
    for r in trains:
        by_loops.setdefault(r["loops"], set()).add(r["variant_id"])
    assert {k: len(v) for k, v in by_loops.items()} == {4: 1, 8: 1}
    assert by_loops[4] != by_loops[8]
    labels = {r["loops"]: r["variant_label"] for r in trains}
    assert labels == {4: "fixed4", 8: "fixed4 · loops=8"}
    # each depth sweep carries its train job's columns; one decode bench per variant, with its id
    with q.eng.connect() as conn:
        pairs = conn.execute(
            sa.text(
                "SELECT s.variant_id, t.variant_id, s.effective_depth, t.effective_depth, s.n_rec, t.n_rec "
                "FROM job_deps d JOIN jobs s ON s.id = d.job_id JOIN jobs t ON t.id = d.depends_on "
                "WHERE s.kind = 'depth_sweep'"
            )
        ).all()
    assert len(pairs) == 4 and all(p[0] == p[1] and p[2] == p[3] and p[4] == p[5] for p in pairs)
    benches = rows(q, "kind = 'decode_bench'")
    archs = {variant_id("fixed4", "tiny", {}), variant_id("fixed4", "tiny", {"loops": 8})}
    assert sorted(b["variant_id"] for b in benches) == sorted(archs)
    assert {run_variant_id(a, BYTE_RUN) for a in archs} == by_loops[4] | by_loops[8]
    assert all(b["flops_per_token"] > 0 and b["loops"] in (4, 8) for b in benches)


def test_a_decode_bench_is_the_architecture_of_its_train_jobs_seq_len_included(q):
    q.submit(
        Grid(
            "s",
            base={"recipe": "lean", "tokens": 1000, "seq_len": 32},
            sweep={"seed": [0, 1]},
            then=["decode_bench"],
        )
    )
    got = rows(q)
    assert [r["kind"] for r in got] == ["train", "decode_bench", "train"]
    assert got[0]["variant_id"] == got[2]["variant_id"] == run_variant_id(got[1]["variant_id"], BYTE_RUN)
    assert got[1]["variant_label"] == "lean · seq_len=32"
    assert json.loads(got[1]["config"])["model"] == {"seq_len": 32}


def test_a_label_given_in_the_grid_names_the_variant_but_not_the_job(q):
    grid = Grid(
        "l",
        base={"recipe": "fixed4", "tokens": 1000, "label": "the r=8 run"},
        sweep={"model.loops": [8]},
        then=["depth_sweep"],
    )
    ids = q.submit(grid)
    assert [r["variant_label"] for r in rows(q)] == ["the r=8 run", "the r=8 run"]
    # the same spec under another label (or none) is the same job: nothing is added, the label stays
    again = q.submit(
        Grid("l2", base={"recipe": "fixed4", "tokens": 1000, "model": {"loops": 8}}, then=["depth_sweep"])
    )
    assert again == ids and q.last_added == []
    assert {r["variant_label"] for r in rows(q)} == {"the r=8 run"}


def test_an_override_every_variant_of_a_submission_shares_is_left_out_of_the_label(q):
    # the demo's shape: every run sets seq_len=64, so "parcae · seq_len=64" would tell nothing apart
    grids = [
        Grid(
            "shared",
            base={"tokens": 1000, "seq_len": 32},
            sweep={"recipe": ["parcae", "lean"]},
            then=["depth_sweep", "decode_bench"],
        ),
        Grid("shared-loops", base={"recipe": "fixed4", "tokens": 1000, "seq_len": 32, "model": {"loops": 8}}),
    ]
    q.submit(grids)
    got = rows(q)
    labels = {(r["kind"], r["recipe"]): r["variant_label"] for r in got}
    assert labels[("train", "parcae")] == "parcae" and labels[("train", "lean")] == "lean"
    # an override only some variants set stays; follow-ups carry their train job's label
    assert labels[("train", "fixed4")] == "fixed4 · loops=8"
    assert labels[("depth_sweep", "parcae")] == "parcae" and labels[("decode_bench", "lean")] == "lean"
    # the columns and the variant id still count the shared override
    parcae = next(r for r in got if r["kind"] == "train" and r["recipe"] == "parcae")
    assert parcae["variant_id"] == variant_id("parcae", "tiny", {"seq_len": 32}, BYTE_RUN)
    assert parcae["variant_id"] != variant_id("parcae", "tiny", {}, BYTE_RUN)
    # a stored job keeps its label when a later submission shares less
    q.submit(Grid("more", base={"tokens": 1000}, sweep={"recipe": ["parcae", "lean"], "seed": [5]}))
    again = rows(q, "kind = 'train'")
    assert {r["variant_label"] for r in again if r["seed"] == 5} == {"parcae", "lean"}
    assert labels == {(r["kind"], r["recipe"]): r["variant_label"] for r in rows(q) if r["seed"] != 5}


# ---------------------------------------------------------------- FLOP budgets


def test_flop_budget_is_stored_as_given_and_as_the_tokens_it_buys(q):
    flops = [3e10, 1e11]
    grid = Grid("f", base={"recipe": "parcae", "batch_size": 4, "seq_len": 32}, sweep={"budget.flops": flops})
    q.submit(grid)
    got = rows(q, "kind = 'train'")
    cfg = Spec.from_dict(
        {"recipe": "parcae", "batch_size": 4, "seq_len": 32, "tokens": 1}
    ).resolved_model_config()
    assert [json.loads(r["budget"]) for r in got] == [{"flops": f} for f in flops]
    assert [r["budget_flops"] for r in got] == flops
    assert [r["budget_tokens"] for r in got] == [tokens_for_flops(cfg, f, 4, 32) for f in flops]
    assert all(r["budget_tokens"] % (4 * 32) == 0 for r in got)  # whole steps
    assert [json.loads(r["config"])["flops"] for r in got] == flops
    assert got[0]["flops_per_token"] == arch_summary(cfg, 4)["flops_per_token"]


@pytest.mark.parametrize(
    "budget,message",
    [
        ({"flops": 0}, "budget.flops: must be > 0, got 0"),
        ({"flops": -1e12}, "budget.flops: must be > 0"),
        ({"flops": "3e15"}, "budget.flops: expected a number, got '3e15'"),
        ({"flops": True}, "budget.flops: expected a number, got True"),
        ({"flops": 1e12, "tokens": 100}, "budget: {"),
    ],
)
def test_bad_flop_budget_is_refused_naming_budget_flops(q, budget, message):
    with pytest.raises(ConfigError) as e:
        q.submit(Grid("bad", base={"recipe": "fixed4", "budget": budget}))
    assert message in str(e.value), str(e.value)
    assert rows(q) == []


def test_flop_budget_with_a_token_budget_is_refused(q):
    with pytest.raises(ConfigError, match=r"budget: given together with tokens"):
        q.submit(Grid("bad", base={"recipe": "fixed4", "tokens": 100}, sweep={"budget.flops": [1e12]}))


# ---------------------------------------------------------------- the README's worked example


def readme_example() -> Grid:
    """The README's worked example "sweep r x width x FLOP budget", exactly as printed there."""
    return Grid(
        "r-width-flops",
        base={"recipe": "fixed4", "size": "small", "seed": 0},
        sweep={
            "zip": [
                {"model.n_recurrent": [8, 4, 2], "model.loops": [1, 2, 4]},  # r rounds of 8/r layers
                {"model.d_model": [128, 256], "model.head_dim": [64, 128]},  # n_heads * head_dim = d_model
            ],
            "budget.flops": [1e15, 3e15],
        },
        then=["depth_sweep"],
    )


def test_readme_example_submits(q):
    ids = q.submit(readme_example())
    trains = rows(q, "kind = 'train'")
    assert len(ids) == 3 * 2 * 2 * 2 and len(trains) == 12
    assert len({r["variant_id"] for r in trains}) == 6  # r x width; the budget is not the variant
    assert {(r["n_recurrent"], r["loops"], r["d_model"]) for r in trains} == {
        (n, r, d) for n, r in ((8, 1), (4, 2), (2, 4)) for d in (128, 256)
    }
    assert {r["effective_depth"] for r in trains} == {2 + 8 + 2}
    assert {r["variant_label"] for r in trains} >= {
        "fixed4 · d_model=256 · head_dim=128 · loops=1 · n_recurrent=8"
    }
    assert all(r["budget_tokens"] > 0 and r["budget_flops"] in (1e15, 3e15) for r in trains)


# ---------------------------------------------------------------- what a run is


def test_a_grid_again_with_other_execution_fields_is_the_same_jobs(q):
    base = {"recipe": "fixed4", "tokens": 1000, "batch_size": 4}
    ids = q.submit(Grid("e", base=base, sweep={"seed": [0, 1]}, then=["depth_sweep"]))
    again = Grid(
        "e2",
        base={**base, "micro_batch_size": 2, "compile": True, "eval_every": 7, "device": "cpu"},
        sweep={"seed": [0, 1]},
        then=["depth_sweep"],
        follow={"depth_sweep": {"micro_batch_size": 1}},
    )
    assert q.submit(again) == ids and q.last_added == []
    # what defines a run is not merged away: another batch is another run (and another variant)
    other = q.submit(Grid("b", base={**base, "batch_size": 2}))
    assert q.last_added == other and len(rows(q, "kind = 'train'")) == 3
    assert len({r["variant_id"] for r in rows(q, "kind = 'train'")}) == 2


def test_a_depth_sweep_evaluates_in_its_train_jobs_batches_unless_told(q):
    q.submit(Grid("s", base={"recipe": "fixed4", "tokens": 1000, "batch_size": 4}, then=["depth_sweep"]))
    q.submit(
        Grid(
            "t",
            base={"recipe": "fixed4", "tokens": 1000, "batch_size": 2},
            then=["depth_sweep"],
            follow={"depth_sweep": {"batch_size": 8}},
        )
    )
    sweeps = [json.loads(r["config"])["batch_size"] for r in rows(q, "kind = 'depth_sweep'")]
    assert sweeps == [4, 8]
