"""Index metrics by (job_id, key, wall_s) for iso-time comparisons.

Revision ID: 0002_metrics_wall_s
Revises: 0001_initial
Create Date: 2026-11-29

Comparing runs at equal training time reads one curve ordered (or range-filtered) by `wall_s`; the
unique (job_id, key, step) index serves step order only. Small, but real: it also gives the
data-survives-upgrade harness a revision pair to run over.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0002_metrics_wall_s"
down_revision: str | Sequence[str] | None = "0001_initial"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_metrics_job_id_key_wall_s", "metrics", ["job_id", "key", "wall_s"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_metrics_job_id_key_wall_s", table_name="metrics")
