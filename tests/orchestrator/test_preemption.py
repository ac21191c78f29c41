"""Preemption through the real queue with the real trainer (session Ray): a low-priority preemptible run
is stopped for an urgent job, resumes after it from the step it stopped at, and its curves equal an
uninterrupted run's bit for bit; each job's result is recorded once."""

from __future__ import annotations

import threading
import time

from looplab import Grid, Queue
from looplab.orchestrator.scheduler import Scheduler
from tests.db_rows import rows
from tests.orchestrator.test_real_jobs import TRAIN, one_thread_run

# both ask for the session cluster's two logical GPUs (the trainer runs on the CPU, one thread each):
# they cannot run side by side
WHOLE = {"num_cpus": 1, "num_gpus": 2}
LONG = {**TRAIN, "recipe": "lean", "seed": 3, "tokens": 4 * 32 * 120, "ckpt_every": 4, "device": "cpu"}


def wait_for(q: Queue, sql: str, timeout: float = 120.0, **params) -> None:
    end = time.time() + timeout
    while not rows(q, sql, **params):
        assert time.time() < end, f"timed out waiting for {sql}"
        time.sleep(0.05)


def test_a_preempted_real_run_resumes_after_the_urgent_job_bit_for_bit(tmp_path, ray_cluster):
    q = Queue(db=tmp_path / "q.db", artifacts=tmp_path / "art")
    (long,) = q.submit(Grid("long", base=LONG, resources={**WHOLE, "preemptible": True}))
    sched = Scheduler(q.eng, q.artifacts, until_empty=True, progress=False, poll_s=0.1)
    t = threading.Thread(target=sched.run, daemon=True)
    t.start()
    wait_for(q, "SELECT 1 FROM jobs WHERE id=:j AND checkpoint_step >= 8", j=long)
    urgent_spec = {**TRAIN, "recipe": "lean", "seed": 4, "tokens": 4 * 32 * 8, "device": "cpu"}
    (urgent,) = q.submit(Grid("urgent", base=urgent_spec, priority=20, resources=WHOLE))
    t.join(300)
    assert not t.is_alive()
    assert rows(q, "SELECT id, status FROM jobs ORDER BY id") == [(long, "succeeded"), (urgent, "succeeded")]
    attempts = rows(q, "SELECT job_id, outcome, resumed_from_step FROM attempts ORDER BY started_at")
    assert [(j, o) for j, o, _ in attempts] == [
        (long, "preempted"),
        (urgent, "succeeded"),
        (long, "succeeded"),
    ]
    assert attempts[2][2] >= 8  # it resumed from the checkpoint it wrote when it stopped

    (tmp_path / "ref").mkdir()
    ref = one_thread_run(LONG, tmp_path / "ref")
    for key in ("train_loss", "val_loss"):
        got = rows(
            q, "SELECT step, value FROM metrics WHERE job_id=:j AND key=:k ORDER BY step", j=long, k=key
        )
        assert [tuple(r) for r in got] == ref.curve(key) and len(got) > 0, key  # each point once
    assert rows(q, "SELECT COUNT(*) FROM train_results WHERE job_id=:j", j=long) == [(1,)]
    ((rule, step, message),) = rows(
        q, "SELECT rule, step, message FROM health_events WHERE job_id=:j", j=long
    )
    # recorded when the attempt ended, at the step it stopped at: the one the next attempt resumed from
    assert (rule, step) == ("preempted", attempts[2][2]), message
    assert f"preempted for job {urgent}" in message and f"stopped at step {step}" in message
