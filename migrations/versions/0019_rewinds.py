"""Rewound loss spikes and the curve points they superseded.

Revision ID: 0019_rewinds
Revises: 0018_metrics
Create Date: 2026-12-04

- `rewinds`: one row per rewind of a job (the trainer's spike rule set to rewind): the attempt, the
  checkpoint step it went back to, the step that spiked and the data rows skipped (a JSON list).
- `superseded_points`: the curve points of the rewound steps, as first trained: kept to be seen, never a
  run's curve (`metrics` keeps one live point per step).
New tables only: nothing to back-fill. Downgrade drops them.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019_rewinds"
down_revision: str | Sequence[str] | None = "0018_metrics"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "rewinds",
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=True),
        sa.Column("ts", sa.Float(), nullable=False),
        sa.Column("step", sa.BigInteger(), nullable=False),
        sa.Column("spiked_step", sa.BigInteger(), nullable=False),
        sa.Column("rows", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name="fk_rewinds_job_id_jobs", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("job_id", "n", name="pk_rewinds"),
    )
    op.create_table(
        "superseded_points",
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("rewind", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("tokens", sa.BigInteger(), nullable=True),
        sa.Column("wall_s", sa.Float(), nullable=True),
        sa.Column("value", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name="fk_superseded_points_job_id_jobs", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("job_id", "rewind", "key", "step", name="pk_superseded_points"),
    )


def downgrade() -> None:
    op.drop_table("superseded_points")
    op.drop_table("rewinds")
