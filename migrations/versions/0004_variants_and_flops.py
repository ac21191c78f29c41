"""Jobs know their variant and resolved architecture; train results their FLOPs; the views show both.

Revision ID: 0004_variants_and_flops
Revises: 0003_job_state_columns
Create Date: 2026-12-13

- `jobs`: `variant_id`, `variant_label` (recipe + size + the model overrides that differ from the
  preset; see orchestrator/variants.py), the resolved architecture (`n_prelude`, `n_recurrent`,
  `n_coda`, `effective_depth`, `d_model`, `injection`, `n_params`, `n_once`, `n_rec`), the training
  `flops_per_token`, and `budget_flops` (a budget given in FLOPs); an index on `variant_id`.
- `train_results`: `flops_per_token`, `train_flops`, `achieved_flops_per_s`, `mfu`, `padding_waste`.
- The views `runs`, `curves`, `depth` and `decode` are re-created with the variant and architecture
  columns (`depth` names the trained loop count `trained_loops`: its `loops` is the evaluated one).

The back-fill of existing train and decode-bench rows (a depth sweep copies its train job's) calls
live code, `orchestrator.variants.variant_columns`, unlike revision 0003 with its frozen table: these
facts are derived from the model definition (parameter counts, FLOPs per token, the resolved config),
and a frozen copy of that derivation would drift from what new submissions store, so rows of before and
after this revision would disagree. The cost: upgrading a database through this revision needs the
model code (and torch). A config that no longer resolves keeps NULLs; `loop_sampler`/`loops` are
filled only where they are NULL (revision 0003 filled the others).

Downgrade drops the views, the index and the columns, and re-creates the views of 0001.
"""

import importlib
import json
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004_variants_and_flops"
down_revision: str | Sequence[str] | None = "0003_job_state_columns"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JOB_COLUMNS: tuple[tuple[str, sa.types.TypeEngine], ...] = (
    ("variant_id", sa.String(length=16)),
    ("variant_label", sa.String(length=200)),
    ("n_prelude", sa.Integer()),
    ("n_recurrent", sa.Integer()),
    ("n_coda", sa.Integer()),
    ("effective_depth", sa.Float()),
    ("d_model", sa.Integer()),
    ("injection", sa.String(length=16)),
    ("n_params", sa.Integer()),
    ("n_once", sa.Integer()),
    ("n_rec", sa.Integer()),
    ("flops_per_token", sa.Float()),
    ("budget_flops", sa.Float()),
)
RESULT_COLUMNS: tuple[tuple[str, sa.types.TypeEngine], ...] = (
    ("flops_per_token", sa.Float()),
    ("train_flops", sa.Float()),
    ("achieved_flops_per_s", sa.Float()),
    ("mfu", sa.Float()),
    ("padding_waste", sa.Float()),
)
# What the back-fill writes: the variant and architecture columns of orchestrator.variants, as of
# this revision (a later revision that adds one back-fills it itself).
BACKFILLED = (
    "variant_id", "variant_label", "n_prelude", "n_recurrent", "n_coda", "effective_depth", "d_model",
    "injection", "n_params", "n_once", "n_rec", "flops_per_token",
)  # fmt: skip
LOOP_COLUMNS = ("loop_sampler", "loops")

# The variant and architecture of the job a row is about, as every view shows them (prefix `j.`).
ARCH = """
    {p}.variant_id,
    {p}.variant_label,
    {p}.n_prelude,
    {p}.n_recurrent,
    {p}.n_coda,
    {p}.loop_sampler,
    {p}.loops,
    {p}.effective_depth,
    {p}.d_model,
    {p}.injection,
    {p}.n_once,
    {p}.n_rec"""

VIEWS = {
    # One row per training job, config flattened; best_loops = the loop count with the lowest
    # depth-sweep val loss over the sweeps that depend on this run (NULL before any sweep).
    # n_params and flops_per_token: the trainer's measured row when there, else the submission's.
    "runs": f"""
CREATE VIEW runs AS
SELECT
    j.id AS job_id,
    g.name AS grid,
    j.status,
    j.recipe,
    j.size,
    j.seed,
    j.budget_tokens,
    j.budget_time_s,
    r.tokens,
    r.steps,
    r.train_seconds,
    r.tokens_per_s,
    r.final_train_loss,
    r.final_val_loss,
    r.final_val_bpb,
    (
        SELECT MIN(de.loops)
        FROM job_deps d
        JOIN jobs s ON s.id = d.job_id AND s.kind = 'depth_sweep'
        JOIN depth_evals de ON de.job_id = s.id
        WHERE d.depends_on = j.id
        AND de.val_loss = (
            SELECT MIN(de2.val_loss)
            FROM job_deps d2
            JOIN jobs s2 ON s2.id = d2.job_id AND s2.kind = 'depth_sweep'
            JOIN depth_evals de2 ON de2.job_id = s2.id
            WHERE d2.depends_on = j.id
        )
    ) AS best_loops,
    (
        SELECT MIN(de.val_loss)
        FROM job_deps d
        JOIN jobs s ON s.id = d.job_id AND s.kind = 'depth_sweep'
        JOIN depth_evals de ON de.job_id = s.id
        WHERE d.depends_on = j.id
    ) AS best_loop_val_loss,
    COALESCE(r.n_params, j.n_params) AS n_params,
    j.created_at,
    j.finished_at,{ARCH.format(p="j")},
    j.budget_flops,
    COALESCE(r.flops_per_token, j.flops_per_token) AS flops_per_token,
    r.train_flops,
    r.achieved_flops_per_s,
    r.mfu,
    r.padding_waste
FROM jobs j
LEFT JOIN grids g ON g.id = j.grid_id
LEFT JOIN train_results r ON r.job_id = j.id
WHERE j.kind = 'train'
""",
    # Long-format curves with the run's identity, ready to pivot or plot.
    "curves": f"""
CREATE VIEW curves AS
SELECT
    m.job_id,
    j.recipe,
    j.size,
    j.seed,
    m.key,
    m.step,
    m.tokens,
    m.wall_s,
    m.value,{ARCH.format(p="j")},
    j.n_params,
    j.flops_per_token
FROM metrics m
JOIN jobs j ON j.id = m.job_id
""",
    # Loss against loop count, labelled with the trained model's recipe/size/seed and variant;
    # `loops` is the evaluated loop count, `trained_loops` the one the model was trained at.
    "depth": """
CREATE VIEW depth AS
SELECT
    de.job_id AS sweep_job_id,
    t.id AS train_job_id,
    t.recipe,
    t.size,
    t.seed,
    de.loops,
    de.val_loss,
    de.val_bpb,
    de.far_copy_loss,
    de.near_loss,
    t.variant_id,
    t.variant_label,
    t.n_prelude,
    t.n_recurrent,
    t.n_coda,
    t.loop_sampler,
    t.trained_loops,
    t.effective_depth,
    t.d_model,
    t.injection,
    t.n_params,
    t.n_once,
    t.n_rec,
    t.flops_per_token
FROM depth_evals de
LEFT JOIN (
    SELECT d.job_id AS sweep_id, tj.id, tj.recipe, tj.size, tj.seed, tj.variant_id, tj.variant_label,
        tj.n_prelude, tj.n_recurrent, tj.n_coda, tj.loop_sampler, tj.loops AS trained_loops,
        tj.effective_depth, tj.d_model, tj.injection, tj.n_params, tj.n_once, tj.n_rec, tj.flops_per_token
    FROM job_deps d
    JOIN jobs tj ON tj.id = d.depends_on AND tj.kind = 'train'
) t ON t.sweep_id = de.job_id
""",
    "decode": f"""
CREATE VIEW decode AS
SELECT
    b.job_id,
    j.status,
    b.arch,
    b.size,
    b.context_len,
    b.batch_size,
    b.ms_per_token,
    b.ms_p10,
    b.ms_p90,
    b.kv_cache_mb,
    b.device,
    b.dtype,
    b.cuda_graph,{ARCH.format(p="j")},
    j.n_params,
    j.flops_per_token
FROM decode_benches b
JOIN jobs j ON j.id = b.job_id
""",
}

jobs = sa.table(
    "jobs",
    sa.column("id", sa.Integer),
    sa.column("kind", sa.String),
    sa.column("config", sa.Text),
    *(sa.column(name, type_) for name, type_ in JOB_COLUMNS),
    sa.column("loop_sampler", sa.String),
    sa.column("loops", sa.Integer),
)
job_deps = sa.table("job_deps", sa.column("job_id", sa.Integer), sa.column("depends_on", sa.Integer))


def _drop_views() -> None:
    for name in VIEWS:
        op.execute(f"DROP VIEW IF EXISTS {name}")


def upgrade() -> None:
    _drop_views()  # SQLite re-checks views against the altered tables
    for name, type_ in JOB_COLUMNS:
        op.add_column("jobs", sa.Column(name, type_, nullable=True))
    for name, type_ in RESULT_COLUMNS:
        op.add_column("train_results", sa.Column(name, type_, nullable=True))
    op.create_index("ix_jobs_variant_id", "jobs", ["variant_id"], unique=False)
    _backfill(op.get_bind())
    for sql in VIEWS.values():
        op.execute(sql)


def downgrade() -> None:
    _drop_views()
    op.drop_index("ix_jobs_variant_id", table_name="jobs")
    for name, _ in reversed(RESULT_COLUMNS):
        op.drop_column("train_results", name)
    for name, _ in reversed(JOB_COLUMNS):
        op.drop_column("jobs", name)
    initial = importlib.import_module("migrations.versions.0001_initial")
    for sql in initial.VIEWS.values():
        op.execute(sql)


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
