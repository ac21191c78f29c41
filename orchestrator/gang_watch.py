"""A gang that stopped making progress is stopped whole by its driver, its placement group removed.

A gang (a train job of `resources: {"workers": N}`, run by Ray Train: workers/train/distributed.py) can wedge
without failing: one rank stops answering (its process frozen, its host hung or cut off in a way Ray's
health checks do not call a death), the other ranks wait in a collective that gloo times out only after
30 minutes, and Ray Train's controller counts a worker whose status poll hangs as alive for 10 minutes
(`RAY_TRAIN_WORKER_HEALTH_CHECK_TIMEOUT_S`), then again for each rank. Found by the CI soak: a gang whose
ranks' hosts were paused and partitioned one after the other hung at 73 % holding both worker CPUs in
its driver's booking, so no other job ran there and the next fault met nothing; only the stall rule
(900 s, then a kill at twice that) would have ended it, and a killed gang's task leaves the placement
group Ray Train made: Ray removes a group when its creator (the controller actor) and the driver's Ray
job have both ended, and the driver runs on.

The rule, at each pass of the driver's loop (`check`, from orchestrator/ray_watch.py `released`): a
running gang whose step has not changed for `limit` seconds (`gang_stall_s`, $LOOPLAB_GANG_STALL_S,
default 600, or `stall_factor` times its median seconds per step when that is longer) since its last
step is stopped whole (`kill`): its task cancelled by force (the process that hosts Ray
Train's driver ends, and the controller actor it owns with it), then its placement group, which rank 0
named to the driver when it started (`EventSink.placement`), removed, which ends every rank's process
and frees its bundles. The attempt is failed as the machine's fault (retried from its checkpoint, after
the backoff; it costs one of `max_attempts`, so a gang that wedges every time ends instead of looping).
Time the driver itself stood still is not counted (`RayWatch.counting_from`). Bound, from the last step
to the job queued again: the limit, plus one pass of the loop (0.5 s) and the cancel. An attempt is
judged from its first step on: before it, the gang's start (a worker's torch import, Ray Train placing
its group and starting its workers, minutes on a loaded machine) is bounded by Ray Train's start
timeouts (workers/train/distributed.py `START_TRIES`) and the task's start by `ray_start_s`; counted from
the launch, a 20 s limit stopped a healthy gang still starting under load.
"""

from __future__ import annotations

import logging
import statistics
from typing import Any

log = logging.getLogger("looplab.scheduler")
DEFAULT_GANG_STALL_S = 600.0


def check(driver: Any, now: float) -> None:
    """The rule on each running gang of `driver` (the orchestrator.scheduler.Scheduler) at `now`
    (time.monotonic()). Its memory, (job, attempt) -> (the step last seen, since when), is the driver's
    `ray_watch.gangs`."""
    from looplab.orchestrator.faults import Fault
    from looplab.orchestrator.states import AttemptOutcome
    from looplab.orchestrator.task import TaskResult

    seen: dict[tuple[int, int], tuple[int | None, float]] = driver.ray_watch.gangs
    running = {(j, n): (ref, held) for ref, (j, n, held) in driver.running.items()}
    for key in [k for k in seen if k not in running]:
        del seen[key]
    for (job, n), (ref, held) in running.items():
        if held.request.workers <= 1:
            continue
        clock = driver.clocks.get(job)
        step = None if clock is None else clock.step
        last = seen.get((job, n))
        if last is None and step is None:
            continue  # not judged before its first step (below)
        if last is None or last[0] != step:
            seen[(job, n)] = (step, now)
            continue
        idle, limit = now - max(last[1], driver.ray_watch.counting_from), _limit(driver, clock)
        if idle <= limit:
            continue
        at = "since its last phase ended" if step is None else f"after step {step}"
        del seen[(job, n)]
        group = kill(driver, ref, job, held.request.workers)
        why = (
            f"gang stalled: no step {at} for {idle:.0f} s (limit {limit:g} s): stopped whole, "
            f"{group}; retried from its checkpoint"
        )
        driver._collect(ref, TaskResult(AttemptOutcome.FAILED, why, fault=Fault.MACHINE))
        driver._say(f"job {job}: attempt {n}: {why}")


def _limit(driver: Any, clock: Any) -> float:
    base = driver.settings.gang_stall_s
    if clock is None or not clock.per_step:
        return base
    return max(base, clock.settings.stall_factor * statistics.median(clock.per_step))


def kill(driver: Any, ref: Any, job: int, workers: int = 1) -> str:
    """End attempt `ref` of `job` at once: its task cancelled by force and, for a gang (`workers` > 1),
    the placement group its rank 0 named removed (the ranks' processes end with it and their bundles
    are freed; Ray would keep the group while the driver runs). What Ray refuses is logged: the attempt
    is dropped whatever it says. Returns what became of the group, in words."""
    import ray

    group = None
    if workers > 1:
        try:
            group = ray.get(driver.sink.placement_of.remote(job), timeout=10)
        except Exception as e:
            log.info("job %s: the gang's placement group is unknown: %s", job, e)
    try:
        ray.cancel(ref, force=True)
    except Exception as e:
        log.info("job %s: cancelling its task: %s", job, e)
    if not group:
        return "its placement group unknown (rank 0 had not named it)"
    try:
        from ray.util.placement_group import PlacementGroup, remove_placement_group

        remove_placement_group(PlacementGroup(ray.PlacementGroupID(bytes.fromhex(group))))
    except Exception as e:
        log.info("job %s: removing its placement group %s: %s", job, group, e)
        return f"its placement group {group} not removed ({type(e).__name__})"
    return f"its placement group {group[:12]} removed"
