"""Adaptive compute: the results of the adaptive job (workers/adaptive.py), per-token exit rules and KV
strategies across rounds.

Revision ID: 0013_adaptive
Revises: 0012_imports
Create Date: 2027-01-10

- `adaptive_evals` (job_id, config) -> the cell's rule, threshold (NULL for the fixed depth; may be
  infinite), KV strategy and m, round bounds, whether the strategy changes the function, validation
  loss and bpb, tokens, mean rounds per token, equivalent rounds, FLOPs per token (the rule's share and
  the fixed depth's alongside) and KV MiB allocated / needed;
- `adaptive_exit_rounds` (job_id, config, split, bucket, round) -> bucket bounds and the token count:
  the exit-round histograms by token position and by loss bucket;
- `adaptive_task_scores` (job_id, config, task, subset) -> category, n, acc, acc_norm, stderr, chance;
- `adaptive_decodes` (job_id, config, batch_size, mode) -> context, ms per token (median, p10, p90),
  tokens/s, the fixed depth's ms per token, speedup, mean exit round, rounds per step, KV MiB,
  device, concurrent jobs.
Their views (`adaptive`, `exit_rounds`, `adaptive_tasks`, `adaptive_decode`) are orchestrator/views.py's,
created by migrations/env.py at head. Nothing to back-fill: the tables are new. Downgrade drops them.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013_adaptive"
down_revision: str | Sequence[str] | None = "0012_imports"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CONFIG = 96  # length of a cell's name, e.g. "entropy<0.05 | last_m2"


def _create(name: str, key: list[sa.Column], columns: list[sa.Column]) -> None:
    """A result table of the adaptive job: job_id + `key` as the primary key, then `columns`."""
    op.create_table(
        name,
        sa.Column("job_id", sa.Integer(), nullable=False),
        *key,
        *columns,
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f(f"fk_{name}_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("job_id", *(c.name for c in key), name=op.f(f"pk_{name}")),
    )


def _floats(*names: str, nullable: bool = True) -> list[sa.Column]:
    return [sa.Column(n, sa.Float(), nullable=nullable) for n in names]


def upgrade() -> None:
    config = sa.Column("config", sa.String(length=CONFIG), nullable=False)
    _create(
        "adaptive_evals",
        [config],
        [
            sa.Column("rule", sa.String(length=16), nullable=False),
            sa.Column("threshold", sa.Float(), nullable=True),
            sa.Column("kv_strategy", sa.String(length=16), nullable=False),
            sa.Column("kv_m", sa.Integer(), nullable=True),
            sa.Column("min_rounds", sa.Integer(), nullable=False),
            sa.Column("max_rounds", sa.Integer(), nullable=False),
            sa.Column("changes_function", sa.Boolean(), nullable=False),
            sa.Column("val_loss", sa.Float(), nullable=False),
            sa.Column("val_bpb", sa.Float(), nullable=True),
            sa.Column("tokens", sa.BigInteger(), nullable=False),
            sa.Column("mean_rounds", sa.Float(), nullable=False),
            *_floats(
                "equivalent_rounds",
                "forward_flops_per_token",
                "rule_flops_per_token",
                "fixed_flops_per_token",
                "kv_mib",
                "kv_mib_needed",
            ),
        ],
    )
    _create(
        "adaptive_exit_rounds",
        [
            sa.Column("config", sa.String(length=CONFIG), nullable=False),
            sa.Column("split", sa.String(length=16), nullable=False),
            sa.Column("bucket", sa.Integer(), nullable=False),
            sa.Column("round", sa.Integer(), nullable=False),
        ],
        [
            *_floats("bucket_lo", "bucket_hi", nullable=False),
            sa.Column("count", sa.BigInteger(), nullable=False),
        ],
    )
    _create(
        "adaptive_task_scores",
        [
            sa.Column("config", sa.String(length=CONFIG), nullable=False),
            sa.Column("task", sa.String(length=128), nullable=False),
            sa.Column("subset", sa.String(length=64), nullable=False),
        ],
        [
            sa.Column("category", sa.String(length=16), nullable=True),
            sa.Column("n", sa.Integer(), nullable=False),
            sa.Column("acc", sa.Float(), nullable=False),
            *_floats("acc_norm", "stderr", "chance"),
        ],
    )
    _create(
        "adaptive_decodes",
        [
            sa.Column("config", sa.String(length=CONFIG), nullable=False),
            sa.Column("batch_size", sa.Integer(), nullable=False),
            sa.Column("mode", sa.String(length=16), nullable=False),
        ],
        [
            sa.Column("context_len", sa.Integer(), nullable=False),
            sa.Column("ms_per_token", sa.Float(), nullable=False),
            *_floats(
                "ms_p10",
                "ms_p90",
                "tokens_per_s",
                "fixed_ms_per_token",
                "speedup",
                "mean_exit_round",
                "mean_step_rounds",
                "kv_mib",
                "kv_mib_needed",
            ),
            sa.Column("device", sa.String(length=64), nullable=True),
            sa.Column("concurrent_jobs", sa.Integer(), nullable=True),
        ],
    )


def downgrade() -> None:
    for name in ("adaptive_decodes", "adaptive_task_scores", "adaptive_exit_rounds", "adaptive_evals"):
        op.drop_table(name)
