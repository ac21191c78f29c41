"""Curves drawn from the points drawn: a level per metric point and a point count per curve.

Revision ID: 0015_curve_points
Revises: 0014_workers
Create Date: 2026-12-01

A study logs every step: 100 runs × 300,000 points is 30 M metric rows, and the Runs page used to scan
every point of every curve it drew (a window function over the whole curve) to keep 500 of them.
- `metrics.curve_level`: the point at position p (0-based, in step order, within its job and key) has
  level = the number of trailing zero bits of p, the first point 40 (at most 40): "every 2^L-th point"
  is `curve_level >= L`, one range of the new partial index `ix_metrics_curve_level` (job_id, key,
  curve_level) WHERE curve_level >= 1, which holds half the points (a curve short enough to be drawn
  whole is read through the unique index).
- `latest_metrics.points`: how many points the curve has, so a reader knows its stride without
  counting; the row is the curve's last point by step.

Back-fill, in SQL: the levels from each point's position (odd positions keep the default 0; on a big
database this rewrites half the metric rows once), every curve's count on its latest_metrics row, and a
row for a curve that has none (one cut by a resume before this revision: its last point); the rows
there keep their values. The back-fill is an UPDATE ... FROM (SQLite 3.33 or later, PostgreSQL).
Downgrade drops the index and the columns.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015_curve_points"
down_revision: str | Sequence[str] | None = "0014_workers"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TOP = 40  # the first point's level (analysis.curves.CURVE_LEVEL_TOP of this revision's time)
INDEX = "ix_metrics_curve_level"


def _level_sql(position: str) -> str:
    """The level of a 0-based position as SQL: trailing zero bits, TOP for position 0 (and at most TOP)."""
    whens = " ".join(f"WHEN {position} % {2 << b} = {1 << b} THEN {b}" for b in range(TOP))
    return f"CASE WHEN {position} = 0 THEN {TOP} {whens} ELSE {TOP} END"


def upgrade() -> None:
    with op.batch_alter_table("metrics") as batch:
        batch.add_column(sa.Column("curve_level", sa.SmallInteger(), server_default="0", nullable=False))
    with op.batch_alter_table("latest_metrics") as batch:
        batch.add_column(sa.Column("points", sa.Integer(), server_default="0", nullable=False))
    conn = op.get_bind()
    conn.execute(
        sa.text(f"""
        UPDATE metrics SET curve_level = r.lvl
        FROM (SELECT id, {_level_sql("rn")} AS lvl FROM (
                SELECT id, ROW_NUMBER() OVER (PARTITION BY job_id, key ORDER BY step) - 1 AS rn FROM metrics
              ) t WHERE rn % 2 = 0) r
        WHERE metrics.id = r.id
        """)
    )
    counts = "SELECT job_id, key, MAX(step) AS last, COUNT(*) AS n FROM metrics GROUP BY job_id, key"
    conn.execute(
        sa.text(f"""
        UPDATE latest_metrics SET points = c.n FROM ({counts}) c
        WHERE latest_metrics.job_id = c.job_id AND latest_metrics.key = c.key
        """)
    )
    # `WHERE 1 = 1`: SQLite would read the upsert's ON as the join's otherwise
    conn.execute(
        sa.text(f"""
        INSERT INTO latest_metrics (job_id, key, step, tokens, wall_s, value, points)
        SELECT m.job_id, m.key, m.step, m.tokens, m.wall_s, m.value, c.n
        FROM ({counts}) c JOIN metrics m ON m.job_id = c.job_id AND m.key = c.key AND m.step = c.last
        WHERE 1 = 1
        ON CONFLICT (job_id, key) DO NOTHING
        """)
    )
    op.create_index(
        INDEX,
        "metrics",
        ["job_id", "key", "curve_level"],
        sqlite_where=sa.text("curve_level >= 1"),
        postgresql_where=sa.text("curve_level >= 1"),
    )


def downgrade() -> None:
    op.drop_index(INDEX, table_name="metrics")
    with op.batch_alter_table("latest_metrics") as batch:
        batch.drop_column("points")
    with op.batch_alter_table("metrics") as batch:
        batch.drop_column("curve_level")
