"""Who owns a job, who may act on it, and what was done to it (issue 56; schema: revision 0024).

Identity comes from the database, never from the client: on PostgreSQL a grid's and a job's `owner`
is the session user that inserted it, set by a trigger on the server; on SQLite (a single-user
database) it is the operating-system user looplab notes in `local_user` when it opens the file. The
`audit` table is written by triggers too, so what a person does in plain SQL is recorded like what
they do through looplab.

The user actions here (cancel, retry, priority) check ownership first only to refuse with a message
that names the job, its owner and the role needed; the refusal that counts is the database's own
(row-level security, orchestrator/roles.py and revision 0024), which a member's psql session meets too.
"""

from __future__ import annotations

import time

import pandas as pd
import sqlalchemy as sa
from sqlalchemy import Connection, Engine

from looplab.model import fields
from looplab.orchestrator import jobqueue
from looplab.orchestrator.errors import LooplabError
from looplab.orchestrator.schema import Audit, Job
from looplab.orchestrator.states import ACTIVE, JobStatus

ADMIN_ROLE = "looplab_admin"  # the group role whose members may act on anyone's jobs (orchestrator/roles.py)
AUDIT = Audit.__table__
JOBS = Job.__table__
AUDIT_ACTIONS = ("grid", "submit", "cancel", "retry", "priority", "preempt", "resources")
PRIORITY_RANGE = (-1_000_000, 1_000_000)
VERBS = {"cancel": "cancelling", "retry": "retrying", "priority": "re-prioritising"}


class NotYourJob(LooplabError):
    """A member asked to act on jobs of another member's grid."""


def current_user(conn: Connection) -> str | None:
    """Who the database says this session is: PostgreSQL's session user, SQLite's noted OS user."""
    if conn.dialect.name == "postgresql":
        return conn.exec_driver_sql("SELECT session_user").scalar()
    return conn.exec_driver_sql("SELECT name FROM local_user WHERE id = 1").scalar()


def privileged(conn: Connection) -> bool:
    """Whether this session may act on anyone's jobs: on PostgreSQL the database's own rule
    (`looplab_privileged()`: superuser, the tables' owner, looplab_admin or looplab_driver); a SQLite
    file has one user, who owns everything in it."""
    if conn.dialect.name != "postgresql":
        return True
    return bool(conn.exec_driver_sql("SELECT looplab_privileged()").scalar())


# whether role :name is a member of the admin group (PostgreSQL; a missing group: nobody is; a superuser,
# whom pg_has_role counts a member of every role, is not)
IS_ADMIN = """
SELECT EXISTS (SELECT 1 FROM pg_roles r JOIN pg_roles g ON g.rolname = :group
               WHERE r.rolname = :name AND NOT r.rolsuper AND pg_has_role(r.oid, g.oid, 'MEMBER'))
"""


class Admins:
    """Whether a job's owner is an admin (a member of looplab_admin), for preemption: an admin's urgent
    job may preempt a job that did not opt in (orchestrator/admission.py). Only that group counts, not
    a superuser or the tables' owner, so a one-person PostgreSQL queue behaves as before; SQLite has
    no admins. Each answer is kept `ttl_s` seconds: the driver asks on every pass."""

    def __init__(self, eng: Engine, ttl_s: float = 30.0) -> None:
        self.eng, self.ttl_s = eng, ttl_s
        self._seen: dict[str, tuple[bool, float]] = {}

    def __call__(self, owner: str | None) -> bool:
        if not owner or self.eng.dialect.name != "postgresql":
            return False
        now = time.monotonic()
        hit = self._seen.get(owner)
        if hit is None or now - hit[1] > self.ttl_s:
            with self.eng.connect() as conn:
                yes = conn.execute(sa.text(IS_ADMIN), {"name": owner, "group": ADMIN_ROLE}).scalar()
            hit = self._seen[owner] = (bool(yes), now)
        return hit[0]


def check_owned(eng: Engine, job_ids: list[int], action: str) -> None:
    """Raise NotYourJob naming each of `job_ids` that this session may not `action` (a key of VERBS):
    its owner, and the role that would be needed."""
    with eng.connect() as conn:
        if privileged(conn):
            return
        me = current_user(conn)
        rows = conn.execute(
            sa.select(JOBS.c.id, JOBS.c.owner)
            .where(JOBS.c.id.in_(job_ids), JOBS.c.owner.is_distinct_from(me))
            .order_by(JOBS.c.id)
        ).all()
    if rows:
        whose = "; ".join(f"job {job_id} belongs to {owner or 'nobody (unowned)'}" for job_id, owner in rows)
        raise NotYourJob(
            f"{whose}: {VERBS[action]} another member's job needs the {ADMIN_ROLE} role "
            f"({me} is not a member of it; nothing was changed)"
        )


def _ids(job_ids: int | list[int]) -> list[int]:
    ids = [job_ids] if isinstance(job_ids, int) else list(job_ids)
    return [fields.integer("job_ids", i, lo=1) for i in ids]


def cancel(eng: Engine, job_ids: int | list[int]) -> list[int]:
    """jobqueue.cancel, after refusing (with names) jobs that are not this session's to cancel."""
    ids = _ids(job_ids)
    check_owned(eng, ids, "cancel")
    return jobqueue.cancel(eng, ids)


def retry(eng: Engine, job_ids: int | list[int]) -> list[int]:
    """jobqueue.retry, after refusing (with names) jobs that are not this session's to retry. A retry also
    re-queues the dependents that failed with a job; another member's among them stay failed (row-level
    security skips them) and are not reported as re-queued."""
    ids = _ids(job_ids)
    check_owned(eng, ids, "retry")
    requeued = jobqueue.retry(eng, ids)
    now = jobqueue.statuses(eng, requeued)
    return [job for job in requeued if now.get(job) == JobStatus.QUEUED]


def set_priority(eng: Engine, job_ids: int | list[int], priority: int) -> list[int]:
    """Give queued or running jobs a new priority; returns those whose priority changed. A running
    job keeps running: the priority counts for its next claim and for preemption decisions."""
    ids = _ids(job_ids)
    low, high = PRIORITY_RANGE
    priority = fields.integer("priority", priority, lo=low, hi=high)
    check_owned(eng, ids, "priority")
    with eng.begin() as conn:
        hit = (
            conn.execute(
                JOBS.update()
                .where(
                    JOBS.c.id.in_(ids),
                    JOBS.c.status.in_(ACTIVE),
                    JOBS.c.priority.is_distinct_from(priority),
                )
                .values(priority=priority)
                .returning(JOBS.c.id)
            )
            .scalars()
            .all()
        )
    return sorted(hit)


def audit_frame(
    eng: Engine, job_ids: list[int] | None = None, since: float | None = None, limit: int = 50
) -> pd.DataFrame:
    """The newest `limit` audit rows (of `job_ids`, after `since` when given), oldest first, with the
    owner of each job beside the actor."""
    query = (
        sa.select(
            AUDIT.c.id,
            AUDIT.c.at,
            AUDIT.c.actor,
            AUDIT.c.action,
            AUDIT.c.job_id,
            AUDIT.c.grid_id,
            JOBS.c.owner,
            AUDIT.c.detail,
        )
        .select_from(AUDIT.outerjoin(JOBS, JOBS.c.id == AUDIT.c.job_id))
        .order_by(AUDIT.c.id.desc())
        .limit(limit)
    )
    if job_ids is not None:
        query = query.where(AUDIT.c.job_id.in_(job_ids))
    if since is not None:
        query = query.where(AUDIT.c.at >= since)
    with eng.connect() as conn:
        df = pd.DataFrame(conn.execute(query).mappings().all(), columns=list(query.selected_columns.keys()))
    return df.iloc[::-1].reset_index(drop=True)


def audit_text(eng: Engine, limit: int = 20) -> str:
    """The newest audit rows as lines for `looplab status --audit`."""
    df = audit_frame(eng, limit=limit)
    if df.empty:
        return "audit: nothing recorded yet"
    lines = [f"audit (newest {len(df)}):"]
    for r in df.itertuples():
        when = time.strftime("%m-%d %H:%M:%S", time.gmtime(r.at))
        target = f"job {int(r.job_id)}" if pd.notna(r.job_id) else f"grid {int(r.grid_id)}"
        owner = f" (owner {r.owner})" if isinstance(r.owner, str) and r.owner != r.actor else ""
        detail = f": {str(r.detail)[:80]}" if isinstance(r.detail, str) and r.detail else ""
        lines.append(f"  {when}Z  {r.actor or '?'}  {r.action}  {target}{owner}{detail}")
    return "\n".join(lines)
