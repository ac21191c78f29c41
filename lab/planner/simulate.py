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

Preemption, as the scheduler does it: a job the admission decides to preempt for (`Preempt`) stops at
once, checkpointed, so nothing of its work is lost; it waits again with what it had left plus a worker's
start-up, and the urgent job starts in the same instant. A preemptible job may be preempted once it has
run `CHECKPOINT_S` (the trainer checkpoints at least every `ckpt_minutes`, 10 by default: before its first
checkpoint the driver does not stop it) and not within `cooldown_s` of its last preemption.

Worker processes: Ray keeps a finished task's worker process and gives it the next task, so only a job
that starts while every worker so far is busy pays its estimate's `startup_s` (a new process imports torch
and the job's modules before its first step, which for a small CPU job is a large part of its run); the
others start warm. A job of N workers needs N processes; it starts warm when that many are idle.
"""

from __future__ import annotations

import dataclasses

from looplab.lab.planner.jobs import ForecastJob
from looplab.orchestrator.admission import Candidate, Node, Running, admit, effective_priority, place
from looplab.orchestrator.states import JobStatus

EPS = 1e-9
CHECKPOINT_S = 600.0  # a train spec's ckpt_minutes default: a running job has checkpointed by then


def simulate(
    jobs: list[ForecastJob],
    cpus: float,
    gpus: float,
    start_s: float = 0.0,
    aging_s: float | None = None,
    cooldown_s: float = 1800.0,
) -> float:
    """Fill start_s/end_s/device (or `refused`), and `preempted_s`, of every job and return the makespan
    in seconds. A job without an estimate counts as taking no time (the finish time is then a lower
    bound); `aging_s` None: no aging (the bare priorities); `cooldown_s`: the scheduler's
    $LOOPLAB_PREEMPT_COOLDOWN_S."""
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
        left = job.left_s if job.left_s is not None else job.remaining_s
        job.end_s = at + max(0.0, (left or 0.0) - warm_cut)
        running.append((job, held))

    def eligible(job: ForecastJob, held: Running, now: float) -> Running:
        """As the scheduler's `_running_now`: preemptible once checkpointed, not again within cooldown_s."""
        ran = now - (job.start_s or 0.0) >= min(CHECKPOINT_S, job.remaining_s or 0.0)
        cooled = not job.preempted_s or now - job.preempted_s[-1] >= cooldown_s
        return dataclasses.replace(held, preemptible=job.preemptible and ran and cooled)

    for job in sorted(
        (j for j in jobs if j.status == JobStatus.RUNNING), key=lambda j: (-j.priority, j.order)
    ):
        placement = place(node, [held for _, held in running], job.request)  # where the driver put it
        job.device = placement.devices() if placement is not None else "gpu?"
        start(job, 0.0, Running(job.request, placement, job, job.priority))
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
        decided = admit(ranked, node, [eligible(j, held, now) for j, held in running])
        if decided.preempts:  # the victims stop now; the pass runs again at the same instant
            for victim in {v.key: v for d in decided.preempts for v in d.victims}.values():
                victim.preempted_s.append(now)
                startup = victim.estimate.startup_s if victim.estimate is not None else 0.0
                victim.left_s = max(0.0, (victim.end_s or now) - now) + startup
                running[:] = [(j, held) for j, held in running if j is not victim]
                queued.append(victim)
            continue
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
