"""Health events and the alert outbox.

Revision ID: 0017_health
Revises: 0016_prepare
Create Date: 2026-12-03

- `health_events`: one row per finding of a health rule (orchestrator/health.py): the job, the
  attempt, the step, the rule, the level, the figure (as a number, NULL when not finite, and as text).
- `alert_outbox`: one row per alert and channel (orchestrator/alerts.py), unique on (msg_id, channel):
  the message's stable id, its delivery state, its failed tries. No secret is stored.
New tables only: nothing to back-fill. Downgrade drops them.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017_health"
down_revision: str | Sequence[str] | None = "0016_prepare"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "health_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=True),
        sa.Column("ts", sa.Float(), nullable=False),
        sa.Column("step", sa.BigInteger(), nullable=True),
        sa.Column("rule", sa.String(length=32), nullable=False),
        sa.Column("level", sa.String(length=16), nullable=False),
        sa.Column("key", sa.String(length=100), nullable=True),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column("figure", sa.String(length=64), nullable=True),
        sa.Column("message", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name="fk_health_events_job_id_jobs", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_health_events"),
    )
    op.create_index("ix_health_events_ts", "health_events", ["ts"])
    op.create_index("ix_health_events_job_id", "health_events", ["job_id"])
    op.create_table(
        "alert_outbox",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("msg_id", sa.String(length=64), nullable=False),
        sa.Column("channel", sa.String(length=100), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("topic", sa.String(length=32), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=True),
        sa.Column("rule", sa.String(length=32), nullable=True),
        sa.Column("subject", sa.Text(), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("repeats", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("tries", sa.Integer(), nullable=False),
        sa.Column("next_try_at", sa.Float(), nullable=False),
        sa.Column("delivered_at", sa.Float(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_alert_outbox"),
        sa.UniqueConstraint("msg_id", "channel", name="uq_alert_outbox_msg_id_channel"),
    )
    op.create_index("ix_alert_outbox_status_next_try_at", "alert_outbox", ["status", "next_try_at"])


def downgrade() -> None:
    op.drop_index("ix_alert_outbox_status_next_try_at", table_name="alert_outbox")
    op.drop_table("alert_outbox")
    op.drop_index("ix_health_events_job_id", table_name="health_events")
    op.drop_index("ix_health_events_ts", table_name="health_events")
    op.drop_table("health_events")
