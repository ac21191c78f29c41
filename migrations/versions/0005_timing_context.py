"""Jobs keep the planner's estimate; timing rows record what else ran on their node.

Revision ID: 0005_timing_context
Revises: 0004_variants_and_flops
Create Date: 2026-12-20

- `jobs.planned_seconds` / `jobs.planned_source`: the wall time `orchestrator.planner` estimated for
  the job at submission and where the estimate came from (`measured` throughput of the same variant,
  the `flop_model` with this machine's calibration, or `finished` jobs of the same kind), so that the
  planner's error is visible once the job ran. NULL for jobs submitted before this revision and for
  jobs the planner could not estimate cheaply.
- `train_results.concurrent_jobs` / `decode_benches.concurrent_jobs`: how many other jobs were
  running on the same node at any time while the measurement ran (0 = the device to itself),
  recorded by the driver from its own bookkeeping. NULL for rows written before this revision
  (unknown, not "none").

Nothing is back-filled: no estimate was made and no contention was recorded for older rows. The
views are untouched (the dashboard reads these columns from the tables).

Downgrade drops the columns with ALTER TABLE ... DROP COLUMN (SQLite 3.35 or later, PostgreSQL).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005_timing_context"
down_revision: str | Sequence[str] | None = "0004_variants_and_flops"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS: tuple[tuple[str, str, sa.types.TypeEngine], ...] = (
    ("jobs", "planned_seconds", sa.Float()),
    ("jobs", "planned_source", sa.String(length=16)),
    ("train_results", "concurrent_jobs", sa.Integer()),
    ("decode_benches", "concurrent_jobs", sa.Integer()),
)


def upgrade() -> None:
    for table, name, type_ in COLUMNS:
        op.add_column(table, sa.Column(name, type_, nullable=True))


def downgrade() -> None:
    for table, name, _ in reversed(COLUMNS):
        op.drop_column(table, name)
