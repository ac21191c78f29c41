"""Depth sweeps record the far-copy share and definition, and convergence against bf16.

Revision ID: 0018_metrics
Revises: 0017_health
Create Date: 2026-12-03

- `depth_evals` gains `far_share` (far tokens / predicted tokens), `far_distance` (tokens back beyond
  which a previous occurrence makes a target far), `far_definition` (which mask the far and near losses
  used, workers/validation.py) and `bf16_round` (the first round whose relative change falls below the
  bf16 resolution of its state, model/geometry.py).
- `round_deltas` gains `change_ratio` (mean ||Δ_t|| / mean ||Δ_{t-1}||) and `bf16_resolution`.

Back-fill: rows that stored a far-copy split before this revision used definition 1 (the target also
occurs beyond the smallest attention window, 64 under full attention), so their `far_definition` is
set to 1 and their losses keep that meaning; their share and distance were not recorded (NULL). The
other new columns stay NULL for old sweeps, which did not measure them.

Downgrade drops the columns (batch mode: SQLite rebuilds the tables).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018_metrics"
down_revision: str | Sequence[str] | None = "0017_health"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# the definition of the far-copy mask before this revision, as workers/validation.py numbers it
WINDOW_MASK = 1
DEPTH_COLUMNS = (
    ("far_share", sa.Float()),
    ("far_distance", sa.Integer()),
    ("far_definition", sa.Integer()),
    ("bf16_round", sa.Integer()),
)
ROUND_COLUMNS = (("change_ratio", sa.Float()), ("bf16_resolution", sa.Float()))


def upgrade() -> None:
    with op.batch_alter_table("depth_evals") as batch:
        for name, kind in DEPTH_COLUMNS:
            batch.add_column(sa.Column(name, kind, nullable=True))
    with op.batch_alter_table("round_deltas") as batch:
        for name, kind in ROUND_COLUMNS:
            batch.add_column(sa.Column(name, kind, nullable=True))
    op.execute(
        f"UPDATE depth_evals SET far_definition = {WINDOW_MASK} "
        "WHERE far_copy_loss IS NOT NULL OR near_loss IS NOT NULL"
    )


def downgrade() -> None:
    with op.batch_alter_table("round_deltas") as batch:
        for name, _ in reversed(ROUND_COLUMNS):
            batch.drop_column(name)
    with op.batch_alter_table("depth_evals") as batch:
        for name, _ in reversed(DEPTH_COLUMNS):
            batch.drop_column(name)
