"""Train results record the tokenizer's vocabulary next to the one asked for.

Revision ID: 0016_prepare
Revises: 0015_curve_points
Create Date: 2026-12-01

A BPE asked for 32,768 tokens gets fewer when its corpus has too little text for more merges (the
offline corpus gives 21,787), and the model is built at the vocabulary it got: its parameter count and
FLOPs follow that one. `train_results.vocab_size` is the vocabulary the run trained with,
`train_results.vocab_size_asked` the one its spec asked for (256 for bytes; a tokenizer file's own
size). NULL for rows written before this revision (not recorded). The views are untouched.

Downgrade drops the columns with ALTER TABLE ... DROP COLUMN (SQLite 3.35 or later, PostgreSQL).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016_prepare"
down_revision: str | Sequence[str] | None = "0015_curve_points"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = ("vocab_size", "vocab_size_asked")


def upgrade() -> None:
    for name in COLUMNS:
        op.add_column("train_results", sa.Column(name, sa.Integer(), nullable=True))


def downgrade() -> None:
    for name in reversed(COLUMNS):
        op.drop_column("train_results", name)
