"""A stored identity of the database, so that the ids of its alerts are its own.

Revision ID: 0022_database_identity
Revises: 0021_equal_loss_decode
Create Date: 2026-12-05

- `database_identity`: one row (id 1) holding a random UUID, written the first time looplab needs it
  (orchestrator/alerts.py `database_identity`), not here: a database copied from a template before its
  first use (as the tests' databases are) still gets an identity of its own. An alert's id is made from
  it, so two databases never send the same id and a receiver that drops repeats by id loses nothing
  (issue 50: three databases' alerts shared ids).
New table only: nothing to back-fill. Downgrade drops it.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022_database_identity"
down_revision: str | Sequence[str] | None = "0021_equal_loss_decode"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "database_identity",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("uuid", sa.String(length=36), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_database_identity"),
    )


def downgrade() -> None:
    op.drop_table("database_identity")
