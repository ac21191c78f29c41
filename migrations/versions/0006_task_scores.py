"""Task accuracy of eval jobs: the `task_scores` table (shown by the `tasks` view of orchestrator/views.py).

Revision ID: 0006_task_scores
Revises: 0005_timing_context
Create Date: 2026-12-21

- `task_scores` (job_id, task, subset, loops) -> category, n, acc, acc_norm, stderr, chance: what an
  eval job (workers/eval.py) reports, one row per subset of a task at one inference loop count and
  one for the whole task (subset `all`).
- The view `tasks`: those rows labelled with the trained model of the eval (recipe, size, seed, the
  variant and architecture columns; `trained_loops` is the loop count it was trained at, `loops` the
  evaluated one), as `depth` labels the depth sweep. The view is named after the depth sweep's
  `depth`, since a view cannot share its table's name. An eval run on a checkpoint outside the queue
  has NULLs there.

Nothing to back-fill: the table is new. Downgrade drops the table.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006_task_scores"
down_revision: str | Sequence[str] | None = "0005_timing_context"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "task_scores",
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("task", sa.String(length=128), nullable=False),
        sa.Column("subset", sa.String(length=64), nullable=False),
        sa.Column("loops", sa.Integer(), nullable=False),
        sa.Column("category", sa.String(length=16), nullable=True),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.Column("acc", sa.Float(), nullable=False),
        sa.Column("acc_norm", sa.Float(), nullable=True),
        sa.Column("stderr", sa.Float(), nullable=True),
        sa.Column("chance", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_task_scores_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("job_id", "task", "subset", "loops", name=op.f("pk_task_scores")),
    )


def downgrade() -> None:
    op.drop_table("task_scores")
