"""Jobs know their variant and resolved architecture; train results their FLOPs; the views show both.

Revision ID: 0004_variants_and_flops
Revises: 0003_job_state_columns
Create Date: 2026-12-13

- `jobs`: `variant_id`, `variant_label` (recipe + size + the model overrides that differ from the
  preset; see orchestrator/variants.py), the resolved architecture (`n_prelude`, `n_recurrent`,
  `n_coda`, `effective_depth`, `d_model`, `injection`, `n_params`, `n_once`, `n_rec`), the training
  `flops_per_token`, and `budget_flops` (a budget given in FLOPs); an index on `variant_id`.
- `train_results`: `flops_per_token`, `train_flops`, `achieved_flops_per_s`, `mfu`, `padding_waste`.
- The views (orchestrator/views.py, re-created after every upgrade to head: see migrations/env.py)
  show the variant and architecture columns.

The back-fill of existing train and decode-bench rows (a depth sweep copies its train job's) calls
live code, `orchestrator.variants.variant_columns`, unlike revision 0003 with its frozen table: these
facts are derived from the model definition (parameter counts, FLOPs per token, the resolved config),
and a frozen copy of that derivation would drift from what new submissions store, so rows of before and
after this revision would disagree. The cost: upgrading a database through this revision needs the
model code (and torch). A config that no longer resolves keeps NULLs; `loop_sampler`/`loops` are
filled only where they are NULL (revision 0003 filled the others).

Downgrade drops the index and the columns.
"""

import json
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004_variants_and_flops"
down_revision: str | Sequence[str] | None = "0003_job_state_columns"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JOB_COLUMNS = dict(
    variant_id=sa.String(length=16), variant_label=sa.String(length=200), n_prelude=sa.Integer(),
    n_recurrent=sa.Integer(), n_coda=sa.Integer(), effective_depth=sa.Float(), d_model=sa.Integer(),
    injection=sa.String(length=16), n_params=sa.Integer(), n_once=sa.Integer(), n_rec=sa.Integer(),
    flops_per_token=sa.Float(), budget_flops=sa.Float(),
)  # fmt: skip
RESULT_COLUMNS = dict(
    flops_per_token=sa.Float(), train_flops=sa.Float(), achieved_flops_per_s=sa.Float(), mfu=sa.Float(),
    padding_waste=sa.Float(),
)  # fmt: skip
# What the back-fill writes: the variant and architecture columns of orchestrator.variants, as of
# this revision (a later revision that adds one back-fills it itself).
BACKFILLED = (
    "variant_id", "variant_label", "n_prelude", "n_recurrent", "n_coda", "effective_depth", "d_model",
    "injection", "n_params", "n_once", "n_rec", "flops_per_token",
)  # fmt: skip
LOOP_COLUMNS = ("loop_sampler", "loops")

# untyped columns are enough to read configs and write plain values
jobs = sa.table("jobs", *(sa.column(c) for c in ("id", "kind", "config", *LOOP_COLUMNS, *JOB_COLUMNS)))
job_deps = sa.table("job_deps", sa.column("job_id", sa.Integer), sa.column("depends_on", sa.Integer))


def upgrade() -> None:
    for name, type_ in JOB_COLUMNS.items():
        op.add_column("jobs", sa.Column(name, type_, nullable=True))
    for name, type_ in RESULT_COLUMNS.items():
        op.add_column("train_results", sa.Column(name, type_, nullable=True))
    op.create_index("ix_jobs_variant_id", "jobs", ["variant_id"], unique=False)
    _backfill(op.get_bind())


def downgrade() -> None:
    op.drop_index("ix_jobs_variant_id", table_name="jobs")
    for name in reversed(RESULT_COLUMNS):
        op.drop_column("train_results", name)
    for name in reversed(JOB_COLUMNS):
        op.drop_column("jobs", name)


def _backfill(conn: sa.Connection) -> None:
    from orchestrator.errors import ConfigError
    from orchestrator.variants import variant_columns

    rows = conn.execute(
        sa.select(jobs.c.id, jobs.c.kind, jobs.c.config, jobs.c.loop_sampler, jobs.c.loops).where(
            jobs.c.kind.in_(("train", "decode_bench"))
        )
    ).all()
    by_job: dict[int, dict] = {}
    for job_id, kind, config, sampler, loops in rows:
        try:
            spec = json.loads(config or "")
            columns = variant_columns(kind, spec) if isinstance(spec, dict) else {}
        except (ValueError, TypeError, ConfigError):  # unreadable or no longer valid: NULLs
            columns = {}
        if columns:
            by_job[job_id] = columns
            _write(conn, job_id, columns, sampler is None and loops is None)
    sweeps = conn.execute(
        sa.select(job_deps.c.job_id, job_deps.c.depends_on, jobs.c.loop_sampler, jobs.c.loops)
        .join(jobs, jobs.c.id == job_deps.c.job_id)
        .where(jobs.c.kind == "depth_sweep")
    ).all()
    for sweep_id, train_id, sampler, loops in sweeps:
        if train_id in by_job:
            _write(conn, sweep_id, by_job[train_id], sampler is None and loops is None)


def _write(conn: sa.Connection, job_id: int, columns: dict, with_loops: bool) -> None:
    names = BACKFILLED + (LOOP_COLUMNS if with_loops else ())
    conn.execute(jobs.update().where(jobs.c.id == job_id).values({c: columns.get(c) for c in names}))
