"""What a job's artifact dir keeps once it succeeded: `jobs.retention`.

Revision ID: 0011_retention
Revises: 0010_run_identity
Create Date: 2026-12-01

`jobs.retention` is "final" (drop the resume state, checkpoint.pt, once the job succeeded; keep the
final weights) or "all" (keep everything), set at submission from the grid (orchestrator/retention.py).
Existing jobs get none: their files are left as they are unless a user runs `looplab gc`. Downgrade drops
the column.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011_retention"
down_revision: str | Sequence[str] | None = "0010_run_identity"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("retention", sa.String(length=16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("retention")
