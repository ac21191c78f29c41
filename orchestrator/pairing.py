"""Iso-time pairing: a train job whose budget is {"match_time_of": ref} trains for the measured
training time of its reference `ref`, so the two are compared at equal wall time.

Every question about a pair is answered here, once, for the plans of a submission and for the jobs of
the database:

- `is_match_time(budget)`: does this budget (as a grid gives it, a plan holds it, or a job stores it)
  copy another run's time;
- `link(...)` decides which train job a match-time plan copies from (a job id of the database, or a
  dict of train spec keys that must match exactly one train plan of the submission) and records it as
  the plan's last dependency; `reference(plan)` reads it back, `reference_id` as a job id once the
  plans have ids, `stored_reference(budget)` from a stored job's budget, `matched_to(conn, job_id)`
  lists the stored jobs that copy a job's time;
- `members(plans)`: the train plans of an iso-time pair (both sides: their timings are compared, so
  the queue makes them exclusive, see orchestrator.jobqueue), `member_ids` as job ids, with the
  references already in the database;
- `time_budget(seconds, ref_workers, workers)`: what is matched. At equal worker counts the wall
  seconds; across worker counts the device-seconds (seconds x workers: a 2-worker run gets half the
  wall time of a 1-worker reference), so both sides train on as much hardware time. `matched_budgets`
  applies it to the stored jobs that copy a job's time (their workers from their resources).

A budget is stored as {"match_time_of": <job id>}; the job it names is also one of its dependencies
(it can only start once the reference's time is measured).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NamedTuple, Protocol

import sqlalchemy as sa
from sqlalchemy import Connection

from looplab.model.errors import ConfigError
from looplab.orchestrator.schema import Job

MATCH_TIME = "match_time_of"
JOBS = Job.__table__


class JobPlan(Protocol):
    """What pairing reads of a plan (an orchestrator.grid.JobPlan, which imports this module)."""

    budget: dict[str, Any] | None
    deps: list[int]  # indexes of other plans
    dep_ids: list[int]  # jobs of the database


class Reference(NamedTuple):
    """Where a match-time plan's reference is: a plan of the submission (`plan`, an index) or a job
    already in the database (`job`, an id); exactly one is set."""

    plan: int | None = None
    job: int | None = None


def _budget(budget: Mapping[str, Any] | str | None) -> Mapping[str, Any]:
    if isinstance(budget, str):
        budget = json.loads(budget)
    return budget if isinstance(budget, Mapping) else {}


def is_match_time(budget: Mapping[str, Any] | str | None) -> bool:
    """Whether `budget` (a dict, the stored JSON, or None) copies another train job's measured time."""
    return MATCH_TIME in _budget(budget)


def stored(ref_id: int) -> dict[str, int]:
    """The budget a match-time job stores: the job id of its reference."""
    return {MATCH_TIME: ref_id}


def stored_reference(budget: Mapping[str, Any] | str | None) -> int | None:
    """The job id a stored budget copies its time from; None for any other budget."""
    ref = _budget(budget).get(MATCH_TIME)
    return ref if isinstance(ref, int) and not isinstance(ref, bool) else None


def link(
    plans: list[JobPlan], trains: list[tuple[int, dict[str, Any]]], pending: list[tuple[int, str]]
) -> None:
    """Record the reference of each match-time plan of `pending` ((plan index, grid name)): a job id is
    appended to its `dep_ids` (the queue checks it names a train job of the database), a dict of train
    spec keys to its `deps` (the one train plan of `trains`, (index, canonical spec), that it matches,
    not itself). ConfigError naming the grid otherwise."""
    for idx, name in pending:
        ref = plans[idx].budget[MATCH_TIME]
        if isinstance(ref, bool) or not isinstance(ref, int | dict):
            raise ConfigError(f"grid {name!r}: budget.{MATCH_TIME}: {ref!r} is neither a job id nor a dict")
        if isinstance(ref, int):
            plans[idx].dep_ids.append(ref)
            continue
        hits = [i for i, spec in trains if i != idx and all(spec.get(k) == v for k, v in ref.items())]
        if len(hits) != 1:
            raise ConfigError(
                f"grid {name!r}: budget.{MATCH_TIME}: {ref!r} matches {len(hits)} train jobs "
                "of this submission (need exactly one)"
            )
        plans[idx].deps.append(hits[0])


def reference(plan: JobPlan) -> Reference | None:
    """Which job match-time plan `plan` copies its time from (after `link`); None for other plans."""
    if not is_match_time(plan.budget):
        return None
    return Reference(job=plan.dep_ids[-1]) if plan.dep_ids else Reference(plan=plan.deps[-1])


def reference_id(plan: JobPlan, plan_ids: Mapping[int, int]) -> int | None:
    """The job id of `plan`'s reference, given the job id of each plan index (`plan_ids`)."""
    ref = reference(plan)
    if ref is None:
        return None
    return ref.job if ref.job is not None else plan_ids[ref.plan]


def existing_references(plans: list[JobPlan]) -> list[int]:
    """The job ids of the database that match-time plans name as their reference, sorted."""
    return sorted({ref.job for p in plans if (ref := reference(p)) is not None and ref.job is not None})


def members(plans: list[JobPlan]) -> set[int]:
    """Plan indexes of the train plans in an iso-time pair of this submission: every match-time plan
    and the plan it copies from (a reference already in the database is `existing_references`)."""
    out: set[int] = set()
    for i, plan in enumerate(plans):
        ref = reference(plan)
        if ref is not None:
            out |= {i} if ref.plan is None else {i, ref.plan}
    return out


def member_ids(plans: list[JobPlan], plan_ids: Mapping[int, int]) -> list[int]:
    """The job ids of every train job in an iso-time pair of this submission, given the job id of each
    plan index: the `members` and the references already in the database, sorted."""
    return sorted({plan_ids[i] for i in members(plans)} | set(existing_references(plans)))


def matched_to(conn: Connection, job_id: int) -> list[int]:
    """Ids of the stored jobs whose budget copies job `job_id`'s time."""
    rows = conn.execute(sa.select(JOBS.c.id, JOBS.c.budget).where(JOBS.c.budget.is_not(None))).all()
    return [other for other, budget in rows if stored_reference(budget) == job_id]


def time_budget(seconds: float, ref_workers: int | None, workers: int | None) -> float:
    """The training seconds of a match-time run whose reference trained `seconds` on `ref_workers`
    workers, for a run on `workers` (None: 1): equal device-seconds, which at equal counts are equal
    wall seconds."""
    return float(seconds) * (ref_workers or 1) / (workers or 1)


def workers_of(resources: Mapping[str, Any] | str | None) -> int:
    """The data-parallel workers a job's resources ask for (a dict or its stored JSON; default 1)."""
    return int(_budget(resources).get("workers", 1))


def matched_budgets(conn: Connection, job_id: int, seconds: float, workers: int | None) -> dict[int, float]:
    """The time budget of each stored job that copies job `job_id`'s time, which trained `seconds` on
    `workers` workers (`time_budget`)."""
    others = matched_to(conn, job_id)
    asked = dict(conn.execute(sa.select(JOBS.c.id, JOBS.c.resources).where(JOBS.c.id.in_(others))).all())
    return {other: time_budget(seconds, workers, workers_of(asked.get(other))) for other in others}
