"""The queue's promises under faults (docs/guarantees.md), checked on the cluster's database after a
schedule of faults has run and the drivers are done. Each check names the promise it checks."""

from __future__ import annotations

from collections import Counter

from looplab.orchestrator.states import AttemptOutcome, JobStatus
from looplab.workers import artifacts
from tests.cluster.lab import LabCluster


def check(lab: LabCluster) -> dict:
    """Assert every promise on the cluster's database; a summary of what it saw (jobs, attempts by
    outcome, points) for the test's report."""
    jobs = lab.query("SELECT id, kind, status, attempts, error FROM jobs ORDER BY id")
    attempts = lab.query(
        "SELECT job_id, n, outcome, started_at, ended_at, driver_host, driver_pid FROM attempts ORDER BY job_id, n"
    )
    states = {str(s) for s in JobStatus}
    outcomes = {str(o) for o in AttemptOutcome}
    # every state the queue has is one the checker knows
    assert {j[2] for j in jobs} <= states, jobs
    assert {a[2] for a in attempts} <= outcomes, attempts
    # every job ends: succeeded, or failed with its reason; none lost, none running forever
    for job_id, kind, status, _n, error in jobs:
        assert status in (JobStatus.SUCCEEDED, JobStatus.FAILED), f"job {job_id} ({kind}) ended {status}"
        assert status == JobStatus.SUCCEEDED or error, f"job {job_id} failed without a reason"
    by_job: dict[int, list] = {}
    for a in attempts:
        by_job.setdefault(a[0], []).append(a)
    for job_id, _kind, status, n, _ in jobs:
        mine = by_job.get(job_id, [])
        # exactly one recorded result: one succeeded attempt for a succeeded job, none running
        wins = [a for a in mine if a[2] == AttemptOutcome.SUCCEEDED]
        assert len(wins) == (1 if status == JobStatus.SUCCEEDED else 0), (job_id, mine)
        assert all(a[2] != AttemptOutcome.RUNNING for a in mine), (job_id, mine)
        assert [a[1] for a in mine] == list(range(1, n + 1)), (job_id, mine)
        # never claimed by two live drivers at once: each attempt ended before the next one started
        # or was ended by the takeover that started it
        for earlier, later in zip(mine, mine[1:], strict=False):
            assert (
                earlier[4] is not None
                and earlier[4] <= later[3] + 1e-6
                or earlier[2] == AttemptOutcome.INTERRUPTED
            ), (
                job_id,
                earlier,
                later,
            )
    # a resume never took a checkpoint a replaced attempt wrote late (promise 10): each resumed attempt
    # of a train job recorded, as it started, the checkpoint it then resumed from, and that checkpoint's
    # writer had not been replaced when it was written (workers/artifacts.py)
    dirs = dict(lab.query("SELECT id, artifact_dir FROM jobs WHERE artifact_dir IS NOT NULL"))
    resumed = lab.query(
        "SELECT job_id, n, resumed_from_step FROM attempts WHERE resumed_from_step IS NOT NULL"
    )
    for job_id, n, step in resumed:
        recs = artifacts.records(dirs[job_id])
        if not recs:
            continue  # a kind without checkpoints by attempt (a follow-up resumes nothing of its own)
        taken = [c for c in map(artifacts.parse, recs.get(n, ())) if c is not None and c.step == step]
        assert taken and not all(artifacts.fenced(c, recs) for c in taken), (job_id, n, step, recs.get(n))
    # every metric point stored once
    dupes = lab.query(
        "SELECT job_id, key, step, COUNT(*) FROM metrics GROUP BY job_id, key, step HAVING COUNT(*) > 1"
    )
    assert dupes == [], dupes
    points = lab.query("SELECT COUNT(*) FROM metrics")[0][0]
    return {
        "jobs": len(jobs),
        "succeeded": sum(j[2] == JobStatus.SUCCEEDED for j in jobs),
        "attempts": dict(Counter(a[2] for a in attempts)),
        "points": points,
        "duplicates": len(dupes),
    }
