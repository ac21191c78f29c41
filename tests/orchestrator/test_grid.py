"""Grid validation without a database: each of the grid's own fields is checked by the one field
toolkit (model.fields), so a bad value names the grid and the field; good grids expand as before."""

from __future__ import annotations

import pytest

from looplab.model.errors import ConfigError
from looplab.orchestrator.grid import Grid, expand
from looplab.workers import jobs

BAD = [
    (
        Grid("g", base={"tokens": 1000}, priority="high"),
        "grid 'g': priority: expected an integer, got 'high'",
    ),
    (Grid("g", base={"tokens": 1000}, max_attempts=0), "grid 'g': max_attempts: must be >= 1, got 0"),
    (
        Grid("g", base={"tokens": 1000}, then=["evals"]),
        "grid 'g': then: unknown 'evals' (did you mean 'eval'?); accepted: depth_sweep",
    ),
    (
        Grid("g", base={"tokens": 1000}, resources={"num_gpus": -1}),
        "grid 'g': resources.num_gpus: must be >= 0",
    ),
    (Grid("g", base={"tokens": 1000}, resources={"num_gpus": "1"}), "resources.num_gpus: expected a number"),
    (
        Grid("g", base={"tokens": 1000}, then=["depth_sweep"], resources={"depth_sweep": 3}),
        "grid 'g': resources.depth_sweep: expected a dict like",
    ),
    (Grid("g", base={"budget": {"tokens": 0}}), "grid 'g': budget.tokens: must be > 0"),
    (Grid("g", base={"budget": {"time_s": True}}), "grid 'g': budget.time_s: expected a number, got True"),
    (Grid("g", base={"recipe": "lena", "tokens": 1000}), "grid 'g': recipe: unknown 'lena'"),
    (Grid("g", base={"tokens": 1000, "eval_loops": [0]}), "grid 'g': eval_loops: must be >= 1"),
]


@pytest.mark.parametrize("grid,message", BAD, ids=[m.split(": ")[1] for _, m in BAD])
def test_bad_grid_field_is_named(grid, message):
    with pytest.raises(ConfigError) as e:
        expand([grid], jobs)
    assert message in str(e.value), str(e.value)


def test_good_grid_expands_with_resources_per_kind():
    grid = Grid(
        "g",
        base={"tokens": 1000.0},
        sweep={"seed": [0, 1]},
        then=["depth_sweep"],
        priority=2.0,
        resources={"train": {"num_gpus": 1}, "depth_sweep": {"num_gpus": 0.5}},
    )
    plans = expand([grid], jobs)
    assert [p.kind for p in plans] == ["train", "depth_sweep"] * 2
    assert [p.resources for p in plans] == [{"num_gpus": 1}, {"num_gpus": 0.5}] * 2
    assert plans[0].spec["tokens"] == 1000 and plans[0].priority == 2 and plans[1].deps == [0]


# ---------------------------------------------------------------- nested sweeps and zip groups


def _specs(grid: Grid) -> list[dict]:
    return [p.spec for p in expand([grid], jobs) if p.kind == "train"]


def test_dotted_sweep_keys_go_into_model_data_and_budget():
    grid = Grid(
        "g",
        base={"recipe": "fixed4", "model": {"n_prelude": 1}},
        sweep={"model.loops": [2, 8], "data.vocab_size": [300, 400], "budget.tokens": [1000]},
    )
    specs = _specs(grid)
    assert [(s["model"], s["data"]["vocab_size"], s["tokens"]) for s in specs] == [
        ({"loops": 2, "n_prelude": 1}, 300, 1000),
        ({"loops": 2, "n_prelude": 1}, 400, 1000),
        ({"loops": 8, "n_prelude": 1}, 300, 1000),
        ({"loops": 8, "n_prelude": 1}, 400, 1000),
    ]
    assert grid.base == {"recipe": "fixed4", "model": {"n_prelude": 1}}  # the base is not changed


def test_zip_group_varies_its_keys_together_in_a_product_with_the_rest():
    grid = Grid(
        "g",
        base={"recipe": "fixed4", "tokens": 1000},
        sweep={"zip": {"model.n_recurrent": [4, 2, 1], "model.loops": [1, 2, 4]}, "seed": [0, 1]},
    )
    specs = _specs(grid)
    got = [(s["model"]["n_recurrent"], s["model"]["loops"], s["seed"]) for s in specs]
    assert got == [(4, 1, 0), (4, 1, 1), (2, 2, 0), (2, 2, 1), (1, 4, 0), (1, 4, 1)]


def test_several_zip_groups_multiply():
    grid = Grid(
        "g",
        base={"recipe": "fixed4", "tokens": 1000},
        sweep={
            "zip": [
                {"model.loops": [1, 2], "seed": [0, 1]},
                {"model.d_model": [64, 128], "model.head_dim": [32, 64]},
            ]
        },
    )
    got = [
        (s["model"]["loops"], s["seed"], s["model"]["d_model"], s["model"]["head_dim"]) for s in _specs(grid)
    ]
    assert got == [(1, 0, 64, 32), (1, 0, 128, 64), (2, 1, 64, 32), (2, 1, 128, 64)]


def test_label_is_taken_out_of_the_spec_and_kept_on_the_plan():
    grid = Grid(
        "g",
        base={"recipe": "fixed4", "tokens": 1000},
        then=["depth_sweep", "decode_bench"],
        sweep={"zip": {"label": ["r2", "r4"], "model.loops": [2, 4]}},
    )
    plans = expand([grid], jobs)
    assert [(p.kind, p.label) for p in plans] == [
        ("train", "r2"),
        ("depth_sweep", "r2"),
        ("decode_bench", "r2"),
        ("train", "r4"),
        ("depth_sweep", "r4"),
        ("decode_bench", "r4"),
    ]
    assert all("label" not in p.spec for p in plans)
    unlabelled = expand([Grid("g", base={"recipe": "fixed4", "tokens": 1000, "model": {"loops": 2}})], jobs)
    # the label does not change what runs, so it is not part of the job's identity
    assert unlabelled[0].spec == plans[0].spec


BAD_SWEEPS = [
    (
        {"model.lops": [1]},
        "grid 'g': sweep.model.lops: unknown key 'lops' (did you mean 'loops'?); accepted: d_model, ",
    ),
    ({"data.vocab": [300]}, "grid 'g': sweep.data.vocab: unknown key 'vocab'; accepted: corpus, tokenizer"),
    ({"budget.steps": [3]}, "sweep.budget.steps: unknown key 'steps'; accepted: tokens, time_s, flops"),
    (
        {"seed.x": [1]},
        "grid 'g': sweep.seed.x: 'seed' is not a dict a sweep can go into; dotted paths go "
        "into model, data, budget",
    ),
    ({"model.rounds.0": [1]}, "grid 'g': sweep.model.rounds.0: model.rounds is not a dict"),
    ({"model.loops": 4}, "grid 'g': sweep.model.loops: expected a list, got 4"),
    ({"model.loops": []}, "grid 'g': sweep.model.loops: empty list"),
    ({"recipe": ["lean"]}, "grid 'g': recipe: given in both base and sweep"),
    ({"model.d_model": [64]}, "grid 'g': model.d_model: given in both base and sweep"),
    ({"model": [{"loops": 2}]}, "grid 'g': model and model.d_model: given in both base and sweep"),
    (
        {"model.loops": [1], "zip": {"model.loops": [2], "seed": [0]}},
        "grid 'g': model.loops: given in both sweep and sweep.zip",
    ),
    (
        {"zip": {"model.loops": [1, 2, 4], "seed": [0, 1]}},
        "grid 'g': sweep.zip: lists of different lengths (model.loops: 3, seed: 2); every list of a zip group",
    ),
    (
        {"zip": [{"seed": [0]}, {"model.loops": [1, 2], "lr": [0.1]}]},
        "grid 'g': sweep.zip[1]: lists of different lengths (model.loops: 2, lr: 1)",
    ),
    ({"zip": {}}, "grid 'g': sweep.zip: expected a non-empty dict of key -> list of values"),
    ({"zip": {"model.lops": [1]}}, "grid 'g': sweep.zip.model.lops: unknown key 'lops'"),
    ({"label": ["a", 3]}, "grid 'g': label: expected a non-empty string of at most 200 characters, got 3"),
    ({"model.loops": ["many"]}, "grid 'g': loops: expected an integer, got 'many'"),
]


@pytest.mark.parametrize("sweep,message", BAD_SWEEPS, ids=[m.split(": ")[1] for _, m in BAD_SWEEPS])
def test_bad_sweep_path_is_named_with_what_is_accepted(sweep, message):
    grid = Grid("g", base={"recipe": "fixed4", "tokens": 1000, "model": {"d_model": 64}}, sweep=sweep)
    with pytest.raises(ConfigError) as e:
        expand([grid], jobs)
    assert message in str(e.value), str(e.value)


def test_a_whole_dict_and_a_path_into_it_are_one_key():
    grid = Grid("g", base={"recipe": "fixed4", "budget": 1000}, sweep={"budget.tokens": [2000]})
    with pytest.raises(ConfigError, match=r"budget and budget.tokens: given in both base and sweep"):
        expand([grid], jobs)
    grid = Grid("g", base={"tokens": 1000}, sweep={"model": [{"loops": 2}], "model.loops": [1]})
    with pytest.raises(ConfigError, match=r"model and model.loops: given in sweep twice"):
        expand([grid], jobs)
