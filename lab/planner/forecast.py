"""The planner's entry points: a forecast of grids behind the queue (`plan_grids`, `looplab plan`), of
the queue alone (`forecast_queue`, `looplab status`), and the estimates `submit` stores with new jobs
(`submission_estimates`). Everything here reads the database and never writes it.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy import Engine

from looplab.lab.planner.estimates import LazyTimeModel, TimeModel, estimate_plans
from looplab.lab.planner.history import existing_train_seconds, max_job_id
from looplab.lab.planner.jobs import JOBS, device_memory, grid_jobs, local_slots, queue_jobs
from looplab.lab.planner.local_machine import Calibration, cached_calibration, resolve_calibration
from looplab.lab.planner.report import Forecast
from looplab.lab.planner.simulate import simulate
from looplab.orchestrator.estimate_source import EstimateSource
from looplab.orchestrator.states import JobStatus

if TYPE_CHECKING:
    from looplab.orchestrator.grid import Grid, JobPlan
    from looplab.workers.jobs import JobRegistry


def _scheduler_setting(name: str, given: float | None = None) -> float:
    """`given`, else the scheduler's own setting `name` of orchestrator/settings.py (`aging_seconds`:
    $LOOPLAB_AGING_S, `preempt_cooldown_seconds`: $LOOPLAB_PREEMPT_COOLDOWN_S), so the forecast schedules
    as the driver will."""
    if given is not None:
        return given
    from looplab.orchestrator import settings

    return getattr(settings, name)()


def plan_grids(
    eng: Engine,
    grids: list[Grid],
    kinds: JobRegistry,
    *,
    num_cpus: float | None = None,
    num_gpus: float | None = None,
    calibration: Calibration | None | str = "auto",
    device_memory_bytes: float | None = None,
    now: float | None = None,
    aging_s: float | None = None,
    elsewhere: bool = False,
) -> Forecast:
    """The forecast of `grids` behind the current queue. `calibration`: "auto" (the cached one, else
    measure now and cache it), "cached" (never measure), "fresh" (measure now), a Calibration, or
    None (no FLOP model). `aging_s`: the scheduler's priority aging (default: its setting).
    `elsewhere`: the Calibration is another machine's (a file of `looplab calibrate`, or a device of the
    table: `workers.calibrate.for_device`); the grids are priced alone on that machine, with no queue
    ahead of them and none of this database's jobs or history (they ran here), on its device's memory
    and, unless given, its GPUs and CPUs. Validates the grids as `submit` does (ConfigError) and
    writes nothing."""
    from looplab.orchestrator.submission import plan_ids_and_hashes

    now = time.time() if now is None else now
    if elsewhere:
        if not isinstance(calibration, Calibration):
            raise ValueError(
                f"calibration: elsewhere needs a Calibration of that machine, got {calibration!r}"
            )
        cal: Calibration | None = calibration
        device = calibration.device
        gpus = (
            float(num_gpus)
            if num_gpus is not None
            else float(calibration.device_count if device == "cuda" else 0)
        )
        cpus = float(num_cpus) if num_cpus is not None else float(calibration.cpus or max(1.0, gpus))
        memory = device_memory_bytes if device_memory_bytes is not None else calibration.device_memory_bytes
    else:
        cpus, gpus = local_slots(num_cpus, num_gpus)
        device = "cuda" if gpus > 0 else "cpu"
        cal = resolve_calibration(calibration, device)
        memory = device_memory_bytes if device_memory_bytes is not None else device_memory(device)
    model = TimeModel(None if elsewhere else eng, cal, device, memory)
    plans, existing = plan_ids_and_hashes(eng, grids, kinds)
    existing_train = existing_train_seconds(eng, plans)
    if elsewhere:
        existing, existing_train = {}, {}
    jobs = [] if elsewhere else queue_jobs(eng, model, gpus > 0, now)
    estimates = estimate_plans(model, plans, existing_train_s=existing_train)
    jobs += grid_jobs(plans, existing, estimates, {j.job_id for j in jobs}, max_job_id(eng) + 1, gpus, memory)
    # no job runs: no driver is up, and `looplab run` spends its start-up before the first job
    driver_start = (
        0.0 if cal is None or any(j.status == JobStatus.RUNNING for j in jobs) else cal.driver_start_s
    )
    to_place = [j for j in jobs if j.status != "present"]
    makespan = simulate(
        to_place,
        cpus,
        gpus,
        start_s=driver_start,
        aging_s=_scheduler_setting("aging_seconds", aging_s),
        cooldown_s=_scheduler_setting("preempt_cooldown_seconds"),
    )
    fitted = [j.kind for j in jobs if j.estimate.source == EstimateSource.FLOP_FIT]
    return Forecast(
        jobs,
        cpus,
        gpus,
        makespan,
        now,
        cal,
        driver_start,
        elsewhere=elsewhere,
        factors=model.factors.lines(fitted),
    )


def submission_estimates(eng: Engine, plans: list[JobPlan]) -> list[tuple[float | None, str | None]]:
    """What `jobqueue.submit` stores as (planned_seconds, planned_source) per plan: the database's
    throughputs, else the FLOP model with a calibration already cached (never measured here). A job the
    plan's schedule starts in a worker process an earlier job left idle is stored without the start-up it
    does not pay (`_starts_warm`), so actual / planned compares like with like: charging every job a
    fresh process's start-up put a grid's train jobs at half their plan (docs/planning.md)."""
    cpus, gpus = local_slots()
    device = "cuda" if gpus > 0 else "cpu"
    model = TimeModel(eng, cached_calibration(device), device)
    estimates = estimate_plans(model, plans, existing_train_seconds(eng, plans))
    warm = _starts_warm(eng, plans, cpus, gpus)
    return [
        (None if e.seconds is None else e.seconds - (e.startup_s if i in warm else 0.0), e.source)
        for i, e in enumerate(estimates)
    ]


def _starts_warm(eng: Engine, plans: list[JobPlan], cpus: float, gpus: float) -> set[int]:
    """The plans whose new job starts in a worker process an earlier job left idle, by the schedule's own
    rule (lab/planner/simulate.py: a job pays the start-up only while every worker process so far is busy)
    applied in the order the queue starts them, without simulating the queue (which took 72 s for a grid
    of 2,000 behind 2,000): behind the jobs already queued or running, the first jobs up to as many as the
    machine runs at once start cold, the others warm; a job that waits for another is priced warm already,
    an exclusive one starts warm after others, a gang keeps its start-up."""
    from looplab.orchestrator.jobkinds import job_resources
    from looplab.orchestrator.submission import deps_first

    with eng.connect() as conn:
        busy = conn.execute(
            sa.select(sa.func.count()).where(JOBS.c.status.in_((JobStatus.QUEUED, JobStatus.RUNNING)))
        ).scalar_one()
    warm: set[int] = set()
    for i in deps_first(plans):
        plan = plans[i]
        if plan.deps or plan.waits or plan.dep_ids:
            continue
        res = job_resources(plan.kind, plan.resources, gpus > 0)
        if res["workers"] > 1:
            continue
        if res.get("exclusive"):  # it starts once the node is empty, in a process an earlier job left
            if busy:
                warm.add(i)
            continue
        at_once = gpus / res["num_gpus"] if res["num_gpus"] > 0 else cpus / max(res["num_cpus"], 1e-9)
        if busy >= max(1, int(at_once)):
            warm.add(i)
        busy += 1
    return warm


def forecast_queue(
    eng: Engine,
    *,
    num_cpus: float | None = None,
    num_gpus: float | None = None,
    now: float | None = None,
    aging_s: float | None = None,
) -> Forecast:
    """The current queue's finish time (`looplab status`): stored plan estimates, else fresh ones
    with the cached calibration (never measured here)."""
    now = time.time() if now is None else now
    cpus, gpus = local_slots(num_cpus, num_gpus)
    device = "cuda" if gpus > 0 else "cpu"
    jobs = queue_jobs(eng, LazyTimeModel(eng, device), gpus > 0, now)  # type: ignore[arg-type]
    makespan = simulate(
        jobs,
        cpus,
        gpus,
        aging_s=_scheduler_setting("aging_seconds", aging_s),
        cooldown_s=_scheduler_setting("preempt_cooldown_seconds"),
    )
    return Forecast(jobs, cpus, gpus, makespan, now, None)
