"""What a submission will be, before anything is written: the grids validated, expanded and hashed
(`plan_ids_and_hashes`), the jobs columns about each plan's model (`model_columns`), its estimates
(`planned`), the order that puts every plan after the plans it waits for (`deps_first`), the jobs row
each new plan becomes (`job_row`), and which plans are in the database already (`jobs_by_hash`).

Read-only: `jobqueue.submit` writes the rows these describe, and `looplab plan` (lab/planner)
reads the same plans without writing, so a forecast is of exactly the jobs a submission would add.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy import Connection, Engine

from looplab.model.errors import ConfigError
from looplab.model.names import LOOPED_ARCH_COLUMNS
from looplab.orchestrator import jobkinds, pairing
from looplab.orchestrator.canonical import canonical_json
from looplab.orchestrator.grid import BUDGET_SPEC_KEYS, Grid, JobPlan, assign_hashes, expand, trained_plan
from looplab.orchestrator.schema import Job as JobRow
from looplab.orchestrator.states import JobStatus
from looplab.orchestrator.variants import (
    VARIANT_COLUMNS,
    columns_of,
    flop_budget_tokens,
    resolve,
    shared_overrides,
)

if TYPE_CHECKING:
    from looplab.workers.jobs import JobRegistry

log = logging.getLogger("looplab.submission")
JOBS = JobRow.__table__


def plan_ids_and_hashes(
    eng: Engine, grids: list[Grid], kinds: JobRegistry
) -> tuple[list[JobPlan], dict[str, int]]:
    """Validate and expand the grids (ConfigError on any bad value; match-time references by id must
    name train jobs of this database) and hash them; returns the plans and {config hash: job id} of the
    plans already in the database. Reads only."""
    plans = expand(grids, kinds)
    ref_ids = pairing.existing_references(plans)
    with eng.connect() as conn:
        rows = conn.execute(
            sa.select(JOBS.c.id, JOBS.c.kind, JOBS.c.config_hash).where(JOBS.c.id.in_(ref_ids))
        ).all()
    known = {r.id: r for r in rows}
    for j in ref_ids:
        if j not in known or not jobkinds.trains(known[j].kind, kinds):
            raise ConfigError(f"budget.{pairing.MATCH_TIME}: job {j} is not a train job of this database")
    assign_hashes(plans, {j: known[j].config_hash for j in ref_ids}, kinds)
    with eng.connect() as conn:
        return plans, jobs_by_hash(conn, [p.config_hash for p in plans])


def jobs_by_hash(conn: Connection, config_hashes: list[str]) -> dict[str, int]:
    """{config hash: job id} of the jobs of `config_hashes` that are in the database."""
    query = sa.select(JOBS.c.config_hash, JOBS.c.id).where(JOBS.c.config_hash.in_(config_hashes))
    return dict(conn.execute(query).all())


# What `submit` may be given to store with each new job: (planned seconds, source) per plan, or None.
PlanEstimates = Callable[[Engine, list[JobPlan]], list[tuple[float | None, str | None]]]


def planned(
    eng: Engine, plans: list[JobPlan], estimate: PlanEstimates | None
) -> list[tuple[float | None, str | None]]:
    """(planned seconds, source) per plan; (None, None) where there is no estimate."""
    if estimate is None:
        return [(None, None)] * len(plans)
    try:
        estimates = estimate(eng, plans)
    except Exception:  # an estimate is advice: it never fails a submission
        log.warning("no plan estimates for this submission", exc_info=True)
        return [(None, None)] * len(plans)
    return [(s, src) if s is not None else (None, None) for s, src in estimates]


def model_columns(plans: list[JobPlan]) -> list[dict[str, Any]]:
    """Per plan, the jobs columns about its model (VARIANT_COLUMNS; {} for a job about no model): a
    checkpoint follow-up (depth sweep, eval) copies its train job's (`trained_plan`); a train job with
    a FLOP budget also gets `budget_tokens`, the whole-step token count that budget trains (the
    trainer's own conversion). A generated label leaves out the overrides every model of the
    submission shares (`variants.shared_overrides`)."""
    out: list[dict[str, Any]] = []
    models = [resolve(plan.kind, plan.spec, plan.declared) for plan in plans]
    shared = shared_overrides(models)  # left out of the generated labels
    for plan, resolved in zip(plans, models, strict=True):
        cols = {} if resolved is None else columns_of(resolved, plan.label, shared)
        if resolved is not None and plan.declared.trains and plan.spec.get("flops") is not None:
            cols["budget_tokens"] = flop_budget_tokens(resolved, float(plan.spec["flops"]))
        out.append(cols)
    for i, (plan, resolved) in enumerate(zip(plans, models, strict=True)):
        if plan.family_facts is not None and out[i]:
            out[i] = {**out[i], **family_columns(plan.family_facts)}
            if "budget_tokens" in out[i]:  # a FLOP budget in whole steps at the family's own FLOPs
                per_step = resolved.batch_size * resolved.cfg.seq_len
                steps = int(float(plan.spec["flops"]) / plan.family_facts["flops_per_token"]) // per_step
                out[i]["budget_tokens"] = max(1, steps) * per_step
    for i, plan in enumerate(plans):
        if trained_plan(plans, i) is not None:
            out[i] = {c: out[plan.deps[0]].get(c) for c in VARIANT_COLUMNS}
    return out


def family_columns(facts: dict[str, Any]) -> dict[str, Any]:
    """The variant columns of a model of another family: its parameter count and training FLOPs per
    token (the family's own, else measured at submission), the LoopedLM-only columns NULL."""
    return {
        **dict.fromkeys(LOOPED_ARCH_COLUMNS),  # its blocks are its own: NULL, not looplab's names
        "n_params": facts["n_params"],
        "flops_per_token": facts["flops_per_token"],
    }


def job_row(
    plans: list[JobPlan],
    i: int,
    plan_ids: dict[int, int],
    columns: dict[str, Any],
    estimate: tuple[float | None, str | None],
) -> dict[str, Any]:
    """The jobs row of new plan `i` but its grid and creation time: `columns` are its model's
    (`model_columns`), `estimate` its (planned seconds, source), `plan_ids` the job ids of the plans
    inserted before it (a match-time budget names one)."""
    plan = plans[i]
    budget = stored_budget(plan, plan_ids)
    # a depth sweep or eval is about its train job's model: it copies the identity columns too
    about = (trained_plan(plans, i) or plan).spec
    micro_batch = plan.spec.get("micro_batch_size")
    return dict(
        kind=plan.kind,
        config=canonical_json(plan.spec),
        config_hash=plan.config_hash,
        recipe=about.get("recipe"),
        size=about.get("size"),
        seed=about.get("seed"),
        **{c: columns.get(c) for c in VARIANT_COLUMNS},
        status=JobStatus.QUEUED,
        priority=plan.priority,
        attempts=0,
        max_attempts=plan.max_attempts,
        budget=canonical_json(budget) if budget else None,
        budget_tokens=columns.get("budget_tokens", plan.spec.get("tokens")),
        budget_time_s=plan.spec.get("time_s"),
        budget_flops=plan.spec.get("flops"),
        resources=canonical_json(plan.resources) if plan.resources else None,
        retention=plan.retention,
        # as given: an integer (`auto`, none: NULL)
        micro_batch_size=micro_batch if plan.declared.trains and isinstance(micro_batch, int) else None,
        workers=pairing.workers_of(plan.resources),
        planned_seconds=estimate[0],
        planned_source=estimate[1],
    )


def stored_budget(plan: JobPlan, plan_ids: dict[int, int]) -> dict[str, Any] | None:
    """The budget stored with a new job, for the views: as submitted, or for a train job submitted
    without one the budget its spec implies; a match-time budget as the job whose time it copies."""
    budget = plan.budget
    if budget is None and plan.declared.trains:
        budget = {k: plan.spec[k] for k in BUDGET_SPEC_KEYS if plan.spec.get(k) is not None} or None
    if pairing.is_match_time(budget):
        budget = pairing.stored(pairing.reference_id(plan, plan_ids))
    return budget


def deps_first(plans: list[JobPlan]) -> list[int]:
    """Plan indexes with every plan after the plans it depends on (cycles were refused earlier)."""
    order: list[int] = []
    seen: set[int] = set()

    def visit(i: int) -> None:
        if i not in seen:
            seen.add(i)
            for d in (*plans[i].deps, *plans[i].waits):
                visit(d)
            order.append(i)

    for i in range(len(plans)):
        visit(i)
    return order
