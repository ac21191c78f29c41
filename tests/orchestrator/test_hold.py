"""A run a health rule held for a person (action `hold`) through the real queue (session Ray): `looplab
status` tells it from a failed job (state `held`, its note opening with the step and the command that
resumes it), and that one command, `looplab retry ID`, resumes it from the checkpoint it stopped at, not
from step 0. The database keeps it failed: states are a migration's (orchestrator/states.py)."""

from __future__ import annotations

from looplab import Grid, Queue
from looplab.dashboard import listing
from looplab.lab.cli import main
from looplab.lab.display import last_grids, table
from looplab.orchestrator.admission import Request, Running
from looplab.orchestrator.frames import job_listing
from looplab.orchestrator.health import HELD, HOLD, STOP, Finding, Level, Rule, is_held, non_finite
from looplab.orchestrator.jobqueue import claim, finish
from looplab.orchestrator.scheduler import Scheduler
from looplab.orchestrator.states import AttemptOutcome
from looplab.orchestrator.task import TaskResult
from tests.db_rows import rows
from tests.orchestrator import fake_jobs
from tests.orchestrator.test_health_queue import collapse_grid


def test_a_held_job_is_shown_held_and_resumed_from_its_checkpoint_by_one_command(
    tmp_path, ray_cluster, monkeypatch, capsys
):
    monkeypatch.setenv("LOOPLAB_ALERTS", str(tmp_path / "none.json"))
    (tmp_path / "none.json").write_text("{}")  # no user's channels
    q = Queue(db=tmp_path / "q.db", artifacts=tmp_path / "art")
    grid = collapse_grid("held", "hold")  # 400 steps: the hold reaches the run long before its end
    ok, held = q.submit(grid)
    q.run(until_empty=True, progress=False, poll_s=0.2, retry_backoff_s=0.05)
    ((step,),) = rows(q, "SELECT step FROM health_events WHERE job_id=:j", j=held)
    err, ckpt = rows(q, "SELECT error, checkpoint_step FROM jobs WHERE id=:j", j=held)[0]
    assert err.startswith(
        f"held for a person at step {step}: `looplab retry {held}` resumes it from its checkpoint; "
    )
    assert "train_loss" in err and "has been at chance" in err
    # it stops at its next step with a checkpoint there (the grid's own cadence is 1000: none before)
    assert ckpt is not None and step <= ckpt < 400
    assert rows(q, "SELECT status, attempts FROM jobs WHERE id=:j", j=held) == [("failed", 1)]  # stored state

    assert main(["--db", q.url, "status", "--all"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.split()[:1] == [str(held)])
    assert " held " in line and " failed " not in line
    assert f"held for a person at step {step}: `looplab retry {held}`" in line
    assert "held: 1" in out and "succeeded: 1" in out and "failed" not in out.splitlines()[-1]

    assert main(["--db", q.url, "retry", str(held)]) == 0  # the one command its note names
    q.run(until_empty=True, progress=False, poll_s=0.2, retry_backoff_s=0.05)
    attempts = rows(q, "SELECT n, resumed_from_step FROM attempts WHERE job_id=:j ORDER BY n", j=held)
    assert attempts[0] == (1, None) and attempts[1] == (2, ckpt)  # from the held step, not from 0
    # still at chance, the resumed run is held again, once a whole window (5) of its own points says so:
    # the replayed points before its checkpoint were judged already (health.py `RunHealth.fresh`)
    events2 = rows(q, "SELECT rule, step, message FROM health_events WHERE job_id=:j AND attempt=2", j=held)
    assert len(events2) == 1, events2
    ((_, again, _),) = events2
    err2, ckpt2, status2 = rows(q, "SELECT error, checkpoint_step, status FROM jobs WHERE id=:j", j=held)[0]
    assert again >= ckpt + 5 and status2 == "failed", (ckpt, again, ckpt2)
    assert ckpt2 is not None and again <= ckpt2 < 400, (ckpt, again, ckpt2)
    assert err2.startswith(f"held for a person at step {again}: `looplab retry {held}`")
    assert rows(q, "SELECT COUNT(*) FROM attempts WHERE job_id=:j", j=ok) == [(1,)]


def test_the_label_is_the_holds_alone(tmp_path):
    """Only a failure a hold caused is shown held: a stop, a crash and a cancelled job keep their state."""
    q = Queue(db=tmp_path / "q.db", artifacts=tmp_path / "art", kinds=fake_jobs)
    jobs = q.submit(Grid("m", base={"tokens": 100}, sweep={"seed": [0, 1, 2]}, max_attempts=1))
    hold, stop = (
        Finding(Rule.AT_CHANCE, Level.ERROR, 12, "train_loss", 5.5, "at chance", a) for a in ("hold", "stop")
    )
    errors = [hold.error(jobs[0]), stop.error(jobs[1]), "Traceback\nValueError: held for a person at step 3"]
    for job, error in zip(jobs, errors):
        claim(q.eng, job, "driver", str(tmp_path / f"a{job}"))
        finish(q.eng, job, 1, AttemptOutcome.FAILED, error)
    assert errors[:2] == [
        f"held for a person at step 12: `looplab retry {jobs[0]}` resumes it from its checkpoint; at chance",
        "at chance",
    ]
    text = table(q.status())
    states = [ln.split()[6] for ln in text.splitlines()[1:4]]
    assert states == [HELD, "failed", "failed"]
    assert text.splitlines()[-1] == "failed: 2  held: 1"
    assert "grid 1 m: 2 failed, 1 held; last finished" in last_grids(q.eng)  # the queue run dry
    # the Queue page's recent failures: the held one's line opens with what resumes it
    failures = listing.recent_failures(job_listing(q.eng)).set_index("job_id")
    assert failures.loc[jobs[0], "error_summary"].startswith(
        f"held for a person at step 12: `looplab retry {jobs[0]}`"
    )
    assert [
        is_held(s, e) for s, e in (("failed", errors[0]), ("cancelled", errors[0]), ("failed", None))
    ] == [True, False, False]


def test_a_run_that_ends_on_its_own_before_the_stop_reaches_it_keeps_its_own_ending(tmp_path):
    """The rules run in the driver, a second or so behind the run: a run pinned at chance by a huge lr
    may reach a NaN (lr 50 on the tiny model: step 30) before the hold's stop reaches it. Its attempt is
    then the NaN's failure, not a hold whose error promises a checkpoint that was never written (what
    left test_hold's checkpoint_step NULL, issue 50), and the job's log says the hold came too late. A run
    that stopped as asked is held; one a `stop` killed fails with the rule's finding; one that finished
    first succeeded."""
    q = Queue(db=tmp_path / "q.db", artifacts=tmp_path / "art", kinds=fake_jobs)
    jobs = q.submit(Grid("race", base={"tokens": 100}, sweep={"seed": [0, 1, 2, 3]}, max_attempts=3))
    sched = Scheduler(q.eng, kinds=fake_jobs, progress=False)
    rule = {
        a: Finding(Rule.AT_CHANCE, Level.ERROR, 12, "train_loss", 5.5, "at chance", a) for a in (HOLD, STOP)
    }
    nan = non_finite("train_loss", 30, float("nan"))
    killed = "Ray task failed: TaskCancelledError"
    ended = {  # job -> the action its rule asked for, how its task ended
        jobs[0]: (
            HOLD,
            TaskResult(AttemptOutcome.FAILED, f"{nan.message}. Traceback follows.\n", finding=nan),
        ),
        jobs[1]: (HOLD, TaskResult(AttemptOutcome.INTERRUPTED)),  # stopped as asked, after its checkpoint
        jobs[2]: (STOP, TaskResult(AttemptOutcome.FAILED, killed, fault="machine")),
        jobs[3]: (HOLD, TaskResult(AttemptOutcome.SUCCEEDED, summary={})),  # its last step came first
    }
    for job, (action, out) in ended.items():
        claim(q.eng, job, "driver", str(tmp_path / f"a{job}"))
        sched.running[job] = (
            job,
            1,
            Running(Request(), None, job),
        )  # the job id as its Ray ref: any key does
        sched.health_stopped[job] = rule[action]  # what `_health_stops` does when it asks
        sched._collect(job, dropped=out)
    sched._write_held()
    got = {j: (s, e) for j, s, e in rows(q, "SELECT id, status, error FROM jobs")}
    assert [s for s, _ in got.values()] == ["failed", "failed", "failed", "succeeded"]
    assert got[jobs[0]][1].startswith("train_loss is nan at step 30") and not is_held(*got[jobs[0]])
    assert got[jobs[1]][1] == rule[HOLD].error(jobs[1]) and is_held(*got[jobs[1]])
    assert got[jobs[2]][1] == "at chance"
    assert rows(q, "SELECT rule, step FROM health_events WHERE job_id=:j", j=jobs[0]) == [("non_finite", 30)]
    late = rows(q, "SELECT job_id, level, message FROM job_logs WHERE message LIKE '%on its own first%'")
    assert [(j, level) for j, level, _ in late] == [(jobs[0], "WARNING"), (jobs[3], "WARNING")]
    assert "asked at step 12 to hold the run" in late[0][2] and "no checkpoint was written" in late[0][2]
