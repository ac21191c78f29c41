"""Read queries behind the dashboard: each returns a DataFrame in the shape `dashboard.analysis` expects.

Why it looks like this:
- every query goes through `orchestrator.db.readonly_engine` (SQLite `mode=ro` + `query_only`), which
  caches one engine per URL: the dashboard can never write, and opens the file once;
- a page asks only for what it shows: the queue reads the jobs table and `latest_metrics` (never the
  full metric history), curves are read only for the selected jobs and downsampled inside the SQL
  query (window functions), so a database of 1,000 runs × 2,000 points stays fast;
- no Streamlit here (pages wrap these in `st.cache_data`), so everything is testable and benchmarkable;
- no model code either: what a page needs to know about a run (how it loops) is a column of `jobs`,
  filled at submission.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

import pandas as pd
from sqlalchemy import Engine, bindparam, text

from orchestrator.db import readonly_engine
from orchestrator.states import JobStatus

CURVE_KEYS = ("train_loss", "val_loss", "val_bpb", "lr", "tokens_per_s")
DEPTH_KEY_PATTERN = "val_loss@%"  # validation loss at N loops, recorded at each evaluation (SQL LIKE)
MAX_POINTS = 500  # per curve; the first and the last point are always kept
SQL_ROW_LIMIT = 10_000  # rows the SQL page fetches at most


def engine(url: str) -> Engine:
    """The read-only engine for `url` (cached per URL by orchestrator.db)."""
    return readonly_engine(url)


def _read(url: str, sql: str, **params) -> pd.DataFrame:
    stmt = text(sql)
    for name, value in params.items():
        if isinstance(value, list | tuple):
            stmt = stmt.bindparams(bindparam(name, expanding=True))
    with engine(url).connect() as conn:
        return pd.read_sql(stmt, conn, params=params)


# ---------------------------------------------------------------- queue


def grids(url: str) -> pd.DataFrame:
    return _read(url, "SELECT id AS grid_id, name AS grid, created_at FROM grids ORDER BY id")


def jobs(url: str) -> pd.DataFrame:
    """Every job with its state and progress; the error text only for failed jobs."""
    return _read(
        url,
        """
        SELECT j.id AS job_id, j.grid_id, g.name AS grid, j.kind, j.recipe, j.variant_label, j.size, j.seed, j.status,
               j.priority, j.attempts, j.budget_tokens, j.budget_time_s, j.created_at, j.started_at,
               j.finished_at, j.heartbeat_at, j.worker, j.progress_done, j.progress_total, j.eta_s,
               CASE WHEN j.status = :failed THEN j.error END AS error
        FROM jobs j LEFT JOIN grids g ON g.id = j.grid_id
        ORDER BY j.id
        """,
        failed=JobStatus.FAILED.value,
    )


def latest(url: str, job_ids: Iterable[int], keys: Iterable[str] = CURVE_KEYS) -> pd.DataFrame:
    """Last reported value per (job, key) from `latest_metrics` for the given jobs."""
    ids, keys = [int(i) for i in job_ids], list(keys)
    if not ids or not keys:
        return pd.DataFrame(columns=["job_id", "key", "step", "tokens", "wall_s", "value"])
    return _read(
        url,
        "SELECT job_id, key, step, tokens, wall_s, value FROM latest_metrics "
        "WHERE job_id IN :ids AND key IN :keys",
        ids=ids,
        keys=keys,
    )


# ---------------------------------------------------------------- runs and results


def _variant_sql(job: str) -> str:
    """The variant and resolved architecture of job alias `job` (stored at submission, revision 0004);
    the trained loop count is `train_loops` (a depth sweep's own `loops` is the evaluated count)."""
    cols = ["variant_id", "variant_label", "n_prelude", "n_recurrent", "n_coda", "effective_depth", "d_model",
            "injection", "n_once", "n_rec"]  # fmt: skip
    return ", ".join(f"{job}.{c}" for c in cols) + f", {job}.loops AS train_loops"


def runs(url: str) -> pd.DataFrame:
    """One row per train job with its result (NaN until it finished) and how it loops.

    Adds `match_time_of` (the reference job of an iso-time run, from the budget as submitted) and
    `loop_mode` / `train_loops` (from the sampler and loop count stored with the job at submission),
    the variant and architecture (`_variant_sql`), and the FLOPs: `train_flops` is the trainer's
    total, else FLOPs per token × tokens trained (a run stored before FLOPs were counted).
    """
    df = _read(
        url,
        f"""
        SELECT j.id AS job_id, j.grid_id, g.name AS grid, j.recipe, j.size, j.seed, j.status,
               j.budget, j.budget_tokens, j.budget_time_s, j.budget_flops, j.loop_sampler, {_variant_sql("j")},
               r.steps, r.tokens, r.train_seconds, r.tokens_per_s, r.final_train_loss, r.final_val_loss,
               r.final_val_bpb, r.peak_mem_mb, COALESCE(r.n_params, j.n_params) AS n_params,
               r.n_params_non_embedding, r.time_budget_s, r.device,
               COALESCE(r.flops_per_token, j.flops_per_token) AS flops_per_token,
               COALESCE(r.train_flops, COALESCE(r.flops_per_token, j.flops_per_token) * r.tokens) AS train_flops,
               r.achieved_flops_per_s, r.mfu, r.padding_waste, r.concurrent_jobs
        FROM jobs j
        LEFT JOIN grids g ON g.id = j.grid_id
        LEFT JOIN train_results r ON r.job_id = j.id
        WHERE j.kind = 'train'
        ORDER BY j.id
        """,
    )
    df["match_time_of"] = pd.array([_match_time_of(b) for b in df["budget"]], dtype="Int64")
    df["loop_mode"] = [_loop_mode(s, n) for s, n in zip(df["loop_sampler"], df["train_loops"], strict=True)]
    df["train_loops"] = pd.array([None if pd.isna(n) else int(n) for n in df["train_loops"]], dtype="Int64")
    return df.drop(columns=["budget", "loop_sampler"])


def _match_time_of(budget: str | None) -> int | None:
    if not budget:
        return None
    ref = json.loads(budget).get("match_time_of")
    return ref if isinstance(ref, int) and not isinstance(ref, bool) else None


def _loop_mode(sampler: str | None, loops: float | None) -> str | None:
    """ "fixed" | "sampled" | "none" (one pass: not looped); None when the job's sampler is unknown."""
    if sampler is None or pd.isna(sampler):
        return None
    if sampler != "fixed":
        return "sampled"  # the stored loop count is the sampler's mean
    return "none" if loops == 1 else "fixed"


def _sweep_rows(url: str, table: str, columns: str, order: str) -> pd.DataFrame:
    """Rows of a depth-sweep result `table` (aliased r) labelled with the sweep's trained model: its
    train_job_id, recipe, size, seed, budget and variant columns, then `columns` (of r), sorted by the
    train job and then `order` (of r)."""
    return _read(
        url,
        f"""
        SELECT r.job_id AS sweep_job_id, t.id AS train_job_id, t.grid_id, t.recipe, t.size, t.seed,
               t.budget_tokens, {_variant_sql("t")}, {columns}
        FROM {table} r
        JOIN job_deps d ON d.job_id = r.job_id
        JOIN jobs t ON t.id = d.depends_on AND t.kind = 'train'
        ORDER BY t.id, {order}
        """,
    )


def depth(url: str) -> pd.DataFrame:
    """Depth-sweep results labelled with the trained model (train_job_id, recipe, size, seed, variant)."""
    return _sweep_rows(
        url, "depth_evals", "r.loops, r.val_loss, r.val_bpb, r.far_copy_loss, r.near_loss", "r.loops"
    )


def round_deltas(url: str) -> pd.DataFrame:
    """Per-round loop geometry (relative change, angle, state variance; the last two NULL for sweeps
    stored before revision 0007), labelled with the trained model and its variant."""
    return _sweep_rows(
        url, "round_deltas", "r.loops, r.round, r.rel_change, r.angle, r.state_var", "r.loops, r.round"
    )


def round_interactions(url: str) -> pd.DataFrame:
    """The depth sweeps' interaction matrices (round `skipped` skipped, effect on the later round
    `round`, at `loops` rounds), labelled with the trained model and its variant."""
    return _sweep_rows(
        url, "round_interactions", "r.loops, r.skipped, r.round, r.interaction", "r.loops, r.skipped, r.round"
    )


def task_scores(url: str) -> pd.DataFrame:
    """Eval-job task scores (one row per task, subset and loop count) labelled with the trained model
    (train_job_id, recipe, size, seed, variant; `train_loops` the trained count, `loops` the evaluated)."""
    return _read(
        url,
        f"""
        SELECT ts.job_id AS eval_job_id, t.id AS train_job_id, t.grid_id, t.recipe, t.size, t.seed,
               t.budget_tokens, {_variant_sql("t")}, ts.task, ts.category, ts.subset, ts.loops, ts.n,
               ts.acc, ts.acc_norm, ts.stderr, ts.chance
        FROM task_scores ts
        JOIN job_deps d ON d.job_id = ts.job_id
        JOIN jobs t ON t.id = d.depends_on AND t.kind = 'train'
        ORDER BY t.id, ts.task, ts.subset, ts.loops
        """,
    )


def decode(url: str) -> pd.DataFrame:
    """Decode-bench rows with the bench job's variant (the id of the train jobs of that architecture)."""
    return _read(
        url,
        f"""
        SELECT b.job_id, j.grid_id, g.name AS grid, j.recipe, b.arch, b.size, {_variant_sql("j")},
               b.context_len, b.batch_size, b.ms_per_token, b.ms_p10, b.ms_p90, b.kv_cache_mb, b.device,
               b.dtype, b.cuda_graph, b.concurrent_jobs
        FROM decode_benches b JOIN jobs j ON j.id = b.job_id LEFT JOIN grids g ON g.id = j.grid_id
        ORDER BY b.arch, b.context_len, b.batch_size
        """,
    )


# ---------------------------------------------------------------- curves


def depth_metric_keys(url: str, job_ids: Iterable[int]) -> pd.DataFrame:
    """(job_id, key) of every `val_loss@N` metric the given jobs reported, from `latest_metrics` (one
    row per job and key: cheap), so a page knows which loop counts to read before reading curves."""
    ids = [int(i) for i in job_ids]
    if not ids:
        return pd.DataFrame(columns=["job_id", "key"])
    return _read(
        url,
        "SELECT job_id, key FROM latest_metrics WHERE job_id IN :ids AND key LIKE :pattern ORDER BY job_id, key",
        ids=ids,
        pattern=DEPTH_KEY_PATTERN,
    )


def curves(
    url: str,
    job_ids: Iterable[int],
    keys: Iterable[str] = ("train_loss", "val_loss"),
    max_points: int = MAX_POINTS,
) -> pd.DataFrame:
    """Metric points of the given jobs, downsampled in SQL to ≤ `max_points` per (job, key).

    Same rule as `analysis.downsample`: stride ceil((n-1)/(max_points-1)), first and last kept.
    """
    ids, keys = [int(i) for i in job_ids], list(keys)
    if not ids or not keys:
        return pd.DataFrame(columns=["job_id", "key", "step", "tokens", "wall_s", "value"])
    m = max(2, int(max_points))
    return _read(
        url,
        f"""
        SELECT job_id, key, step, tokens, wall_s, value FROM (
            SELECT job_id, key, step, tokens, wall_s, value,
                   ROW_NUMBER() OVER (PARTITION BY job_id, key ORDER BY step) AS rn,
                   COUNT(*) OVER (PARTITION BY job_id, key) AS n
            FROM metrics WHERE job_id IN :ids AND key IN :keys
        ) t
        WHERE rn = n OR (rn - 1) % (CASE WHEN n <= {m} THEN 1 ELSE (n + {m} - 3) / ({m} - 1) END) = 0
        ORDER BY job_id, key, step
        """,
        ids=ids,
        keys=keys,
    )


# ---------------------------------------------------------------- SQL page


def sql_query(
    url: str, sql: str, limit: int = SQL_ROW_LIMIT, timeout_s: float | None = None
) -> tuple[pd.DataFrame, bool]:
    """Run a user's read-only query: (first `limit` rows, whether more rows were cut off).

    Raises orchestrator.sql.WriteRefused for anything that could write (checked before the database
    is touched); the query runs in a read-only transaction (the second line of defence) and is stopped
    with orchestrator.sql.QueryTimeout after `timeout_s` seconds (default: orchestrator.sql's).
    """
    from orchestrator.sql import DEFAULT_TIMEOUT_S, run_readonly

    timeout_s = DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s
    columns, rows, truncated = run_readonly(url, sql, timeout_s=timeout_s, limit=limit)
    return pd.DataFrame.from_records(rows, columns=columns), truncated
