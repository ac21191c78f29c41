"""Crash and resume, end to end: `looplab submit` + `looplab run` as subprocesses on tiny real training
jobs; the driver (and its whole local Ray) is SIGKILLed mid-training after a checkpoint, a new driver
recovers the job and resumes it. The recovery rule on its own is tested in test_transitions.py."""

from __future__ import annotations

import pytest

from tests.db_rows import rows
from tests.orchestrator.crash import (
    assert_curves_equal,
    assert_resumed,
    crash_and_recover,
    driver_env,
    submit,
)
from tests.orchestrator.test_real_jobs import one_thread_run

pytestmark = pytest.mark.ray  # `looplab run` starts a local Ray in its subprocess

# long enough (100 steps) that the test catches a job running after its first checkpoint
TRAIN = {
    "recipe": "lean",
    "size": "tiny",
    "seq_len": 32,
    "batch_size": 4,
    "tokens": 4 * 32 * 100,
    "ckpt_every": 5,
    "eval_every": 20,
    "eval_tokens": 256,
    "data": {"tokenizer": "byte"},
}
GRID_FILE = f"""
from looplab import Grid
base = {TRAIN!r}
seed = base.pop("seed", None)
grid = Grid("crash", base=base, sweep={{"seed": [0, 1]}})
"""


@pytest.mark.slow
def test_sigkill_mid_training_then_resume_exactly(tmp_path, looplab_cache):
    env = driver_env(looplab_cache)
    assert "2 added, 0 already present" in submit(tmp_path, GRID_FILE, env)
    q, victim, ckpt, _ = crash_and_recover(tmp_path, env)
    assert set(rows(q, "SELECT status FROM jobs")) == {("succeeded",)}
    assert_resumed(q, victim, ckpt)
    for (jid,) in rows(q, "SELECT id FROM jobs WHERE id != :j", j=victim):  # the other ran once
        assert rows(q, "SELECT outcome FROM attempts WHERE job_id=:j", j=jid) == [("succeeded",)]

    # the interrupted job's curves equal an uninterrupted run's, bit for bit, each point exactly once;
    # the queue's workers ran with one thread (OMP_NUM_THREADS=1), and float sums depend on the thread
    # count, so the reference runs with one thread too
    seed = rows(q, "SELECT seed FROM jobs WHERE id=:j", j=victim)[0][0]
    (tmp_path / "ref").mkdir()
    ref = one_thread_run({**TRAIN, "seed": seed}, tmp_path / "ref")
    assert_curves_equal(q, victim, ref, ("train_loss", "val_loss"))
