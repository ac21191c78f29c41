"""A learned exit trains through the queue like any model: for each objective, the driver (and its
local Ray) is SIGKILLed mid-training after a checkpoint, a new driver resumes the job, and its curves
equal an uninterrupted one-thread run's bit for bit (the flow of test_crash_resume.py)."""

from __future__ import annotations

import os

import pytest

from orchestrator import Queue
from tests.db_rows import rows
from tests.orchestrator.test_crash_resume import ROOT, TRAIN, kill_after_checkpoint, looplab
from tests.orchestrator.test_real_jobs import one_thread_run

pytestmark = pytest.mark.ray


@pytest.mark.slow
@pytest.mark.parametrize("objective", ["entropy", "geometric", "act"])
def test_gate_objective_resumes_exactly_after_sigkill(tmp_path, looplab_cache, objective):
    train = {**TRAIN, "tokens": 4 * 32 * 40, "model": {"exit_gate": objective, "gate_coef": 0.05}}
    env = {
        **os.environ,
        "LOOPLAB_CACHE": str(looplab_cache),
        "LOOPLAB_HEARTBEAT_GRACE_S": "1",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(ROOT),
    }
    (tmp_path / "grids.py").write_text(
        f"from orchestrator import Grid\ngrid = Grid('gate', base={{**{train!r}, 'seed': 0}})\n"
    )
    sub = looplab(tmp_path, "submit", "grids.py", env=env)
    out = sub.communicate(timeout=120)[0]
    assert sub.returncode == 0 and "1 added" in out, out
    q = Queue(db=tmp_path / "q.db")
    run_args = ("run", "--until-empty", "--num-cpus", "1", "--artifacts", str(tmp_path / "art"))
    kill_after_checkpoint(q, looplab(tmp_path, *run_args, env=env))
    ((victim,),) = rows(q, "SELECT id FROM jobs WHERE status='running'")
    second = looplab(tmp_path, *run_args, env=env)
    out = second.communicate(timeout=300)[0]
    assert second.returncode == 0 and "recovered 1 interrupted job(s)" in out, out
    resumed = rows(q, "SELECT resumed_from_step FROM attempts WHERE job_id=:j ORDER BY n", j=victim)
    assert len(resumed) == 2 and resumed[1][0] is not None and resumed[1][0] >= 3

    (tmp_path / "ref").mkdir()
    ref = one_thread_run({**train, "seed": 0}, tmp_path / "ref")
    # the objective (train_loss), its task part and the mean exit round the trainer logs with it
    for key in ("train_loss", "val_loss", "train_task_loss", "gate_expected_rounds"):
        got = rows(
            q, "SELECT step, value FROM metrics WHERE job_id=:j AND key=:k ORDER BY step", j=victim, k=key
        )
        assert [tuple(r) for r in got] == ref.curve(key) and len(got) > 0
