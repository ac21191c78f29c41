"""The queue's crash-and-resume flow, shared by the tests that run it (test_crash_resume.py,
test_gate_resume.py, tests/families/test_huginn_queue.py): `looplab submit` and `looplab run` as
subprocesses running this checkout's code, the driver (and its whole local Ray) SIGKILLed mid-training
after a checkpoint, a new driver that recovers the job and runs the queue to the end, and the resumed
job's stored curves against an uninterrupted run's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from looplab import Queue
from tests.db_rows import rows

ROOT = Path(__file__).resolve().parents[2]


def driver_env(looplab_cache: Path) -> dict[str, str]:
    """The environment of the `looplab` subprocesses: this checkout's code, the session's data cache,
    one torch thread (as the one-thread reference runs) and a short heartbeat grace for the recovery."""
    return {
        **os.environ,
        "LOOPLAB_CACHE": str(looplab_cache),
        "LOOPLAB_HEARTBEAT_GRACE_S": "1",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(ROOT),
    }


def looplab(tmp_path, *args: str, env: dict, db: str | None = None, **kw) -> subprocess.Popen:
    """`looplab --db DB ARGS` in its own session from `tmp_path` (DB: tmp_path/q.db unless given, e.g. a
    PostgreSQL URL), its output piped."""
    cmd = [sys.executable, "-m", "looplab", "--db", db or str(tmp_path / "q.db"), *args]
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


def submit(tmp_path, grid_file: str, env: dict) -> str:
    """`looplab submit` of `grid_file` (the text of a grids.py) into tmp_path/q.db; what it printed."""
    (tmp_path / "grids.py").write_text(grid_file)
    sub = looplab(tmp_path, "submit", "grids.py", env=env)
    out = sub.communicate(timeout=120)[0]
    assert sub.returncode == 0, out
    return out


def crash_and_recover(tmp_path, env: dict, timeout_s: float = 300) -> tuple[Queue, int, int, str]:
    """`looplab run` of the submitted queue on one CPU, SIGKILLed once its running job has a checkpoint,
    then a second `looplab run` that recovers the job and runs the queue empty. Returns the queue, the
    interrupted job's id, its checkpoint step when killed, and the second driver's output."""
    q = Queue(db=tmp_path / "q.db")
    run_args = ("run", "--until-empty", "--num-cpus", "1", "--artifacts", str(tmp_path / "art"))
    kill_after_checkpoint(q, looplab(tmp_path, *run_args, env=env))
    ((victim, ckpt),) = rows(q, "SELECT id, checkpoint_step FROM jobs WHERE status='running'")
    second = looplab(tmp_path, *run_args, env=env)
    out = second.communicate(timeout=timeout_s)[0]
    assert second.returncode == 0, out
    assert "recovered 1 interrupted job(s)" in out, out
    return q, victim, ckpt, out


def assert_curves_equal(q: Queue, job_id: int, ref, keys: tuple[str, ...]) -> None:
    """Job `job_id`'s stored curves of `keys` equal reporter `ref`'s, bit for bit, each point once (the
    steps a killed attempt reported past its checkpoint were replaced, not stored twice), not empty."""
    for key in keys:
        got = rows(
            q, "SELECT step, value FROM metrics WHERE job_id=:j AND key=:k ORDER BY step", j=job_id, k=key
        )
        assert [tuple(r) for r in got] == ref.curve(key) and len(got) > 0, key
        assert len({step for step, _ in got}) == len(got), key


def assert_resumed(q: Queue, job_id: int, ckpt: int) -> None:
    """Job `job_id` ran twice, interrupted then succeeded, the second attempt resumed from its checkpoint
    (step `ckpt` or later when the driver was killed), not from scratch."""
    attempts = rows(
        q, "SELECT n, outcome, resumed_from_step FROM attempts WHERE job_id=:j ORDER BY n", j=job_id
    )
    assert [(n, o) for n, o, _ in attempts] == [(1, "interrupted"), (2, "succeeded")], attempts
    assert attempts[1][2] is not None and attempts[1][2] >= ckpt > 0, attempts
