"""Depth sweeps may evaluate the test split: its loss and bits per byte per loop count.

Revision ID: 0020_test_split
Revises: 0019_rewinds
Create Date: 2026-12-04

- `depth_evals` gains `test_loss` and `test_bpb`: the loss and bits per byte on the test split (the
  validation stream's tokens after the validation split, workers/heldout.py) at that loop count, for a
  sweep that asked for it.

No back-fill: every stored sweep evaluated the validation split only, so its rows keep every value and
the new columns stay NULL. Downgrade drops them (batch mode: SQLite rebuilds the table).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020_test_split"
down_revision: str | Sequence[str] | None = "0019_rewinds"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

DEPTH_COLUMNS = (("test_loss", sa.Float()), ("test_bpb", sa.Float()))


def upgrade() -> None:
    with op.batch_alter_table("depth_evals") as batch:
        for name, kind in DEPTH_COLUMNS:
            batch.add_column(sa.Column(name, kind, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("depth_evals") as batch:
        for name, _ in reversed(DEPTH_COLUMNS):
            batch.drop_column(name)
