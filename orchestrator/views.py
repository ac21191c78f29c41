"""The people-facing SQL views (`runs`, `curves`, `depth`, `decode`, `tasks`, `task_categories`, `geometry`,
`interactions`,
and the adaptive job's `adaptive`, `exit_rounds`, `adaptive_tasks`, `adaptive_decode`): one definition,
like the ORM.

Views hold no data, so they are not versioned like tables: after every migration that ends at head,
the Alembic environment (migrations/env.py) drops them and creates them from this module, and before
any migration runs it drops them (SQLite refuses to drop or rebuild a column a view reads). So a view
is written once, here, and changes with the code; a revision only changes tables. The exception is
history: revision 0001 created the first views itself, and the downgrade of 0003 re-creates those, so a
database taken back to 0001/0002 is exactly what that release expects.

Portable SQL only (SQLite and PostgreSQL): no JSON functions; the columns they show are copied out of
each job's config at submission (orchestrator/jobqueue.py, orchestrator/variants.py). The one exception
is a time shown to people: the tables hold epoch seconds, which read as nothing at a `looplab sql`
prompt, so a view shows them as ISO 8601 UTC text (`created`, `finished`) through `ISO_TIME(expr)`,
written once here and spelled per backend by `views_sql` (SQLite `strftime`, PostgreSQL `to_char`);
the epoch columns (`created_at`, `finished_at`) stay beside them for programs (lab/export reads them).

Every view that lists runs or their results carries the `grid` its job was submitted in (the name; NULL
for a job outside a grid), so the iso-time run of one grid is told apart from another's without a join.

Each view is declared by the job kind whose result table it shows (`Kind.views`, workers/jobs.py; a
test checks the declarations and VIEWS name the same views), and the kinds the SQL names are read
from the declarations: the kinds follow-ups are about (`train`, and `import`: a published model brought
in, a run without training whose rows show where it came from, `imported_from`) and the kind that
writes `depth_evals`.
"""

from __future__ import annotations

import re

from sqlalchemy import Connection

from looplab.orchestrator.jobkinds import MODEL_SOURCES, writer_of

DEPTH_SWEEP = writer_of("depth_evals")
# the jobs a follow-up is about, and the rows of `runs`: a SQL list of the kinds that yield a model
RUN_KINDS = ", ".join(f"'{kind}'" for kind in MODEL_SOURCES)

# The variant and resolved architecture of the job a row is about (`{p}` = the jobs alias).
ARCH = """
    {p}.variant_id,
    {p}.variant_label,
    {p}.global_batch,
    {p}.vocab_size,
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

# A follow-up job's trained model (depth sweep, eval): its train job through job_deps, as alias `t`;
# `trained_loops` is the loop count it was trained at (the follow-up's `loops` is the evaluated one).
TRAINED = """
    t.variant_id,
    t.variant_label,
    t.global_batch,
    t.vocab_size,
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
    t.flops_per_token,
    t.imported_from"""


# What a depth row's far-copy losses mean, by its `far_definition` (workers/validation.py): rows stored
# before the distance definition hold 1, so they are read as the window mask they were measured with.
FAR_DEFINITION_LABEL = """CASE de.far_definition
        WHEN 1 THEN 'v1: also occurs beyond the attention window'
        WHEN 2 THEN 'v2: previous occurrence beyond far_distance'
    END"""

# The effective depth of the trained model `t` at an evaluated loop count (a column expression).
INFERENCE_DEPTH = "t.n_prelude + t.n_recurrent * {loops} + t.n_coda AS inference_depth"


def _trained_model_of(follow_up_id: str) -> str:
    return f"""LEFT JOIN (
    SELECT d.job_id AS follow_up_id, tj.id, tj.recipe, tj.size, tj.seed, tj.variant_id, tj.variant_label,
        tj.global_batch, tj.vocab_size, tj.n_prelude, tj.n_recurrent, tj.n_coda, tj.loop_sampler,
        tj.loops AS trained_loops, tj.effective_depth, tj.d_model, tj.injection, tj.n_params, tj.n_once, tj.n_rec,
        tj.flops_per_token, tj.imported_from
    FROM job_deps d
    JOIN jobs tj ON tj.id = d.depends_on AND tj.kind IN ({RUN_KINDS})
) t ON t.follow_up_id = {follow_up_id}"""


def _grid_of(job_id: str) -> str:
    """The grid (`g.name AS grid`) of the job `job_id` names: joined, as alias `g`."""
    return f"""LEFT JOIN jobs gj ON gj.id = {job_id}
LEFT JOIN grids g ON g.id = gj.grid_id"""


def _with_job_architecture(view: str, table: str, columns: str) -> str:
    """Rows of `table` ("name alias") with the grid, variant and architecture of the job that wrote them."""
    alias = table.split()[1]
    return f"""
CREATE VIEW {view} AS
SELECT
    {columns},{ARCH.format(p="j")},
    j.n_params,
    j.flops_per_token
FROM {table}
JOIN jobs j ON j.id = {alias}.job_id
LEFT JOIN grids g ON g.id = j.grid_id
"""


def _labelled_with_trained_model(view: str, table: str, id_name: str, columns: str) -> str:
    """A follow-up job's result rows (`table` = "name alias") with its grid and its trained model's identity."""
    alias = table.split()[1]
    return f"""
CREATE VIEW {view} AS
SELECT
    {alias}.job_id AS {id_name},
    g.name AS grid,
    t.id AS train_job_id,
    t.recipe,
    t.size,
    t.seed,
    {columns},{TRAINED}
FROM {table}
{_trained_model_of(alias + ".job_id")}
{_grid_of(alias + ".job_id")}
"""


def _sweep_evals(d: str, s: str, de: str) -> str:
    """The depth-sweep evaluations of one train job `j` (for best_loops / best_loop_val_loss), with
    aliases `d` (job_deps), `s` (the sweep job) and `de` (depth_evals)."""
    return f"""
        FROM job_deps {d}
        JOIN jobs {s} ON {s}.id = {d}.job_id AND {s}.kind = '{DEPTH_SWEEP}'
        JOIN depth_evals {de} ON {de}.job_id = {s}.id
        WHERE {d}.depends_on = j.id"""


VIEWS = {
    # One row per training job, config flattened; best_loops = the loop count with the lowest
    # depth-sweep val loss over the sweeps that depend on this run (NULL before any sweep).
    # n_params and flops_per_token: the trainer's measured row when there, else the submission's.
    # An import job is a run without training: NULL training columns, `imported_from` set.
    # batch_size: the global batch; micro_batch_size: sequences per forward (what the trainer ran, else
    # as given, else the whole batch); workers: the data-parallel workers that trained it, else those it
    # asks for.
    "runs": f"""
CREATE VIEW runs AS
SELECT
    j.id AS job_id, g.name AS grid, j.status, j.recipe, j.size, j.seed,
    j.budget_tokens, j.budget_time_s,
    r.tokens, r.steps, r.train_seconds, r.tokens_per_s,
    r.final_train_loss, r.final_val_loss, r.final_val_bpb,
    (
        SELECT MIN(de.loops){_sweep_evals("d", "s", "de")}
        AND de.val_loss = (
            SELECT MIN(de2.val_loss){_sweep_evals("d2", "s2", "de2")}
        )
    ) AS best_loops,
    (
        SELECT MIN(de.val_loss){_sweep_evals("d", "s", "de")}
    ) AS best_loop_val_loss,
    COALESCE(r.n_params, j.n_params) AS n_params,
    ISO_TIME(j.created_at) AS created, ISO_TIME(j.finished_at) AS finished,
    j.created_at, j.finished_at,{ARCH.format(p="j")},
    j.budget_flops,
    COALESCE(r.flops_per_token, j.flops_per_token) AS flops_per_token,
    r.train_flops, r.achieved_flops_per_s, r.mfu, r.padding_waste,
    j.imported_from,
    j.global_batch AS batch_size, COALESCE(r.micro_batch_size, j.micro_batch_size, j.global_batch) AS micro_batch_size,
    COALESCE(r.workers, j.workers) AS workers
FROM jobs j
LEFT JOIN grids g ON g.id = j.grid_id
LEFT JOIN train_results r ON r.job_id = j.id
WHERE j.kind IN ({RUN_KINDS})
""",
    # Long-format curves with the run's identity, ready to pivot or plot.
    "curves": _with_job_architecture(
        "curves",
        "metrics m",
        "m.job_id, g.name AS grid, j.recipe, j.size, j.seed, m.key, m.step, m.tokens, m.wall_s, m.value",
    ),
    # Loss against the evaluated loop count, labelled with the trained model; `inference_depth` = the
    # layers a token passes at the evaluated count (n_prelude + n_recurrent * loops + n_coda),
    # `trained_depth` the same at the trained count (the trained model's effective_depth); the far-copy
    # split with its share, distance and definition (`far_mask` says it in words); `bf16_round`; the
    # test split's loss and bpb (NULL unless the sweep asked for it).
    "depth": _labelled_with_trained_model(
        "depth",
        "depth_evals de",
        "sweep_job_id",
        f"de.loops, {INFERENCE_DEPTH.format(loops='de.loops')}, t.effective_depth AS trained_depth, "
        "de.val_loss, de.val_bpb, de.far_copy_loss, de.near_loss, de.far_share, de.far_distance, "
        f"de.far_definition, {FAR_DEFINITION_LABEL} AS far_mask, de.bf16_round, de.test_loss, de.test_bpb",
    ),
    # Per-round loop geometry of the depth sweeps (model/geometry.py): relative change, angle and
    # state variance of round `round` (1-based) of a forward with `loops` rounds.
    "geometry": _labelled_with_trained_model(
        "geometry",
        "round_deltas rd",
        "sweep_job_id",
        f"rd.loops, {INFERENCE_DEPTH.format(loops='rd.loops')}, t.effective_depth AS trained_depth, "
        "rd.round, rd.rel_change, rd.angle, rd.state_var, rd.change_ratio, rd.bf16_resolution",
    ),
    # The interaction matrices: how much skipping round `skipped` changes the update of the later
    # round `round` in a forward with `loops` rounds (model/geometry.py).
    "interactions": _labelled_with_trained_model(
        "interactions",
        "round_interactions ri",
        "sweep_job_id",
        f"ri.loops, {INFERENCE_DEPTH.format(loops='ri.loops')}, t.effective_depth AS trained_depth, "
        "ri.skipped, ri.round, ri.interaction",
    ),
    # `recipe` is the benchmarked recipe (the table's `arch`, the name every other view uses); `arch`
    # stays beside it for the readers written before the rename.
    "decode": _with_job_architecture(
        "decode",
        "decode_benches b",
        "b.job_id, g.name AS grid, j.status, b.arch AS recipe, b.arch, b.size, b.context_len, b.batch_size, b.ms_per_token, b.ms_p10, "
        "b.ms_p90, b.kv_cache_mb, b.device, b.dtype, b.cuda_graph",
    ),
    # Task accuracy of eval jobs labelled with the trained model (named after `depth`: a view
    # cannot share its table's name). An eval of a checkpoint outside the queue has NULLs there.
    "tasks": _labelled_with_trained_model(
        "tasks",
        "task_scores ts",
        "eval_job_id",
        "ts.task, ts.category, ts.subset, ts.loops, ts.n, ts.acc, ts.acc_norm, ts.stderr, ts.chance",
    ),
    # Mean task accuracy per eval job, category (knowledge, reasoning, `other` for a task without one, and
    # `total` over every task) and loop count, over the tasks' whole item sets (subset 'all'), each task
    # counted once; labelled with the trained model. One row per seed: analysis/tasks.py pools seeds.
    "task_categories": f"""
CREATE VIEW task_categories AS
SELECT
    c.job_id AS eval_job_id,
    g.name AS grid,
    t.id AS train_job_id,
    t.recipe,
    t.size,
    t.seed,
    c.category, c.loops, c.mean_acc, c.n_tasks,{TRAINED}
FROM (
    SELECT s.job_id, s.category, s.loops, AVG(s.acc) AS mean_acc, COUNT(*) AS n_tasks
    FROM (
        SELECT job_id, COALESCE(category, 'other') AS category, loops, acc FROM task_scores WHERE subset = 'all'
        UNION ALL
        SELECT job_id, 'total' AS category, loops, acc FROM task_scores WHERE subset = 'all'
    ) s
    GROUP BY s.job_id, s.category, s.loops
) c
{_trained_model_of("c.job_id")}
{_grid_of("c.job_id")}
""",
    # The adaptive job's cells (workers/adaptive/job.py): loss and compute per exit rule, threshold and KV
    # strategy, labelled with the trained model; `changes_function` marks first / last_m.
    "adaptive": _labelled_with_trained_model(
        "adaptive",
        "adaptive_evals ae",
        "adaptive_job_id",
        "ae.config, ae.rule, ae.threshold, ae.kv_strategy, ae.kv_m, ae.min_rounds, ae.max_rounds, "
        "ae.changes_function, ae.val_loss, ae.val_bpb, ae.tokens, ae.mean_rounds, ae.equivalent_rounds, "
        "ae.forward_flops_per_token, ae.rule_flops_per_token, ae.fixed_flops_per_token, ae.kv_mib, ae.kv_mib_needed",
    ),
    # Their exit-round histograms: tokens that stopped after `round`, by position or loss bucket.
    "exit_rounds": _labelled_with_trained_model(
        "exit_rounds",
        "adaptive_exit_rounds er",
        "adaptive_job_id",
        "er.config, er.split, er.bucket, er.bucket_lo, er.bucket_hi, er.round, er.count",
    ),
    "adaptive_tasks": _labelled_with_trained_model(
        "adaptive_tasks",
        "adaptive_task_scores at",
        "adaptive_job_id",
        "at.config, at.task, at.category, at.subset, at.n, at.acc, at.acc_norm, at.stderr, at.chance",
    ),
    # Decode latency with exits against the fixed depth, per batch size and mode (masked | batch_stop).
    "adaptive_decode": _labelled_with_trained_model(
        "adaptive_decode",
        "adaptive_decodes ad",
        "adaptive_job_id",
        "ad.config, ad.batch_size, ad.mode, ad.context_len, ad.ms_per_token, ad.ms_p10, ad.ms_p90, "
        "ad.tokens_per_s, ad.fixed_ms_per_token, ad.speedup, ad.equal_loss_rounds, ad.equal_loss_ms_per_token, "
        "ad.mean_exit_round, ad.mean_step_rounds, "
        "ad.kv_mib, ad.kv_mib_needed, ad.device, ad.concurrent_jobs",
    ),
    # Who did what (revision 0024's triggers write `audit`): grid and job submissions, cancellations,
    # retries, priority changes, preemptions; `owner` is the job's (or grid's) owner beside the actor.
    "audit_trail": """
CREATE VIEW audit_trail AS
SELECT
    a.id, ISO_TIME(a.at) AS at_utc, a.at, a.actor, a.action, a.job_id, a.grid_id, g.name AS grid,
    COALESCE(j.owner, g.owner) AS owner, a.detail
FROM audit a
LEFT JOIN jobs j ON j.id = a.job_id
LEFT JOIN grids g ON g.id = a.grid_id
""",
}
VIEW_NAMES = tuple(VIEWS)
QUEUE_VIEWS = ("audit_trail",)  # views of the queue itself (its people's actions), no job kind's rows

# An epoch-seconds column as ISO 8601 UTC text ("2026-12-05T21:53:32Z"), per backend; NULL stays NULL.
ISO_TIME_SQL = {
    "sqlite": "strftime('%Y-%m-%dT%H:%M:%SZ', {t}, 'unixepoch')",
    "postgresql": """to_char(to_timestamp({t}) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')""",
}


def views_sql(dialect: str) -> dict[str, str]:
    """VIEWS as `dialect` ("sqlite" | "postgresql") runs them: each ISO_TIME(expr) spelled out."""
    iso = ISO_TIME_SQL[dialect]
    return {
        name: re.sub(r"ISO_TIME\(([^()]*)\)", lambda m: iso.format(t=m[1]), sql)
        for name, sql in VIEWS.items()
    }


def drop_views(conn: Connection) -> None:
    """Drop every view of this module (those of revision 0001 have the same names)."""
    for name in VIEW_NAMES:
        conn.exec_driver_sql(f"DROP VIEW IF EXISTS {name}")


def create_views(conn: Connection) -> None:
    """(Re)create every view for the head schema."""
    drop_views(conn)
    for sql in views_sql(conn.dialect.name).values():
        conn.exec_driver_sql(sql)
