"""A driver released by a batch system's warning or a preemption's SIGTERM (`--release-on USR1,TERM`,
orchestrator/release.py): its running job checkpoints and goes back to the queue as preempted, with a health event saying why, and
the driver exits 0; the next driver resumes the job, whose curves equal an uninterrupted run's bit for
bit. The same on a real SLURM: tests/cluster/test_slurm.py."""

from __future__ import annotations

import os
import signal
import time

import pytest

from looplab import Queue
from tests.db_rows import rows
from tests.orchestrator.crash import assert_curves_equal, driver_env, looplab, submit
from tests.orchestrator.test_crash_resume import TRAIN
from tests.orchestrator.test_real_jobs import one_thread_run

pytestmark = [pytest.mark.ray, pytest.mark.slow]  # `looplab run` starts a local Ray in its subprocess

GRID_FILE = f"""
from looplab import Grid
grid = Grid("release", base={{**{TRAIN!r}, "seed": 5}})
"""


RELEASES = {
    # SLURM's warning before the time limit, then its own TERM at the limit: the second changes nothing
    "time-limit": ((signal.SIGUSR1, signal.SIGTERM), "slurm time limit (SIGUSR1, sbatch --signal)"),
    # a preemption by a higher-priority job: SIGTERM with no warning first (then the grace, then KILL)
    "preemption": ((signal.SIGTERM,), "allocation ending (SIGTERM: a preemption or the time limit)"),
}


@pytest.mark.parametrize("case", sorted(RELEASES))
def test_a_released_driver_hands_its_job_back_checkpointed_and_exits_0(tmp_path, looplab_cache, case):
    sent, why = RELEASES[case]
    env = driver_env(looplab_cache)
    assert "1 added" in submit(tmp_path, GRID_FILE, env)
    q = Queue(db=tmp_path / "q.db")
    run = ("run", "--until-empty", "--num-cpus", "1", "--artifacts", str(tmp_path / "art"))
    driver = looplab(tmp_path, *run, "--release-on", "USR1,TERM", env=env)
    end = time.time() + 240
    while not rows(q, "SELECT id FROM jobs WHERE status = 'running' AND checkpoint_step >= 3"):
        assert driver.poll() is None and time.time() < end, driver.stdout.read() if driver.poll() else "late"
        time.sleep(0.2)
    for sig in sent:
        os.kill(driver.pid, sig)
    out = driver.communicate(timeout=120)[0]
    assert driver.returncode == 0, out
    assert f"{why}: releasing 1 running job(s)" in out, out
    ((job, status, ckpt),) = rows(q, "SELECT id, status, checkpoint_step FROM jobs")
    assert status == "queued" and ckpt >= 3
    assert rows(q, "SELECT outcome FROM attempts WHERE job_id = :j", j=job) == [("preempted",)]
    ((rule, message, at),) = rows(q, "SELECT rule, message, step FROM health_events WHERE job_id = :j", j=job)
    assert rule == "preempted" and message.startswith(why), message

    second = looplab(tmp_path, *run, env=env)
    out = second.communicate(timeout=300)[0]
    assert second.returncode == 0, out
    attempts = rows(q, "SELECT outcome, resumed_from_step FROM attempts WHERE job_id = :j ORDER BY n", j=job)
    assert [o for o, _ in attempts] == ["preempted", "succeeded"], attempts
    assert attempts[1][1] >= ckpt  # resumed from the checkpoint it wrote when released, not from zero
    assert at == attempts[1][1]  # the health event names the step it stopped at, where it resumed
    (tmp_path / "ref").mkdir()
    ref = one_thread_run({**TRAIN, "seed": 5}, tmp_path / "ref")
    assert_curves_equal(q, job, ref, ("train_loss", "val_loss"))
    assert rows(q, "SELECT COUNT(*) FROM train_results WHERE job_id = :j", j=job) == [(1,)]
