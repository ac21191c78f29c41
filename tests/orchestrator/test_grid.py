"""Grid validation without a database: each of the grid's own fields is checked by the one field
toolkit (model.fields), so a bad value names the grid and the field; good grids expand as before."""

from __future__ import annotations

import pytest

from model.errors import ConfigError
from orchestrator.grid import Grid, expand
from workers import jobs

BAD = [
    (Grid("g", base={"tokens": 1000}, priority="high"), "grid 'g': priority: expected an integer, got 'high'"),
    (Grid("g", base={"tokens": 1000}, max_attempts=0), "grid 'g': max_attempts: must be >= 1, got 0"),
    (Grid("g", base={"tokens": 1000}, then=["eval"]), "grid 'g': then: unknown 'eval'; accepted: depth_sweep"),
    (Grid("g", base={"tokens": 1000}, resources={"num_gpus": -1}), "grid 'g': resources.num_gpus: must be >= 0"),
    (Grid("g", base={"tokens": 1000}, resources={"num_gpus": "1"}), "resources.num_gpus: expected a number"),
    (Grid("g", base={"tokens": 1000}, then=["depth_sweep"], resources={"depth_sweep": 3}),
     "grid 'g': resources.depth_sweep: expected a dict like"),
    (Grid("g", base={"budget": {"tokens": 0}}), "grid 'g': budget.tokens: must be > 0"),
    (Grid("g", base={"budget": {"time_s": True}}), "grid 'g': budget.time_s: expected a number, got True"),
    (Grid("g", base={"recipe": "lena", "tokens": 1000}), "grid 'g': recipe: unknown 'lena'"),
    (Grid("g", base={"tokens": 1000, "eval_loops": [0]}), "grid 'g': eval_loops: must be >= 1"),
]  # fmt: skip


@pytest.mark.parametrize("grid,message", BAD, ids=[m.split(": ")[1] for _, m in BAD])
def test_bad_grid_field_is_named(grid, message):
    with pytest.raises(ConfigError) as e:
        expand([grid], jobs)
    assert message in str(e.value), str(e.value)


def test_good_grid_expands_with_resources_per_kind():
    grid = Grid("g", base={"tokens": 1000.0}, sweep={"seed": [0, 1]}, then=["depth_sweep"], priority=2.0,
                resources={"train": {"num_gpus": 1}, "depth_sweep": {"num_gpus": 0.5}})  # fmt: skip
    plans = expand([grid], jobs)
    assert [p.kind for p in plans] == ["train", "depth_sweep"] * 2
    assert [p.resources for p in plans] == [{"num_gpus": 1}, {"num_gpus": 0.5}] * 2
    assert plans[0].spec["tokens"] == 1000 and plans[0].priority == 2 and plans[1].deps == [0]
