"""Jobs record the dependency that failed them and how their run loops.

Revision ID: 0003_job_state_columns
Revises: 0002_metrics_wall_s
Create Date: 2026-12-06

- `jobs.failed_dependency`: the id of the dependency whose failure or cancellation failed this job.
  Retrying that dependency re-queues exactly these jobs (it used to match the text of the error).
  Back-filled from the message the cascade wrote, `dependency job N failed: ...` or
  `dependency job N cancelled: ...`, where N is one of the job's dependencies.
- `jobs.loop_sampler` / `jobs.loops`: a train job's loop sampler (fixed | poisson_seq |
  poisson_batch) and loop count (the trained count, or the sampler's mean), so that readers such as
  the dashboard need no model code; a depth sweep carries its train job's values. Back-filled from
  each row's config: its recipe's values from the frozen table below, then the config's
  `model.loop_sampler` / `model.loops` overrides. The table is a copy, not an import of
  `model.presets`: a revision must do the same thing whatever the model code becomes later.

Downgrade drops the columns with ALTER TABLE ... DROP COLUMN (SQLite 3.35 or later, PostgreSQL).
"""

import importlib
import json
import re
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003_job_state_columns"
down_revision: str | Sequence[str] | None = "0002_metrics_wall_s"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# recipe -> (loop sampler, loop count) of model/presets.py as of this revision
RECIPE_LOOPS: dict[str, tuple[str, int]] = {
    "parcae": ("poisson_seq", 8),
    "parcae_per_batch": ("poisson_batch", 8),
    "parcae_last1": ("poisson_seq", 8),
    "fixed2": ("fixed", 2),
    "fixed4": ("fixed", 4),
    "fixed8": ("fixed", 8),
    "fixed6_grad3": ("fixed", 6),
    "lean": ("fixed", 4),
    "lean_w256": ("fixed", 4),
    "lean_all64": ("fixed", 4),
    "half_width": ("fixed", 4),
    "mlp_only": ("fixed", 4),
    "reuse_kv": ("fixed", 4),
    "plain": ("fixed", 1),
}
SAMPLERS = ("fixed", "poisson_seq", "poisson_batch")
CASCADE_ERROR = re.compile(r"dependency job (\d+) (?:failed|cancelled): ")

jobs = sa.table(
    "jobs",
    sa.column("id", sa.Integer),
    sa.column("kind", sa.String),
    sa.column("config", sa.Text),
    sa.column("status", sa.String),
    sa.column("error", sa.Text),
    sa.column("failed_dependency", sa.Integer),
    sa.column("loop_sampler", sa.String),
    sa.column("loops", sa.Integer),
)
job_deps = sa.table("job_deps", sa.column("job_id", sa.Integer), sa.column("depends_on", sa.Integer))


def upgrade() -> None:
    op.add_column("jobs", sa.Column("failed_dependency", sa.Integer(), nullable=True))
    op.add_column("jobs", sa.Column("loop_sampler", sa.String(length=16), nullable=True))
    op.add_column("jobs", sa.Column("loops", sa.Integer(), nullable=True))
    conn = op.get_bind()
    _backfill_failed_dependency(conn)
    _backfill_loops(conn)


def downgrade() -> None:
    op.drop_column("jobs", "loops")
    op.drop_column("jobs", "loop_sampler")
    op.drop_column("jobs", "failed_dependency")
    # From this revision on the views come from orchestrator/views.py (see migrations/env.py), which
    # dropped them before this ran: back at 0002, the database gets 0001's views, as that release had.
    initial = importlib.import_module("looplab.migrations.versions.0001_initial")
    for sql in initial.VIEWS.values():
        op.execute(sql)


def _backfill_failed_dependency(conn: sa.Connection) -> None:
    # the status is spelled out, not taken from orchestrator.states: a revision never imports live code
    deps = set(conn.execute(sa.select(job_deps.c.job_id, job_deps.c.depends_on)).all())
    failed = conn.execute(
        sa.select(jobs.c.id, jobs.c.error).where(
            jobs.c.status == "failed", jobs.c.error.like("dependency job %")
        )
    ).all()
    for job_id, error in failed:
        match = CASCADE_ERROR.match(error)
        if match and (job_id, int(match.group(1))) in deps:
            conn.execute(
                jobs.update().where(jobs.c.id == job_id).values(failed_dependency=int(match.group(1)))
            )


def loops_of(config: str | None) -> tuple[str | None, int | None]:
    """(sampler, loops) of a stored train config; (None, None) when it cannot be told."""
    try:
        spec = json.loads(config or "")
    except ValueError:
        return None, None
    if not isinstance(spec, dict) or spec.get("recipe") not in RECIPE_LOOPS:
        return None, None
    sampler, loops = RECIPE_LOOPS[spec["recipe"]]
    overrides = spec.get("model") if isinstance(spec.get("model"), dict) else {}
    sampler = overrides.get("loop_sampler", sampler)
    loops = overrides.get("loops", loops)
    if sampler not in SAMPLERS or isinstance(loops, bool) or not isinstance(loops, int):
        return None, None
    return sampler, loops


def _backfill_loops(conn: sa.Connection) -> None:
    trains = conn.execute(sa.select(jobs.c.id, jobs.c.config).where(jobs.c.kind == "train")).all()
    loops_by_train = {job_id: loops_of(config) for job_id, config in trains}
    sweeps = conn.execute(
        sa.select(job_deps.c.job_id, job_deps.c.depends_on)
        .join(jobs, jobs.c.id == job_deps.c.job_id)
        .where(jobs.c.kind == "depth_sweep")
    ).all()
    values = dict(loops_by_train)
    for sweep_id, dep_id in sweeps:
        if dep_id in loops_by_train:
            values[sweep_id] = loops_by_train[dep_id]
    for job_id, (sampler, loops) in values.items():
        if sampler is not None:
            conn.execute(jobs.update().where(jobs.c.id == job_id).values(loop_sampler=sampler, loops=loops))
