"""The jobs a forecast places: the queue's queued and running jobs (`queue_jobs`) and the grids' plans
(`grid_jobs`), each a `ForecastJob` with its estimate, what it asks (the same `jobkinds.job_resources`
the scheduler reads) and, for the simulation's aging, since when it waits; plus what this machine has
(`local_slots`, `device_memory`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy import Engine

from looplab.lab.planner.estimates import Estimate, TimeModel
from looplab.orchestrator import jobkinds, pairing
from looplab.orchestrator.admission import Request
from looplab.orchestrator.estimate_source import EstimateSource
from looplab.orchestrator.jobkinds import Pricing
from looplab.orchestrator.schema import Job as JobRow
from looplab.orchestrator.schema import JobDep
from looplab.orchestrator.states import JobStatus

if TYPE_CHECKING:
    from looplab.orchestrator.grid import JobPlan

JOBS = JobRow.__table__


@dataclass
class ForecastJob:
    """One row of a forecast: a job of the queue (`job_id`) or of the grids (`job_id` None), with its
    estimate and, after the simulation, when it starts and ends (seconds from now) and where, or why the
    scheduler will refuse it."""

    key: str  # "#12" for a job of the database, "+3" for the grids' fourth plan
    kind: str
    what: str  # recipe / variant label, size, seed
    status: str  # new | queued | running | present (the grids' job is already in the database)
    estimate: Estimate
    priority: int = 0
    order: int = 0  # the scheduler's tie-break after effective priority (the job id)
    deps: list[str] = field(default_factory=list)
    cpus: float = 1.0  # per worker
    gpus: float = 0.0  # per worker
    workers: int = 1  # started all at once (a gang)
    exclusive: bool = False
    since_s: float = 0.0  # when it began to wait (aging) and may start, in seconds from now
    remaining_s: float | None = None  # what is left to run (a running job: less than the estimate)
    job_id: int | None = None
    fits: bool | None = None
    device_memory: float | None = None
    start_s: float | None = None
    end_s: float | None = None
    device: str = ""  # where the simulation placed it: "cpu" or "gpu0", "gpu1", ...
    refused: str | None = None  # why the scheduler will refuse it (it can never be placed)
    retention: str | None = None  # what its artifact dir keeps once it succeeded (orchestrator/retention.py)
    preemptible: bool = False  # an urgent job may stop it (orchestrator/admission.py)
    preempted_s: list[float] = field(default_factory=list)  # when the simulation preempted it
    left_s: float | None = None  # the simulation's: what a preempted job has left to run when it resumes

    @property
    def disk_kept(self) -> float | None:
        """Bytes its artifact files keep after it succeeded (None: not planned)."""
        disk = self.estimate.disk if self.estimate is not None else None
        return None if disk is None else disk.kept(self.retention)

    @property
    def request(self) -> Request:
        return Request(self.cpus, self.gpus, self.workers, self.exclusive, self.preemptible)

    def asks(self, res: dict[str, Any]) -> ForecastJob:
        """Set what it asks from `jobkinds.job_resources`' dict."""
        self.cpus, self.gpus = res["num_cpus"], res["num_gpus"]
        self.workers, self.exclusive = res["workers"], res["exclusive"]
        self.preemptible = bool(res.get("preemptible", False))
        return self


def describe(spec: dict[str, Any], label: str | None = None) -> str:
    """What model a job is about, as its row shows it: its label (else recipe and size, or another
    family's module name) and, for a run that has one, its seed (which of the runs of that model it is)."""
    family = spec.get("family")
    if family:  # another family: its recipe and size only set the run's context, so name the family
        name = label or family.partition(":")[0].rpartition(".")[2]
        parts = [str(name)]
    else:
        parts = [str(label or spec.get("recipe") or ""), str(spec.get("size") or "")]
    if spec.get("seed") is not None:
        parts.append(f"seed {spec['seed']}")
    return " ".join(p for p in parts if p)


def local_slots(num_cpus: float | None = None, num_gpus: float | None = None) -> tuple[float, float]:
    """(CPUs, GPUs) the queue will have, as a local `looplab run` gets them: the flags, else the machine."""
    cpus = float(num_cpus) if num_cpus is not None else float(os.cpu_count() or 1)
    if num_gpus is None:
        try:
            import torch

            num_gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        except Exception:  # no usable torch: no GPU
            num_gpus = 0
    return cpus, float(num_gpus)


def device_memory(device: str) -> float | None:
    """Bytes of memory of the device jobs run on: GPU 0's, or the machine's RAM."""
    if device == "cuda":
        try:
            import torch

            return float(torch.cuda.get_device_properties(0).total_memory)
        except Exception:  # no GPU here: nothing to compare with
            return None
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def _trained(kind: str, deps: list[Any]) -> tuple[str, dict[str, Any]] | None:
    """The kind and spec of the job a checkpoint follow-up of `kind` is about: the dependency of a kind
    priced as TRAINING (a match-time train job's dependency is its reference: it is about no other job)."""
    if jobkinds.declared(kind).about != jobkinds.CHECKPOINT:
        return None
    trains = jobkinds.priced(Pricing.TRAINING)
    return next(((d.kind, json.loads(d.config)) for d in deps if d.kind in trains), None)


def queue_jobs(eng: Engine, model: TimeModel, has_gpu: bool, now: float) -> list[ForecastJob]:
    """The queue's queued and running jobs as ForecastJobs (the stored plan estimate when there is one,
    else a fresh one; a running job for what is left: its progress ETA, else estimate less elapsed).
    A queued job waits since its retry backoff ended or a user retried it, else since its submission."""
    from looplab.orchestrator.jobkinds import job_resources

    deps = JobDep.__table__
    dep = sa.alias(JOBS, "dep")
    with eng.connect() as conn:
        rows = conn.execute(
            sa.select(JOBS)
            .where(JOBS.c.status.in_((JobStatus.QUEUED, JobStatus.RUNNING)))
            .order_by(JOBS.c.id)
        ).all()
        links = conn.execute(
            sa.select(deps.c.job_id, deps.c.depends_on, dep.c.status, dep.c.config, dep.c.kind)
            .join(dep, dep.c.id == deps.c.depends_on)
            .where(deps.c.job_id.in_([r.id for r in rows]))
        ).all()
    waiting: dict[int, list[Any]] = {}
    for link in links:
        waiting.setdefault(link.job_id, []).append(link)
    out = []
    for r in rows:
        my_deps = waiting.get(r.id, [])
        if any(d.status in (JobStatus.FAILED, JobStatus.CANCELLED) for d in my_deps):
            continue  # the cascade fails it: it will not run
        spec = json.loads(r.config)
        trained = _trained(r.kind, my_deps)
        if r.planned_seconds is not None:  # what was planned at submission
            est = Estimate(r.planned_seconds, EstimateSource(r.planned_source or EstimateSource.UNKNOWN))
        else:
            est = model.estimate(
                r.kind,
                spec,
                trained=trained,
                ref_train_s=r.budget_time_s,
                workers=pairing.workers_of(r.resources),
            )
        job = ForecastJob(
            key=f"#{r.id}",
            kind=r.kind,
            status=r.status,
            what=describe(trained[1] if trained else spec, r.variant_label),
            estimate=est,
            priority=r.priority,
            order=r.id,
            job_id=r.id,
            remaining_s=est.seconds,
            since_s=(r.not_before if r.not_before is not None else r.created_at) - now,
            deps=[f"#{d.depends_on}" for d in my_deps if d.status != JobStatus.SUCCEEDED],
            retention=r.retention,
        ).asks(job_resources(r.kind, r.resources, has_gpu))
        if r.status == JobStatus.RUNNING:
            elapsed = now - (r.started_at or now)
            left = [] if est.seconds is None else [max(0.0, est.seconds - elapsed)]
            if r.eta_s is not None and r.eta_s == r.eta_s:
                left = [float(r.eta_s)]
            job.remaining_s = left[0] if left else None
        out.append(job)
    return out


def grid_jobs(
    plans: list[JobPlan],
    existing: dict[str, int],
    estimates: list[Estimate],
    queued_ids: set[int],
    next_id: int,
    gpus: float,
    memory: float | None,
) -> list[ForecastJob]:
    """The grids' plans as ForecastJobs behind the queue: one per distinct job ("present" when the
    database has it already; skipped when it is queued or running, so it is among `queue_jobs`), in the
    order the queue will give them ids, each flagged when its estimated memory exceeds its device's
    (`memory`: the GPU's, times its GPU fraction; the machine's RAM on the CPU)."""
    from looplab.orchestrator.grid import trained_plan
    from looplab.orchestrator.jobkinds import job_resources
    from looplab.orchestrator.submission import deps_first

    keys = [
        f"#{existing[p.config_hash]}" if p.config_hash in existing else f"+{i}" for i, p in enumerate(plans)
    ]
    rank = {i: n for n, i in enumerate(deps_first(plans))}
    pairs = pairing.members(plans)  # train jobs of an iso-time pair: exclusive by default
    seen: set[str] = set()
    out = []
    for i, plan in enumerate(plans):
        known = existing.get(plan.config_hash)
        if (known is not None and known in queued_ids) or plan.config_hash in seen:
            continue  # already in the queue above, or the same job as an earlier plan (one decode bench)
        seen.add(plan.config_hash)
        about = trained_plan(plans, i) or plan
        res = job_resources(plan.kind, plan.resources, gpus > 0, exclusive_default=i in pairs)
        est = estimates[i]
        job = ForecastJob(
            key=keys[i],
            kind=plan.kind,
            what=describe(about.spec, about.label),
            status="present" if known is not None else "new",
            estimate=est,
            priority=plan.priority,
            order=next_id + rank[i],
            deps=[keys[d] for d in (*plan.deps, *plan.waits)] + [f"#{j}" for j in plan.dep_ids],
            job_id=known,
            remaining_s=None if known is not None else est.seconds,
            retention=plan.retention,
        ).asks(res)
        share = res["num_gpus"] if gpus > 0 and res["num_gpus"] > 0 else 1.0
        if memory is not None and est.peak_mem_bytes is not None:
            job.device_memory = memory * min(1.0, share)
            job.fits = est.peak_mem_bytes <= job.device_memory
        out.append(job)
    return out
