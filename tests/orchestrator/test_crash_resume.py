"""Crash and resume, end to end: `looplab submit` + `looplab run` as subprocesses on tiny real training
jobs; the driver (and its whole local Ray) is SIGKILLed mid-training after a checkpoint, a new driver
recovers the job and resumes it. Also: the stale-heartbeat recovery rule on its own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from orchestrator import Queue
from orchestrator.queue import recover_stale
from workers import jobs
from workers.reporter import MemoryReporter

ROOT = Path(__file__).resolve().parents[2]
# long enough (100 steps) that the test catches a job running after its first checkpoint
TRAIN = {"recipe": "lean", "size": "tiny", "seq_len": 32, "batch_size": 4, "tokens": 4 * 32 * 100,
         "ckpt_every": 5, "eval_every": 20, "eval_tokens": 256, "data": {"tokenizer": "byte"}}  # fmt: skip
GRID_FILE = f"""
from orchestrator import Grid
base = {TRAIN!r}
seed = base.pop("seed", None)
grid = Grid("crash", base=base, sweep={{"seed": [0, 1]}})
"""


def looplab(tmp_path, *args: str, env: dict, **kw) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "orchestrator.cli", "--db", str(tmp_path / "q.db"), *args]
    return subprocess.Popen(cmd, cwd=tmp_path, env=env, start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, **kw)  # fmt: skip


def rows(q: Queue, sql: str, **params) -> list:
    with q.eng.connect() as conn:
        return conn.execute(sa.text(sql), params).all()


@pytest.mark.slow
def test_sigkill_mid_training_then_resume_exactly(tmp_path, looplab_cache):
    env = {**os.environ, "LOOPLAB_CACHE": str(looplab_cache), "LOOPLAB_HEARTBEAT_GRACE_S": "1",
           "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}  # fmt: skip
    (tmp_path / "grids.py").write_text(GRID_FILE)
    sub = looplab(tmp_path, "submit", "grids.py", env=env)
    out = sub.communicate(timeout=120)[0]
    assert sub.returncode == 0, out
    assert "2 added, 0 already present" in out
    q = Queue(db=tmp_path / "q.db")
    run_args = ("run", "--until-empty", "--num-cpus", "1", "--artifacts", str(tmp_path / "art"))
    first = looplab(tmp_path, *run_args, env=env)
    end = time.time() + 240
    while not rows(q, "SELECT id FROM jobs WHERE status='running' AND checkpoint_step >= 3"):
        assert first.poll() is None, first.stdout.read()
        assert time.time() < end, "no checkpoint within 240 s"
        time.sleep(0.2)
    os.killpg(first.pid, signal.SIGKILL)  # the driver, its Ray and the worker: a power cut
    first.wait()
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

    # the interrupted job's curves equal an uninterrupted run's, bit for bit, each point exactly once
    seed = rows(q, "SELECT seed FROM jobs WHERE id=:j", j=victim)[0][0]
    ref = MemoryReporter()
    (tmp_path / "ref").mkdir()
    jobs.run("train", jobs.validate("train", {**TRAIN, "seed": seed}), ref, tmp_path / "ref")
    for key in ("train_loss", "val_loss"):
        got = rows(
            q, "SELECT step, value FROM metrics WHERE job_id=:j AND key=:k ORDER BY step", j=victim, k=key
        )
        assert [tuple(r) for r in got] == ref.curve(key) and len(got) > 0
    n_steps = len(ref.curve("train_loss"))
    assert rows(q, "SELECT COUNT(*), COUNT(DISTINCT step) FROM metrics WHERE job_id=:j AND key='train_loss'",
                j=victim) == [(n_steps, n_steps)]  # fmt: skip


def test_recovery_puts_stale_running_jobs_back(tmp_path):
    from orchestrator import Grid
    from orchestrator.queue import claim, finish
    from tests.orchestrator import fake_jobs

    q = Queue(db=tmp_path / "q.db", kinds=fake_jobs)
    stale, fresh = q.submit(Grid("r", job="noop", sweep={"tag": [1, 2]}))
    for j in (stale, fresh):
        assert claim(q.eng, j, "driver-x", str(tmp_path / f"a{j}")) == 1
    assert claim(q.eng, stale, "driver-y", "") is None  # claimed once only
    with q.eng.begin() as conn:
        conn.execute(
            sa.text("UPDATE jobs SET heartbeat_at=:t WHERE id=:j"), {"t": time.time() - 120, "j": stale}
        )
    assert recover_stale(q.eng, grace_s=60) == [stale]
    assert dict(rows(q, "SELECT id, status FROM jobs")) == {stale: "queued", fresh: "running"}
    assert rows(q, "SELECT outcome FROM attempts WHERE job_id=:j", j=stale) == [("interrupted",)]
    # the old owner reporting late must not clobber the attempt that owns the job now
    assert claim(q.eng, stale, "driver-y", "") == 2
    assert finish(q.eng, stale, 1, "succeeded") == "running"
    assert rows(q, "SELECT status, attempts FROM jobs WHERE id=:j", j=stale) == [("running", 2)]


def test_heartbeat_of_a_worker_with_a_skewed_clock_is_not_stale(tmp_path):
    """Heartbeats are compared on one clock: a worker node whose clock runs 1000 s behind must not
    make its live job look stale to another driver's recovery."""
    from orchestrator import Grid
    from orchestrator.queue import claim
    from orchestrator.writer import write_events
    from tests.orchestrator import fake_jobs
    from workers.reporter import Event

    q = Queue(db=tmp_path / "q.db", kinds=fake_jobs)
    (jid,) = q.submit(Grid("h", job="noop"))
    n = claim(q.eng, jid, "driver-x", str(tmp_path / "a"))
    write_events(q.eng, [(jid, n, [Event("heartbeat", time.time() - 1000, {})])])
    assert recover_stale(q.eng, grace_s=60) == []
    assert rows(q, "SELECT status FROM jobs WHERE id=:j", j=jid) == [("running",)]


def test_retry_waits_until_a_cancelled_attempt_has_ended(tmp_path):
    """Cancel a running job, then retry it at once: while its attempt still runs (a depth sweep never
    checks the stop flag), a retry would start a second run of the same job on the same artifact dir.
    Once the driver is known lost (stale heartbeat), recovery closes the attempt and retry works."""
    from orchestrator import Grid
    from orchestrator.queue import cancel, claim, retry
    from tests.orchestrator import fake_jobs

    q = Queue(db=tmp_path / "q.db", kinds=fake_jobs)
    (jid,) = q.submit(Grid("c", job="noop"))
    claim(q.eng, jid, "driver-x", str(tmp_path / "a"))
    assert cancel(q.eng, [jid]) == [jid]
    assert retry(q.eng, [jid]) == []  # its attempt is still running
    assert rows(q, "SELECT status FROM jobs WHERE id=:j", j=jid) == [("cancelled",)]
    with q.eng.begin() as conn:
        conn.execute(
            sa.text("UPDATE jobs SET heartbeat_at=:t WHERE id=:j"), {"t": time.time() - 120, "j": jid}
        )
    assert recover_stale(q.eng, grace_s=60) == []  # cancelled stays cancelled ...
    assert rows(q, "SELECT outcome FROM attempts WHERE job_id=:j", j=jid) == [
        ("cancelled",)
    ]  # ... attempt closed
    assert retry(q.eng, [jid]) == [jid]
