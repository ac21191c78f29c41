"""Many drivers on one queue: who holds a running attempt, and the retry backoff.

Revision ID: 0008_drivers
Revises: 0007_loop_geometry
Create Date: 2026-11-30

- `jobs.driver_host` / `jobs.driver_pid` / `jobs.driver_started`: the driver process that holds the
  job's running attempt (host name, pid, the process's start time in epoch seconds), so that a driver
  starting on that host re-queues at once the jobs of a predecessor that is dead, instead of waiting
  for their heartbeats to go stale.
- `attempts.driver_host` / `attempts.driver_pid`: the same, per attempt, as history.
- `jobs.not_before`: a queued job is not claimed before this time (the backoff after a failed attempt).

Back-fill: the driver used to be known only as the text `driver@HOST:PID` of `worker`, which the
running task overwrites with its own node and pid once it starts; where an attempt's `worker` still
holds that text, its host and pid are copied out, and a running job gets those of its latest attempt.
Nothing else can be recovered (the start times were never recorded). Downgrade drops the columns.
"""

import re
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008_drivers"
down_revision: str | Sequence[str] | None = "0007_loop_geometry"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

DRIVER_WORKER = re.compile(r"driver@(.+):(\d+)$")

jobs = sa.table(
    "jobs",
    sa.column("id", sa.Integer),
    sa.column("status", sa.String),
    sa.column("attempts", sa.Integer),
    sa.column("driver_host", sa.String),
    sa.column("driver_pid", sa.Integer),
)
attempts = sa.table(
    "attempts",
    sa.column("job_id", sa.Integer),
    sa.column("n", sa.Integer),
    sa.column("worker", sa.String),
    sa.column("driver_host", sa.String),
    sa.column("driver_pid", sa.Integer),
)


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("driver_host", sa.String(length=200), nullable=True))
        batch.add_column(sa.Column("driver_pid", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("driver_started", sa.Float(), nullable=True))
        batch.add_column(sa.Column("not_before", sa.Float(), nullable=True))
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("driver_host", sa.String(length=200), nullable=True))
        batch.add_column(sa.Column("driver_pid", sa.Integer(), nullable=True))
    _backfill_drivers(op.get_bind())


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("driver_pid")
        batch.drop_column("driver_host")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("not_before")
        batch.drop_column("driver_started")
        batch.drop_column("driver_pid")
        batch.drop_column("driver_host")


def _backfill_drivers(conn: sa.Connection) -> None:
    # the status is spelled out, not taken from orchestrator.states: a revision never imports live code
    rows = conn.execute(
        sa.select(attempts.c.job_id, attempts.c.n, attempts.c.worker).where(
            attempts.c.worker.like("driver@%")
        )
    ).all()
    drivers: dict[tuple[int, int], tuple[str, int]] = {}
    for job_id, n, worker in rows:
        match = DRIVER_WORKER.match(worker)
        if match:
            drivers[(job_id, n)] = (match.group(1), int(match.group(2)))
            conn.execute(
                attempts.update()
                .where(attempts.c.job_id == job_id, attempts.c.n == n)
                .values(driver_host=match.group(1), driver_pid=int(match.group(2)))
            )
    running = conn.execute(sa.select(jobs.c.id, jobs.c.attempts).where(jobs.c.status == "running")).all()
    for job_id, n in running:
        if (job_id, n) in drivers:
            host, pid = drivers[(job_id, n)]
            conn.execute(jobs.update().where(jobs.c.id == job_id).values(driver_host=host, driver_pid=pid))
