"""Loop geometry of the depth sweep: per-round angle and state variance, and the interaction matrix.

Revision ID: 0007_loop_geometry
Revises: 0006_task_scores
Create Date: 2026-11-30

- `round_deltas` gains `angle` (mean angular distance between successive states, radians) and
  `state_var` (mean over tokens of the variance of the state across channels); both NULL for sweeps
  recorded before this revision, which measured only `rel_change`.
- `round_interactions` (job_id, loops, skipped, round) -> interaction: how much skipping round
  `skipped` changes the update of a later round `round` at inference depth `loops` (see
  model/geometry.py for the definition).

Nothing to back-fill: old sweeps did not measure these. Downgrade drops the table and the columns.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007_loop_geometry"
down_revision: str | Sequence[str] | None = "0006_task_scores"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("round_deltas") as batch:
        batch.add_column(sa.Column("angle", sa.Float(), nullable=True))
        batch.add_column(sa.Column("state_var", sa.Float(), nullable=True))
    op.create_table(
        "round_interactions",
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("loops", sa.Integer(), nullable=False),
        sa.Column("skipped", sa.Integer(), nullable=False),
        sa.Column("round", sa.Integer(), nullable=False),
        sa.Column("interaction", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_round_interactions_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("job_id", "loops", "skipped", "round", name=op.f("pk_round_interactions")),
    )


def downgrade() -> None:
    op.drop_table("round_interactions")
    with op.batch_alter_table("round_deltas") as batch:
        batch.drop_column("state_var")
        batch.drop_column("angle")
