"""Initial schema: every table and index of orchestrator/schema.py, and the people-facing views.

Revision ID: 0001_initial
Revises:
Create Date: 2026-11-29

The views (`runs`, `curves`, `depth`, `decode`) are plain, portable SQL (no JSON functions): the
columns they show are copied out of the job config at submission (jobs.recipe/size/seed). A later
revision that changes a view drops and re-creates it with its own copy of the SQL, so this file never
changes once released.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001_initial"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

VIEWS = {
    # One row per training job, config flattened; best_loops = the loop count with the lowest
    # depth-sweep val loss over the sweeps that depend on this run (NULL before any sweep).
    "runs": """
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
    r.n_params,
    j.created_at,
    j.finished_at
FROM jobs j
LEFT JOIN grids g ON g.id = j.grid_id
LEFT JOIN train_results r ON r.job_id = j.id
WHERE j.kind = 'train'
""",
    # Long-format curves with the run's identity, ready to pivot or plot.
    "curves": """
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
    m.value
FROM metrics m
JOIN jobs j ON j.id = m.job_id
""",
    # Loss against loop count, labelled with the trained model's recipe/size/seed.
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
    de.near_loss
FROM depth_evals de
LEFT JOIN (
    SELECT d.job_id AS sweep_id, tj.id, tj.recipe, tj.size, tj.seed
    FROM job_deps d
    JOIN jobs tj ON tj.id = d.depends_on AND tj.kind = 'train'
) t ON t.sweep_id = de.job_id
""",
    "decode": """
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
    b.cuda_graph
FROM decode_benches b
JOIN jobs j ON j.id = b.job_id
""",
}

TABLES = (
    "train_results",
    "round_deltas",
    "metrics",
    "latest_metrics",
    "job_logs",
    "job_deps",
    "depth_evals",
    "decode_benches",
    "attempts",
    "jobs",
    "grids",
)  # children first, the order to drop them in


def upgrade() -> None:
    op.create_table(
        "grids",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("spec", sa.Text(), nullable=False),
        sa.Column("spec_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_grids")),
        sa.UniqueConstraint("spec_hash", name=op.f("uq_grids_spec_hash")),
    )
    op.create_index(op.f("ix_grids_name"), "grids", ["name"], unique=False)

    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("grid_id", sa.Integer(), nullable=True),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("config", sa.Text(), nullable=False),
        sa.Column("config_hash", sa.String(length=64), nullable=False),
        sa.Column("recipe", sa.String(length=64), nullable=True),
        sa.Column("size", sa.String(length=32), nullable=True),
        sa.Column("seed", sa.Integer(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("budget", sa.Text(), nullable=True),
        sa.Column("budget_tokens", sa.Integer(), nullable=True),
        sa.Column("budget_time_s", sa.Float(), nullable=True),
        sa.Column("resources", sa.Text(), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=True),
        sa.Column("finished_at", sa.Float(), nullable=True),
        sa.Column("heartbeat_at", sa.Float(), nullable=True),
        sa.Column("worker", sa.String(length=200), nullable=True),
        sa.Column("gpu_ids", sa.String(length=64), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("artifact_dir", sa.Text(), nullable=True),
        sa.Column("checkpoint_path", sa.Text(), nullable=True),
        sa.Column("checkpoint_step", sa.Integer(), nullable=True),
        sa.Column("progress_done", sa.Float(), nullable=True),
        sa.Column("progress_total", sa.Float(), nullable=True),
        sa.Column("eta_s", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["grid_id"], ["grids.id"], name=op.f("fk_jobs_grid_id_grids")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
        sa.UniqueConstraint("config_hash", name=op.f("uq_jobs_config_hash")),
    )
    op.create_index(op.f("ix_jobs_grid_id"), "jobs", ["grid_id"], unique=False)
    op.create_index("ix_jobs_recipe_size_seed", "jobs", ["recipe", "size", "seed"], unique=False)
    op.create_index("ix_jobs_status_priority", "jobs", ["status", "priority"], unique=False)

    op.create_table(
        "attempts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("ended_at", sa.Float(), nullable=True),
        sa.Column("outcome", sa.String(length=16), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("resumed_from_step", sa.Integer(), nullable=True),
        sa.Column("worker", sa.String(length=200), nullable=True),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_attempts_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_attempts")),
        sa.UniqueConstraint("job_id", "n", name=op.f("uq_attempts_job_id_n")),
    )
    op.create_table(
        "decode_benches",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("arch", sa.String(length=64), nullable=False),
        sa.Column("size", sa.String(length=32), nullable=True),
        sa.Column("context_len", sa.Integer(), nullable=False),
        sa.Column("batch_size", sa.Integer(), nullable=False),
        sa.Column("ms_per_token", sa.Float(), nullable=False),
        sa.Column("ms_p10", sa.Float(), nullable=True),
        sa.Column("ms_p90", sa.Float(), nullable=True),
        sa.Column("kv_cache_mb", sa.Float(), nullable=False),
        sa.Column("device", sa.String(length=64), nullable=False),
        sa.Column("dtype", sa.String(length=16), nullable=False),
        sa.Column("cuda_graph", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_decode_benches_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_decode_benches")),
    )
    op.create_index(op.f("ix_decode_benches_job_id"), "decode_benches", ["job_id"], unique=False)

    op.create_table(
        "depth_evals",
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("loops", sa.Integer(), nullable=False),
        sa.Column("val_loss", sa.Float(), nullable=False),
        sa.Column("val_bpb", sa.Float(), nullable=True),
        sa.Column("far_copy_loss", sa.Float(), nullable=True),
        sa.Column("near_loss", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_depth_evals_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("job_id", "loops", name=op.f("pk_depth_evals")),
    )
    op.create_table(
        "job_deps",
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("depends_on", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["depends_on"], ["jobs.id"], name=op.f("fk_job_deps_depends_on_jobs"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_job_deps_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("job_id", "depends_on", name=op.f("pk_job_deps")),
    )
    op.create_index("ix_job_deps_depends_on", "job_deps", ["depends_on"], unique=False)

    op.create_table(
        "job_logs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=True),
        sa.Column("ts", sa.Float(), nullable=False),
        sa.Column("level", sa.String(length=16), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_job_logs_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_job_logs")),
    )
    op.create_index("ix_job_logs_job_id_ts", "job_logs", ["job_id", "ts"], unique=False)

    op.create_table(
        "latest_metrics",
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("tokens", sa.Integer(), nullable=True),
        sa.Column("wall_s", sa.Float(), nullable=True),
        sa.Column("value", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_latest_metrics_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("job_id", "key", name=op.f("pk_latest_metrics")),
    )
    op.create_table(
        "metrics",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("tokens", sa.Integer(), nullable=True),
        sa.Column("wall_s", sa.Float(), nullable=True),
        sa.Column("value", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_metrics_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_metrics")),
        sa.UniqueConstraint("job_id", "key", "step", name=op.f("uq_metrics_job_id_key_step")),
    )
    op.create_table(
        "round_deltas",
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("loops", sa.Integer(), nullable=False),
        sa.Column("round", sa.Integer(), nullable=False),
        sa.Column("rel_change", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_round_deltas_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("job_id", "loops", "round", name=op.f("pk_round_deltas")),
    )
    op.create_table(
        "train_results",
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("steps", sa.Integer(), nullable=False),
        sa.Column("tokens", sa.Integer(), nullable=False),
        sa.Column("train_seconds", sa.Float(), nullable=False),
        sa.Column("eval_seconds", sa.Float(), nullable=True),
        sa.Column("ckpt_seconds", sa.Float(), nullable=True),
        sa.Column("tokens_per_s", sa.Float(), nullable=True),
        sa.Column("final_train_loss", sa.Float(), nullable=True),
        sa.Column("final_val_loss", sa.Float(), nullable=True),
        sa.Column("final_val_bpb", sa.Float(), nullable=True),
        sa.Column("peak_mem_mb", sa.Float(), nullable=True),
        sa.Column("n_params", sa.Integer(), nullable=True),
        sa.Column("n_params_non_embedding", sa.Integer(), nullable=True),
        sa.Column("time_budget_s", sa.Float(), nullable=True),
        sa.Column("calib_tokens_per_s", sa.Float(), nullable=True),
        sa.Column("device", sa.String(length=64), nullable=True),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_train_results_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("job_id", name=op.f("pk_train_results")),
    )
    for sql in VIEWS.values():
        op.execute(sql)


def downgrade() -> None:
    for name in VIEWS:
        op.execute(f"DROP VIEW IF EXISTS {name}")
    for table in TABLES:
        op.drop_table(table)  # its indexes go with it
