"""A learned exit trains through the queue like any model: for each objective, the driver (and its
local Ray) is SIGKILLed mid-training after a checkpoint, a new driver resumes the job, and its curves
equal an uninterrupted one-thread run's bit for bit (the flow of test_crash_resume.py)."""

from __future__ import annotations

import pytest

from tests.orchestrator.crash import (
    assert_curves_equal,
    assert_resumed,
    crash_and_recover,
    driver_env,
    submit,
)
from tests.orchestrator.test_crash_resume import TRAIN
from tests.orchestrator.test_real_jobs import one_thread_run

pytestmark = pytest.mark.ray


@pytest.mark.slow
@pytest.mark.parametrize("objective", ["entropy", "geometric", "act"])
def test_gate_objective_resumes_exactly_after_sigkill(tmp_path, looplab_cache, objective):
    train = {**TRAIN, "tokens": 4 * 32 * 40, "model": {"exit_gate": objective, "gate_coef": 0.05}}
    env = driver_env(looplab_cache)
    grid_file = f"from looplab import Grid\ngrid = Grid('gate', base={{**{train!r}, 'seed': 0}})\n"
    assert "1 added" in submit(tmp_path, grid_file, env)
    q, victim, ckpt, _ = crash_and_recover(tmp_path, env)
    assert_resumed(q, victim, ckpt)

    (tmp_path / "ref").mkdir()
    ref = one_thread_run({**train, "seed": 0}, tmp_path / "ref")
    # the objective (train_loss), its task part and the mean exit round the trainer logs with it
    assert_curves_equal(q, victim, ref, ("train_loss", "val_loss", "train_task_loss", "gate_expected_rounds"))
