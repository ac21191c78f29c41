"""The finish time: the scheduler replayed on the estimates (`simulate`).

At time 0 (now; a driver still to be started first spends `start_s`) and whenever a job ends or a waiting
one becomes claimable, the jobs whose dependencies are done are ordered as the queue orders them
(effective priority with aging, `orchestrator.admission.effective_priority`, then the job id) and handed
to the scheduler's own admission rule (orchestrator/admission.py) with the jobs running then: what it
starts starts, in the place it gives, what it refuses is marked refused, and the rest waits. The machine is
one node with `cpus` CPUs and `gpus` GPU devices; the queue's running jobs were placed by the driver and
are placed here first, where they fit (a running job that no longer fits is shown on "gpu?").
Every job waits since `since_s`: a new job since now (submitted with the plan), a queued one since its
submission or the end of its retry backoff, which is also when it may first start.

Worker processes: Ray keeps a finished task's worker process and gives it the next task, so only a job
that starts while every worker so far is busy pays its estimate's `startup_s` (a new process imports torch
and the job's modules before its first step, which for a small CPU job is a large part of its run); the
others start warm. A job of N workers needs N processes; it starts warm when that many are idle.
"""

from __future__ import annotations

from lab.planner.jobs import ForecastJob
from orchestrator.admission import Candidate, Node, Running, admit, effective_priority, place
from orchestrator.states import JobStatus

EPS = 1e-9


def simulate(
    jobs: list[ForecastJob], cpus: float, gpus: float, start_s: float = 0.0, aging_s: float | None = None
) -> float:
    """Fill start_s/end_s/device (or `refused`) of every job and return the makespan in seconds. A job
    without an estimate counts as taking no time (the finish time is then a lower bound); `aging_s`
    None: no aging (the bare priorities)."""
    by_key = {j.key: j for j in jobs}
    node = [Node.with_gpus(cpus, gpus)]
    running: list[tuple[ForecastJob, Running]] = []
    done: set[str] = set()
    processes = 0  # worker processes started so far (busy or idle)

    def start(job: ForecastJob, at: float, held: Running) -> None:
        nonlocal processes
        busy = sum(j.workers for j, _ in running)
        cold = busy + job.workers > processes
        processes = max(processes, busy + job.workers)
        warm_cut = 0.0
        if not cold and job.status != JobStatus.RUNNING and job.estimate is not None:
            warm_cut = job.estimate.startup_s
        job.start_s = at
        job.end_s = at + max(0.0, (job.remaining_s or 0.0) - warm_cut)
        running.append((job, held))

    for job in sorted(
        (j for j in jobs if j.status == JobStatus.RUNNING), key=lambda j: (-j.priority, j.order)
    ):
        placement = place(node, [held for _, held in running], job.request)  # where the driver put it
        job.device = placement.devices() if placement is not None else "gpu?"
        start(job, 0.0, Running(job.request, placement))
    queued = [j for j in jobs if j.status != JobStatus.RUNNING]
    now = start_s
    while True:
        ready = [
            j for j in queued if j.since_s <= now + EPS and all(d in done or d not in by_key for d in j.deps)
        ]
        ranked = sorted(
            (
                Candidate(j, effective_priority(j.priority, now - j.since_s, aging_s), j.request)
                for j in ready
            ),
            key=lambda c: (-c.priority, c.job.order),
        )
        decided = admit(ranked, node, [held for _, held in running])
        for refusal in decided.refused:
            refusal.job.refused = refusal.reason
            queued.remove(refusal.job)
        for s in decided.starts:
            s.job.device = s.placement.devices()
            queued.remove(s.job)
            start(s.job, now, s.running)
        later = [j.since_s for j in queued if j.since_s > now + EPS]
        ends = [j.end_s for j, _ in running]
        if not ends and not later:
            break  # what is left waits on jobs that never run
        now = min(ends + later)
        done.update(j.key for j, _ in running if j.end_s <= now + EPS)
        running[:] = [(j, held) for j, held in running if j.key not in done]
    return max([j.end_s for j in jobs if j.end_s is not None], default=0.0)
