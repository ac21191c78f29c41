"""A sweep says what it makes (orchestrator/same_run.py): points that are one run (a sweep over an
execution field, which by design is no part of a run's identity) are refused with the axis named and how
to compare execution settings instead; nothing is stored, by the API, `plan` or the CLI."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from looplab import Grid, Queue
from looplab.lab.cli import main
from looplab.model.errors import ConfigError

BASE = {
    "recipe": "lean",
    "size": "tiny",
    "tokens": 1280,
    "batch_size": 8,
    "seq_len": 32,
    "data": {"corpus": "offline", "tokenizer": "byte"},
}


@pytest.fixture
def q(tmp_path):
    return Queue(db=tmp_path / "q.db", artifacts=tmp_path / "art")


def jobs(q: Queue) -> int:
    with q.eng.connect() as conn:
        return conn.execute(sa.text("SELECT COUNT(*) FROM jobs")).scalar_one()


def test_a_sweep_over_bucketing_is_refused_with_the_reason(q):
    grid = Grid("bucket", base=BASE, sweep={"bucketing": [False, True]})
    with pytest.raises(ConfigError) as err:
        q.submit(grid)
    message = str(err.value)
    assert "sweep.bucketing: does not change the run" in message
    assert "bucketing is an execution field of train" in message and "its 2 points are 1 job(s)" in message
    assert "benchmarks/" in message and "sweep a field that defines the run" in message
    assert jobs(q) == 0  # refused whole, before anything was written
    with pytest.raises(ConfigError, match="sweep.bucketing"):
        q.plan(grid, calibration=None)


def test_a_four_point_execution_grid_names_both_axes(q):
    grid = Grid("split", base=BASE, sweep={"micro_batch_size": [8, 2], "bucketing": [False, True]})
    with pytest.raises(ConfigError) as err:
        q.submit(grid)
    message = str(err.value)
    assert "sweep.micro_batch_size, sweep.bucketing: do not change the run" in message
    assert "micro_batch_size and bucketing are execution fields" in message
    assert "its 4 points are 1 job(s)" in message
    # beside an axis that does define the run, the execution axis still collapses it: 4 points, 2 jobs
    mixed = Grid("mixed", base=BASE, sweep={"micro_batch_size": [8, 2], "seed": [0, 1]})
    with pytest.raises(ConfigError, match=r"sweep.micro_batch_size: does not .* its 4 points are 2 job"):
        q.submit(mixed)
    assert jobs(q) == 0


def test_execution_values_that_go_with_distinct_runs_are_accepted(q):
    """An execution field zipped with a field that defines the run (each seed its micro-batch) makes one
    job per point, as does an execution field in the base."""
    zipped = Grid("z", base=BASE, sweep={"zip": {"seed": [0, 1], "micro_batch_size": [8, 2]}})
    assert len(q.submit(zipped)) == 2
    based = Grid("b", base={**BASE, "bucketing": False}, sweep={"seed": [2, 3]})
    assert len(q.submit(based)) == 2 and jobs(q) == 4


def test_cli_submit_refuses_it_in_one_line(tmp_path, capsys):
    f = tmp_path / "grids.py"
    f.write_text(
        f"from looplab import Grid\ng = Grid('g', base={BASE!r}, sweep={{'bucketing': [False, True]}})\n"
    )
    db = str(tmp_path / "q.db")
    assert main(["--db", db, "submit", str(f)]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "sweep.bucketing" in err and "execution field" in err
