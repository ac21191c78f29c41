"""Crash and resume, end to end: `looplab submit` + `looplab run` as subprocesses on tiny real training
jobs; the driver (and its whole local Ray) is SIGKILLed mid-training after a checkpoint, a new driver
recovers the job and resumes it. The recovery rule on its own is tested in test_transitions.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator import Queue
from tests.db_rows import rows
from workers import jobs
from workers.reporter import MemoryReporter

pytestmark = pytest.mark.ray  # `looplab run` starts a local Ray in its subprocess

ROOT = Path(__file__).resolve().parents[2]
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
from orchestrator import Grid
base = {TRAIN!r}
seed = base.pop("seed", None)
grid = Grid("crash", base=base, sweep={{"seed": [0, 1]}})
"""


def looplab(tmp_path, *args: str, env: dict, **kw) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "lab.cli", "--db", str(tmp_path / "q.db"), *args]
    return subprocess.Popen(
        cmd,
        cwd=tmp_path,
        env=env,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **kw,
    )


def kill_after_checkpoint(q: Queue, driver: subprocess.Popen, step: int = 3, within_s: float = 240) -> None:
    """SIGKILL `driver` (a `looplab run`: the driver, its Ray and the worker, a power cut) once a running
    job of queue `q` has a checkpoint at `step` or later."""
    end = time.time() + within_s
    while not rows(q, "SELECT id FROM jobs WHERE status='running' AND checkpoint_step >= :s", s=step):
        assert driver.poll() is None, driver.stdout.read()
        assert time.time() < end, f"no checkpoint within {within_s:.0f} s"
        time.sleep(0.2)
    os.killpg(driver.pid, signal.SIGKILL)
    driver.wait()


@pytest.mark.slow
def test_sigkill_mid_training_then_resume_exactly(tmp_path, looplab_cache):
    env = {
        **os.environ,
        "LOOPLAB_CACHE": str(looplab_cache),
        "LOOPLAB_HEARTBEAT_GRACE_S": "1",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(ROOT),
    }
    (tmp_path / "grids.py").write_text(GRID_FILE)
    sub = looplab(tmp_path, "submit", "grids.py", env=env)
    out = sub.communicate(timeout=120)[0]
    assert sub.returncode == 0, out
    assert "2 added, 0 already present" in out
    q = Queue(db=tmp_path / "q.db")
    run_args = ("run", "--until-empty", "--num-cpus", "1", "--artifacts", str(tmp_path / "art"))
    kill_after_checkpoint(q, looplab(tmp_path, *run_args, env=env))
    ((victim, ckpt),) = rows(q, "SELECT id, checkpoint_step FROM jobs WHERE status='running'")

    second = looplab(tmp_path, *run_args, env=env)
    out = second.communicate(timeout=300)[0]
    assert second.returncode == 0, out
    assert "recovered 1 interrupted job(s)" in out
    assert set(rows(q, "SELECT status FROM jobs")) == {("succeeded",)}
    attempts = rows(
        q, "SELECT n, outcome, resumed_from_step FROM attempts WHERE job_id=:j ORDER BY n", j=victim
    )
    assert [(n, o) for n, o, _ in attempts] == [(1, "interrupted"), (2, "succeeded")]
    assert attempts[1][2] is not None and attempts[1][2] >= ckpt > 0  # resumed, not from scratch
    for (jid,) in rows(q, "SELECT id FROM jobs WHERE id != :j", j=victim):  # the other ran once
        assert rows(q, "SELECT outcome FROM attempts WHERE job_id=:j", j=jid) == [("succeeded",)]

    # the interrupted job's curves equal an uninterrupted run's, bit for bit, each point exactly once;
    # the queue's workers ran with one thread (OMP_NUM_THREADS=1), and float sums depend on the thread
    # count, so the reference runs with one thread too
    seed = rows(q, "SELECT seed FROM jobs WHERE id=:j", j=victim)[0][0]
    ref = MemoryReporter()
    (tmp_path / "ref").mkdir()
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        jobs.run("train", jobs.validate("train", {**TRAIN, "seed": seed}), ref, tmp_path / "ref")
    finally:
        torch.set_num_threads(threads)
    for key in ("train_loss", "val_loss"):
        got = rows(
            q, "SELECT step, value FROM metrics WHERE job_id=:j AND key=:k ORDER BY step", j=victim, k=key
        )
        assert [tuple(r) for r in got] == ref.curve(key) and len(got) > 0
    n_steps = len(ref.curve("train_loss"))
    assert rows(
        q, "SELECT COUNT(*), COUNT(DISTINCT step) FROM metrics WHERE job_id=:j AND key='train_loss'", j=victim
    ) == [(n_steps, n_steps)]
