"""Token and parameter counts as 64-bit integers.

Revision ID: 0009_big_counts
Revises: 0008_drivers
Create Date: 2026-11-30

A run of the study trains on up to 2 B tokens and the iso-depth family reaches a billion parameters:
on PostgreSQL an `INTEGER` is 32-bit (at most 2,147,483,647), so a 3 B-token budget or curve point
would be refused. SQLite stores every integer in up to 64 bits already; there the columns are only
re-declared. Widened: `jobs.budget_tokens`, `jobs.n_params`, `metrics.tokens`, `latest_metrics.tokens`,
`train_results.tokens`, `train_results.n_params`, `train_results.n_params_non_embedding`.
Downgrade narrows them back (it fails on PostgreSQL if a stored value no longer fits, rather than
losing it).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009_big_counts"
down_revision: str | Sequence[str] | None = "0008_drivers"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

WIDENED = {
    "jobs": ("budget_tokens", "n_params"),
    "metrics": ("tokens",),
    "latest_metrics": ("tokens",),
    "train_results": ("tokens", "n_params", "n_params_non_embedding"),
}
NOT_NULL = {("train_results", "tokens")}
# every view looplab has defined up to this revision (0001's and orchestrator/views.py's), spelled out:
# a revision never imports live code
LOOPLAB_VIEWS = ("runs", "curves", "depth", "decode", "tasks", "geometry", "interactions")


def _retype(old: type, new: type) -> None:
    # a column a view reads cannot be retyped (PostgreSQL) nor its table rebuilt (SQLite): drop looplab's
    # views first (they hold no data; migrations/env.py re-creates them at head), e.g. revision 0001's,
    # which a fresh database still has at this point. Only ours: the database may hold other tools' views.
    for name in LOOPLAB_VIEWS:
        op.execute(f"DROP VIEW IF EXISTS {name}")
    for table, columns in WIDENED.items():
        with op.batch_alter_table(table) as batch:
            for column in columns:
                batch.alter_column(
                    column,
                    existing_type=old(),
                    type_=new(),
                    existing_nullable=(table, column) not in NOT_NULL,
                )


def upgrade() -> None:
    _retype(sa.Integer, sa.BigInteger)


def downgrade() -> None:
    _retype(sa.BigInteger, sa.Integer)
