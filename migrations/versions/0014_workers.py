"""How a train run's step runs: global batch, micro-batch and data-parallel workers.

Revision ID: 0014_workers
Revises: 0013_adaptive
Create Date: 2026-12-01

A train job may run data-parallel on N workers (`resources: {"workers": N}`, Ray Train): its
`train_seconds` are wall seconds of N devices at once.

- `train_results.workers`: N, next to the seconds, so that iso-time comparisons match wall seconds at
  equal worker counts and device-seconds (seconds x workers) across worker counts, and the planner
  learns throughput per worker count. Rows written before this revision get 1: no earlier version could
  run a job on more than one worker (the driver refused such jobs).
- `train_results.micro_batch_size`: the sequences per forward the trainer ran (what `auto` picked on
  its device); NULL for rows written before this revision (they ran the whole batch in one forward, or
  as their config says).
- `jobs.micro_batch_size` (a train job's, as its config gives it; NULL: the whole batch in one forward,
  or `auto`) and `jobs.workers` (what its resources ask for, every kind; default 1): copied out of the
  config and resources at submission, like recipe and seed, so the `runs` view shows how a step runs
  without JSON functions (the global batch is `jobs.global_batch`, revision 0010). Existing jobs are
  back-filled from their stored config and resources (a value that is not an integer stays NULL).

The views are not touched here (migrations/env.py re-creates them at head). Downgrade drops the columns
(ALTER TABLE ... DROP COLUMN: SQLite 3.35 or later, PostgreSQL).
"""

import json
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014_workers"
down_revision: str | Sequence[str] | None = "0013_adaptive"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JOB_COLUMNS = ("micro_batch_size", "workers")


def _integer(value):
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _mapping(text):
    try:
        value = json.loads(text) if text else {}
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def upgrade() -> None:
    op.add_column("train_results", sa.Column("workers", sa.Integer(), nullable=True))
    op.add_column("train_results", sa.Column("micro_batch_size", sa.Integer(), nullable=True))
    op.execute("UPDATE train_results SET workers = 1")
    for name in JOB_COLUMNS:
        op.add_column("jobs", sa.Column(name, sa.Integer(), nullable=True))
    jobs = sa.table("jobs", *(sa.column(c) for c in ("id", "kind", "config", "resources", *JOB_COLUMNS)))
    conn = op.get_bind()
    rows = conn.execute(sa.select(jobs.c.id, jobs.c.kind, jobs.c.config, jobs.c.resources)).all()
    for job_id, kind, config, resources in rows:
        values = {"workers": _integer(_mapping(resources).get("workers", 1))}
        if kind == "train":
            spec = _mapping(config)
            values.update(micro_batch_size=_integer(spec.get("micro_batch_size")))
        conn.execute(jobs.update().where(jobs.c.id == job_id).values(**values))


def downgrade() -> None:
    for name in reversed(JOB_COLUMNS):
        op.drop_column("jobs", name)
    op.drop_column("train_results", "micro_batch_size")
    op.drop_column("train_results", "workers")
