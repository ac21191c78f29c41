"""Reads of finished jobs: the history the estimates learn from (`finished_runs`), the training time of
existing reference jobs (planned against actual wall time is `orchestrator.frames.planned_vs_actual`,
which the dashboard's Plan page reads too). Reads only.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy import Engine

from looplab.orchestrator import jobkinds, pairing
from looplab.orchestrator.jobkinds import Pricing
from looplab.orchestrator.schema import Attempt, DecodeBench, JobDep, TrainResult
from looplab.orchestrator.schema import Job as JobRow
from looplab.orchestrator.states import AttemptOutcome, JobStatus

if TYPE_CHECKING:
    from looplab.orchestrator.grid import JobPlan

JOBS = JobRow.__table__
# the kind and spec of the job whose checkpoint a follow-up is about (a kind priced as TRAINING)
Followed = tuple[str, dict[str, Any]]


def device_type(device: str | None) -> str:
    return "cuda" if device and str(device).startswith("cuda") else "cpu"


def variant_of(spec: dict[str, Any], kind: str) -> str | None:
    """The variant id of the model a job of `kind` with `spec` names (None: it names none)."""
    from looplab.orchestrator.variants import resolve, variant_id

    resolved = resolve(kind, spec)
    if resolved is None:
        return None
    return variant_id(
        resolved.recipe, resolved.size, resolved.overrides, resolved.run_design(), resolved.identity
    )


def finished_runs(eng: Engine) -> list[dict[str, Any]]:
    """Succeeded jobs whose successful attempt ran start to end (not resumed), with their results: a
    kind priced as TRAINING with its throughput and timings (its `train_results`), a checkpoint
    follow-up with the kind and spec of the job it is about (`trained`, when that kind is priced as
    TRAINING)."""
    deps = JobDep.__table__
    followed = sa.alias(JOBS, "followed")
    trained_by = (
        sa.select(deps.c.job_id, followed.c.kind, followed.c.config)
        .join(followed, followed.c.id == deps.c.depends_on)
        .where(followed.c.kind.in_(jobkinds.priced(Pricing.TRAINING)))
    )
    decode_device = sa.select(DecodeBench.job_id, sa.func.min(DecodeBench.device)).group_by(
        DecodeBench.job_id
    )
    with eng.connect() as conn:
        rows = conn.execute(_finished_query()).all()
        trained_by_job = {job_id: (kind, config) for job_id, kind, config in conn.execute(trained_by).all()}
        decode_on = dict(conn.execute(decode_device).all())
    out = []
    for r in rows:
        try:
            spec = json.loads(r.config)
        except ValueError:
            continue
        item = _run(r, spec, decode_on.get(r.id))
        if item is None:
            continue
        if jobkinds.declared(r.kind).about == jobkinds.CHECKPOINT:  # about its train job's model
            trained = None
            if r.id in trained_by_job:
                kind, config = trained_by_job[r.id]
                trained = (kind, json.loads(config))
            item.update(trained=trained)
            item["variant_id"] = r.variant_id or (variant_of(trained[1], trained[0]) if trained else None)
        out.append(item)
    return out


def _finished_query() -> sa.Select:
    """Each succeeded job's successful attempt that ran start to end, with the job's train results."""
    attempts = Attempt.__table__
    results = TrainResult.__table__
    return (
        sa.select(
            JOBS.c.id,
            JOBS.c.kind,
            JOBS.c.variant_id,
            JOBS.c.config,
            attempts.c.started_at,
            attempts.c.ended_at,
            results.c.steps,
            results.c.tokens_per_s,
            results.c.train_seconds,
            results.c.eval_seconds,
            results.c.ckpt_seconds,
            results.c.device,
            results.c.peak_mem_mb,
            results.c.workers,
        )
        .join(attempts, attempts.c.job_id == JOBS.c.id)
        .outerjoin(results, results.c.job_id == JOBS.c.id)
        .where(
            JOBS.c.status == JobStatus.SUCCEEDED,
            attempts.c.outcome == AttemptOutcome.SUCCEEDED,
            attempts.c.resumed_from_step.is_(None),
            attempts.c.ended_at.is_not(None),
        )
        .order_by(JOBS.c.id)  # oldest first: the machine's factor keeps the most recent (machine_factor.py)
    )


def _run(r: Any, spec: dict[str, Any], decode_device: str | None) -> dict[str, Any] | None:
    """One finished job of `_finished_query` as the estimates read it; None for a job of a kind priced
    as TRAINING without its training time (nothing to learn a throughput from)."""
    wall = float(r.ended_at - r.started_at)
    item: dict[str, Any] = {
        "job_id": r.id,
        "kind": r.kind,
        "variant_id": r.variant_id,
        "spec": spec,
        "wall": wall,
        "device": device_type(r.device or decode_device),
    }
    if jobkinds.declared(r.kind).pricing != Pricing.TRAINING:
        return item
    if r.train_seconds is None:
        return None
    worked = sum(x or 0.0 for x in (r.train_seconds, r.eval_seconds, r.ckpt_seconds))
    item.update(
        steps=r.steps or 1,
        tokens_per_s=r.tokens_per_s,
        eval_seconds=r.eval_seconds,
        ckpt_seconds=r.ckpt_seconds,
        peak_mem_mb=r.peak_mem_mb,
        overhead=max(0.0, wall - worked),
        batch_size=spec.get("batch_size"),
        compile=bool(spec.get("compile")),
        workers=r.workers or 1,
    )
    return item


def existing_train_seconds(eng: Engine, plans: list[JobPlan]) -> dict[int, tuple[float, int]]:
    """Training seconds and workers of the existing jobs that match-time budgets of the plans name by id."""
    ids = pairing.existing_references(plans)
    if not ids:
        return {}
    with eng.connect() as conn:
        rows = conn.execute(
            sa.select(TrainResult.job_id, TrainResult.train_seconds, TrainResult.workers).where(
                TrainResult.job_id.in_(ids)
            )
        ).all()
    return {job_id: (float(s), w or 1) for job_id, s, w in rows if s is not None}


def max_job_id(eng: Engine) -> int:
    with eng.connect() as conn:
        return int(conn.execute(sa.select(sa.func.max(JOBS.c.id))).scalar() or 0)
