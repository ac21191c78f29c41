"""Adaptive decode rows name the fixed depth at equal loss and its decode time.

Revision ID: 0021_equal_loss_decode
Revises: 0020_test_split
Create Date: 2026-12-05

- `adaptive_decodes` gains `equal_loss_rounds` (the shallowest fixed depth whose validation loss is at
  most the cell's, under the cell's KV strategy; NULL when none up to max_rounds is) and
  `equal_loss_ms_per_token` (that depth's decode ms per token, timed as the row's fixed depth is), so
  exits are compared with the fixed depth at equal loss, not only with the deepest one (issue 38).

No back-fill: a stored row's job never evaluated the shallower depths, so the new columns stay NULL
and every other value is kept. Downgrade drops them (batch mode: SQLite rebuilds the table).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0021_equal_loss_decode"
down_revision: str | Sequence[str] | None = "0020_test_split"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

DECODE_COLUMNS = (("equal_loss_rounds", sa.Integer()), ("equal_loss_ms_per_token", sa.Float()))


def upgrade() -> None:
    with op.batch_alter_table("adaptive_decodes") as batch:
        for name, kind in DECODE_COLUMNS:
            batch.add_column(sa.Column(name, kind, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("adaptive_decodes") as batch:
        for name, _ in reversed(DECODE_COLUMNS):
            batch.drop_column(name)
