"""The persistent queue: every state change of a job is one small transaction on the database.

The database is the source of truth, so the scheduler keeps no state it cannot rebuild from here:
- `submit` inserts validated plans in one transaction, idempotently (config hash);
- `ready_jobs` + `claim` hand out work; the claim is a conditional
  `UPDATE jobs SET status='running' ... WHERE id=? AND status='queued'` whose row count says whether
  this driver won (SQLite has no SELECT ... FOR UPDATE; two drivers never run the same job);
- `finish` records an attempt's outcome, retries or fails the job, and cascades failures to
  dependents ("dependency job N failed: ...") and resolves derived iso-time budgets;
- `recover_stale` puts `running` jobs whose heartbeat is older than a grace period back to `queued`.
"""

from __future__ import annotations

import json
import time
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Engine

from orchestrator.errors import ConfigError
from orchestrator.grid import Grid, assign_hashes, canonical_json, expand
from orchestrator.schema import RESULT_TABLES, Attempt, JobDep, JobLog
from orchestrator.schema import Grid as GridRow
from orchestrator.schema import Job as JobRow

J = JobRow.__table__
D = JobDep.__table__
A = Attempt.__table__
DEFAULT_GRACE_S = 60.0


def open_engine(db: str | None = None) -> Engine:
    from orchestrator.db import engine

    return engine(db)


# ---------------------------------------------------------------- submission


def submit(eng: Engine, grids: list[Grid], kinds: Any) -> tuple[list[int], list[int]]:
    """Validate and insert; returns (job ids in plan order, ids that were newly added)."""
    plans = expand(grids, kinds)
    ref_ids = sorted({j for p in plans for j in p.dep_ids})
    with eng.connect() as conn:
        rows = conn.execute(sa.select(J.c.id, J.c.kind, J.c.config_hash).where(J.c.id.in_(ref_ids))).all()
    known = {r.id: r for r in rows}
    for j in ref_ids:
        if j not in known or known[j].kind != "train":
            raise ConfigError(f"budget.match_time_of: job {j} is not a train job of this database")
    assign_hashes(plans, {j: known[j].config_hash for j in ref_ids})
    now = time.time()
    ids: list[int] = []
    added: list[int] = []
    with eng.begin() as conn:
        grid_ids = [_grid_id(conn, g, now) for g in grids]
        existing = dict(
            conn.execute(
                sa.select(J.c.config_hash, J.c.id).where(J.c.config_hash.in_([p.config_hash for p in plans]))
            ).all()
        )
        plan_ids: dict[int, int] = {}  # plan index -> job id
        for i in _deps_first(plans):  # match_time_of may name a train job of a later grid
            p = plans[i]
            if p.config_hash in existing:
                plan_ids[i] = existing[p.config_hash]
                continue
            dep_ids = [plan_ids[d] for d in p.deps] + p.dep_ids
            budget = p.budget
            if budget is None and p.kind == "train":  # stored as submitted-or-implied, for views
                budget = {k: p.spec[k] for k in ("tokens", "time_s") if p.spec.get(k) is not None} or None
            # a depth sweep is about its train job's model: copy the columns views filter on
            about = plans[p.deps[0]].spec if p.kind == "depth_sweep" and p.deps else p.spec
            if budget and "match_time_of" in budget:
                budget = {"match_time_of": dep_ids[-1] if p.dep_ids else plan_ids[p.deps[-1]]}
            jid = conn.execute(
                J.insert().values(
                    grid_id=grid_ids[p.grid_index],
                    kind=p.kind,
                    config=canonical_json(p.spec),
                    config_hash=p.config_hash,
                    recipe=about.get("recipe"),
                    size=about.get("size"),
                    seed=about.get("seed"),
                    status="queued",
                    priority=p.priority,
                    attempts=0,
                    max_attempts=p.max_attempts,
                    budget=canonical_json(budget) if budget else None,
                    budget_tokens=p.spec.get("tokens"),
                    budget_time_s=p.spec.get("time_s"),
                    resources=canonical_json(p.resources) if p.resources else None,
                    created_at=now,
                )  # fmt: skip
            ).inserted_primary_key[0]
            for d in dict.fromkeys(dep_ids):
                conn.execute(D.insert().values(job_id=jid, depends_on=d))
            existing[p.config_hash] = jid
            plan_ids[i] = jid
            added.append(jid)
        ids = list(dict.fromkeys(plan_ids[i] for i in range(len(plans))))
    return ids, added


def _deps_first(plans: list[Any]) -> list[int]:
    """Plan indexes with every plan after the plans it depends on (cycles were refused earlier)."""
    order: list[int] = []
    seen: set[int] = set()

    def visit(i: int) -> None:
        if i not in seen:
            seen.add(i)
            for d in plans[i].deps:
                visit(d)
            order.append(i)

    for i in range(len(plans)):
        visit(i)
    return order


def _grid_id(conn, grid: Grid, now: float) -> int:
    h = grid.spec_hash()
    gid = conn.execute(sa.select(GridRow.id).where(GridRow.spec_hash == h)).scalar()
    if gid is None:
        gid = conn.execute(
            GridRow.__table__.insert().values(
                name=grid.name, spec=canonical_json(grid.to_dict()), spec_hash=h, created_at=now
            )
        ).inserted_primary_key[0]
    return gid


# ---------------------------------------------------------------- claiming


def ready_jobs(eng: Engine, limit: int = 50) -> list[Any]:
    """Queued jobs whose dependencies all succeeded, highest priority first, then oldest."""
    dep = sa.alias(J, "dep")
    blocked = (
        sa.select(D.c.job_id)
        .join(dep, dep.c.id == D.c.depends_on)
        .where(D.c.job_id == J.c.id, dep.c.status != "succeeded")
        .exists()
    )
    q = (
        sa.select(J)
        .where(J.c.status == "queued", ~blocked)
        .order_by(J.c.priority.desc(), J.c.id)
        .limit(limit)
    )
    with eng.connect() as conn:
        return conn.execute(q).all()


def claim(eng: Engine, job_id: int, worker: str, artifact_dir: str) -> int | None:
    """Atomically move one queued job to running; returns the attempt number, or None if lost."""
    now = time.time()
    with eng.begin() as conn:
        won = conn.execute(
            J.update()
            .where(J.c.id == job_id, J.c.status == "queued")
            .values(
                status="running",
                attempts=J.c.attempts + 1,
                started_at=now,
                heartbeat_at=now,
                finished_at=None,
                error=None,
                worker=worker,
                artifact_dir=artifact_dir,
            )  # fmt: skip
        ).rowcount
        if won != 1:
            return None
        n = conn.execute(sa.select(J.c.attempts).where(J.c.id == job_id)).scalar_one()
        conn.execute(A.insert().values(job_id=job_id, n=n, started_at=now, outcome="running", worker=worker))
        # result rows of an earlier, unfinished attempt would be duplicated by this one
        for model in RESULT_TABLES.values():
            conn.execute(model.__table__.delete().where(model.__table__.c.job_id == job_id))
    return n


def launch_spec(eng: Engine, job: Any) -> dict[str, Any]:
    """The spec the worker receives: stored config plus what only exists at launch time."""
    spec = json.loads(job.config)
    with eng.connect() as conn:
        if job.kind == "depth_sweep" and "checkpoint" not in spec:
            dirs = conn.execute(
                sa.select(J.c.artifact_dir)
                .join(D, D.c.depends_on == J.c.id)
                .where(D.c.job_id == job.id, J.c.kind == "train")
            ).scalars().all()  # fmt: skip
            if dirs:
                spec["checkpoint"] = dirs[0]
        budget = json.loads(job.budget) if job.budget else None
        t = None
        if budget and "match_time_of" in budget:
            t = conn.execute(sa.select(J.c.budget_time_s).where(J.c.id == job.id)).scalar()
    if budget and "match_time_of" in budget:
        if t is None:  # the reference had succeeded before this job was submitted
            t = _resolve_budget_of(eng, job.id, budget["match_time_of"])
        if t is None:
            raise RuntimeError(f"derived budget of job {job.id} not resolved (job {budget['match_time_of']})")
        spec["time_s"], spec["tokens"] = float(t), None
    return spec


# ---------------------------------------------------------------- outcomes


def _resolve_budget_of(eng: Engine, job_id: int, ref_id: int) -> float | None:
    """Resolve one derived budget from its succeeded reference's measured training time."""
    TR = RESULT_TABLES["train_results"]
    with eng.begin() as conn:
        secs = conn.execute(
            sa.select(TR.train_seconds)
            .join(J, J.c.id == TR.job_id)
            .where(TR.job_id == ref_id, J.c.status == "succeeded")
        ).scalar()  # fmt: skip
        if secs is not None:
            conn.execute(J.update().where(J.c.id == job_id).values(budget_time_s=float(secs)))
    return None if secs is None else float(secs)


def finish(eng: Engine, job_id: int, n: int, outcome: str, error: str | None = None) -> str:
    """Record attempt `n`'s outcome ('succeeded' | 'failed' | 'interrupted'); returns the job's new status.

    failed: back to queued while the failed attempts are fewer than max_attempts (interruptions do not
    count: a kill -9 is not the job's fault), else failed for good and the dependents with it.
    A job cancelled while it ran stays cancelled whatever the attempt's outcome.
    """
    now = time.time()
    with eng.begin() as conn:
        conn.execute(
            A.update()
            .where(A.c.job_id == job_id, A.c.n == n)
            .values(ended_at=now, outcome=outcome, error=error)
        )
        job = conn.execute(sa.select(J).where(J.c.id == job_id)).one()
        if job.attempts != n:  # recovered and re-claimed meanwhile: that newer attempt owns the job
            return job.status
        if job.status == "cancelled":
            conn.execute(A.update().where(A.c.job_id == job_id, A.c.n == n).values(outcome="cancelled"))
            status = "cancelled"
        elif outcome == "succeeded":
            status = "succeeded"
        elif outcome == "interrupted":
            status = "queued"
        else:
            failures = conn.execute(
                sa.select(sa.func.count()).where(A.c.job_id == job_id, A.c.outcome == "failed")
            ).scalar_one()
            status = "queued" if failures < job.max_attempts else "failed"
        values: dict[str, Any] = {"status": status, "heartbeat_at": now}
        if status in ("succeeded", "failed"):
            values.update(finished_at=now, eta_s=None)
        if error is not None:
            values["error"] = error
            conn.execute(JobLog.__table__.insert().values(job_id=job_id, attempt=n, ts=now, level="ERROR",
                                                          message=error))  # fmt: skip
        conn.execute(J.update().where(J.c.id == job_id, J.c.status != "cancelled").values(**values))
        if status == "succeeded":
            _resolve_budgets(conn, job_id)
    if status in ("failed", "cancelled"):
        cascade(eng)
    return status


def _resolve_budgets(conn, job_id: int) -> None:
    """Jobs whose budget is `match_time_of` this job get its measured training time as their budget."""
    secs = conn.execute(
        sa.select(RESULT_TABLES["train_results"].train_seconds).where(
            RESULT_TABLES["train_results"].job_id == job_id
        )
    ).scalar()
    if secs is None:
        return
    for jid, budget in conn.execute(sa.select(J.c.id, J.c.budget).where(J.c.budget.is_not(None))).all():
        if json.loads(budget).get("match_time_of") == job_id:
            conn.execute(J.update().where(J.c.id == jid).values(budget_time_s=float(secs)))


def cascade(eng: Engine) -> list[int]:
    """Fail every queued job with a failed or cancelled dependency, transitively. Returns their ids."""
    failed_all: list[int] = []
    dep = sa.alias(J, "dep")
    while True:
        with eng.begin() as conn:
            rows = conn.execute(
                sa.select(J.c.id, dep.c.id.label("dep_id"), dep.c.status, dep.c.error)
                .join(D, D.c.job_id == J.c.id)
                .join(dep, dep.c.id == D.c.depends_on)
                .where(J.c.status == "queued", dep.c.status.in_(["failed", "cancelled"]))
            ).all()  # fmt: skip
            if not rows:
                return failed_all
            now = time.time()
            for r in {r.id: r for r in rows}.values():
                reason = (r.error or r.status).strip().splitlines()
                msg = f"dependency job {r.dep_id} {r.status}: {reason[-1] if reason else ''}"
                conn.execute(
                    J.update()
                    .where(J.c.id == r.id, J.c.status == "queued")
                    .values(status="failed", error=msg, finished_at=now)
                )
                failed_all.append(r.id)


def recover_stale(eng: Engine, grace_s: float, exclude: set[int] = frozenset()) -> list[int]:
    """`running` jobs with a heartbeat older than `grace_s` seconds (epoch floats, one clock) go back
    to `queued`; their open attempt is recorded as interrupted. They resume from their checkpoint."""
    cutoff = time.time() - grace_s
    with eng.begin() as conn:
        stale = conn.execute(
            sa.select(J.c.id, J.c.attempts).where(
                J.c.status == "running", sa.or_(J.c.heartbeat_at.is_(None), J.c.heartbeat_at < cutoff)
            )
        ).all()
        out = []
        for jid, n in stale:
            if jid in exclude:
                continue
            won = conn.execute(
                J.update()
                .where(J.c.id == jid, J.c.status == "running", J.c.attempts == n)
                .values(status="queued")
            ).rowcount
            if won:
                conn.execute(
                    A.update()
                    .where(A.c.job_id == jid, A.c.n == n, A.c.outcome == "running")
                    .values(
                        outcome="interrupted", ended_at=time.time(), error="driver lost (stale heartbeat)"
                    )
                )
                out.append(jid)
        # a job cancelled while it ran, whose driver died before the attempt ended: close the attempt
        # (else it stays `running` for ever and the job can never be retried)
        lost = sa.select(J.c.id).where(
            J.c.status == "cancelled", sa.or_(J.c.heartbeat_at.is_(None), J.c.heartbeat_at < cutoff),
            J.c.id.not_in(list(exclude)),
        )  # fmt: skip
        conn.execute(
            A.update()
            .where(A.c.outcome == "running", A.c.job_id.in_(lost))
            .values(
                outcome="cancelled", ended_at=time.time(), error="driver lost after the job was cancelled"
            )
        )
    return out


def touch(eng: Engine, job_ids: list[int]) -> None:
    """The driver's heartbeat for the jobs it owns: proves the owner is alive even between events."""
    if job_ids:
        with eng.begin() as conn:
            conn.execute(
                J.update()
                .where(J.c.id.in_(job_ids), J.c.status == "running")
                .values(heartbeat_at=time.time())
            )


# ---------------------------------------------------------------- user actions


def cancel(eng: Engine, job_ids: list[int]) -> list[int]:
    """Queued or running jobs become cancelled (a running one is asked to stop by its driver)."""
    with eng.begin() as conn:
        hit = conn.execute(
            sa.select(J.c.id).where(J.c.id.in_(job_ids), J.c.status.in_(["queued", "running"]))
        ).scalars().all()  # fmt: skip
        conn.execute(J.update().where(J.c.id.in_(hit)).values(status="cancelled", finished_at=time.time()))
    cascade(eng)
    return list(hit)


def retry(eng: Engine, job_ids: list[int]) -> list[int]:
    """Failed or cancelled jobs go back to queued with one more allowed failure, and so do their
    dependents that failed only because of them."""
    requeued: list[int] = []
    with eng.begin() as conn:
        todo = list(job_ids)
        while todo:
            jid = todo.pop()
            job = conn.execute(sa.select(J).where(J.c.id == jid)).first()
            if job is None or job.status not in ("failed", "cancelled"):
                continue
            if conn.execute(sa.select(A.c.n).where(A.c.job_id == jid, A.c.outcome == "running")).first():
                continue  # cancelled but its attempt still runs until it stops: a retry now would run it twice
            failures = conn.execute(
                sa.select(sa.func.count()).where(A.c.job_id == jid, A.c.outcome == "failed")
            ).scalar_one()
            conn.execute(
                J.update().where(J.c.id == jid)
                .values(status="queued", error=None, finished_at=None,
                        max_attempts=max(job.max_attempts, failures + 1))
            )  # fmt: skip
            requeued.append(jid)
            dependents = conn.execute(
                sa.select(J.c.id)
                .join(D, D.c.job_id == J.c.id)
                .where(D.c.depends_on == jid, J.c.status == "failed", J.c.error.like(f"dependency job {jid} %"))
            ).scalars().all()  # fmt: skip
            todo.extend(dependents)
    return requeued


def pending_count(eng: Engine) -> int:
    """Jobs still queued or running (used by --until-empty)."""
    with eng.connect() as conn:
        return conn.execute(
            sa.select(sa.func.count()).where(J.c.status.in_(["queued", "running"]))
        ).scalar_one()  # fmt: skip


def statuses(eng: Engine, job_ids: list[int]) -> dict[int, str]:
    with eng.connect() as conn:
        return dict(conn.execute(sa.select(J.c.id, J.c.status).where(J.c.id.in_(job_ids))).all())
