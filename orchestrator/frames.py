"""The results database as DataFrames, in the shapes `analysis/` reads: the job listing, the runs, the
depth sweeps, task scores, decode benches, the adaptive jobs' cells and metric curves. The dashboard's pages (through
`st.cache_data` in dashboard/ui.py), the demo's tables and `looplab fit` read them, so each is written
once, here, below all three.

Why it looks like this:
- a run is what the `runs` view says (orchestrator/views.py, its one definition): `runs` reads the view
  and adds only what people do not query (the submitted budget, the run's node and memory); the job
  listing is one query (`job_listing`) that `looplab status` and the Queue page both show columns of;
- every query by URL goes through `orchestrator.db.readonly_engine` (SQLite `mode=ro` + `query_only`),
  which caches one engine per URL: a reader can never write, and opens the file once;
- a reader asks only for what it shows: the listing reads the jobs table and `latest_metrics` (never
  the full metric history), curves are read only for the selected jobs and only at the points drawn
  (each point's stored level selects every 2^L-th one through an index), so 100 runs × 300,000 points
  read as fast as 100 runs × 500;
- no Streamlit, no model code: what a reader needs to know about a run (how it loops) is a column of
  `jobs`, filled at submission.
"""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd
import sqlalchemy as sa
from sqlalchemy import Engine, bindparam, text

from looplab.analysis.curves import CURVE_LEVEL_TOP, stride_level
from looplab.model.names import LOOPED_ARCH_COLUMNS
from looplab.orchestrator.db import readonly_engine
from looplab.orchestrator.jobkinds import MODEL_SOURCES
from looplab.orchestrator.pairing import MATCH_TIME, stored_reference
from looplab.orchestrator.schema import (
    Attempt,
    DecodeBench,
    DepthEval,
    GridRow,
    Job,
    JobDep,
    LatestMetric,
    TrainResult,
)
from looplab.orchestrator.states import ACTIVE, JobStatus

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


# ---------------------------------------------------------------- the job listing


def _deepest_val_loss(job_id) -> sa.ScalarSelect:
    """A depth sweep's val loss at the deepest loop count it has evaluated so far (NULL before any)."""
    de = DepthEval.__table__
    return (
        sa.select(de.c.val_loss)
        .where(de.c.job_id == job_id)
        .order_by(de.c.loops.desc())
        .limit(1)
        .scalar_subquery()
    )


def job_listing(
    eng: Engine,
    grid: str | int | None = None,
    active_only: bool = False,
    job_ids: Iterable[int] | None = None,
) -> pd.DataFrame:
    """One row per job in id order: its grid, kind, run identity, state, attempts, timestamps, worker and
    GPUs, progress and ETA, its latest train and val loss (`latest_metrics`; for a depth sweep, which
    reports no curve, its val loss at the deepest loop count evaluated so far, so its progress line has a
    figure as a train job's has), its error text and
    `waiting_for`: the first job it depends on that has not succeeded ("prepare job 7"), else None.

    One query however many jobs there are. `grid`: a grid id or name; `active_only`: only queued and
    running jobs (`orchestrator.states.ACTIVE`); `job_ids`: only these jobs. `looplab status` /
    `Queue.status()` (lab/display.py) and the Queue page (`jobs`) each show columns of it."""
    lm_train = sa.alias(LatestMetric.__table__, "lt")
    lm_val = sa.alias(LatestMetric.__table__, "lv")
    j = Job.__table__
    deps, dep = JobDep.__table__, sa.alias(Job.__table__, "dep")
    blocking = (
        sa.select(dep.c.id, dep.c.kind)
        .join(deps, deps.c.depends_on == dep.c.id)
        .where(deps.c.job_id == j.c.id, dep.c.status != JobStatus.SUCCEEDED)
        .order_by(dep.c.id)
        .limit(1)
    )
    query = (
        sa.select(
            j.c.id.label("job_id"),
            j.c.grid_id,
            GridRow.name.label("grid"),
            j.c.kind,
            j.c.recipe,
            j.c.variant_label,
            j.c.size,
            j.c.seed,
            j.c.status,
            j.c.priority,
            j.c.owner,
            j.c.attempts,
            j.c.budget_tokens,
            j.c.budget_time_s,
            j.c.created_at,
            j.c.started_at,
            j.c.finished_at,
            j.c.heartbeat_at,
            j.c.worker,
            j.c.gpu_ids,
            j.c.progress_done,
            j.c.progress_total,
            j.c.eta_s,
            lm_train.c.value.label("train_loss"),
            sa.func.coalesce(lm_val.c.value, _deepest_val_loss(j.c.id)).label("val_loss"),
            j.c.error,
            blocking.with_only_columns(dep.c.id).scalar_subquery().label("waiting_for_id"),
            blocking.with_only_columns(dep.c.kind).scalar_subquery().label("waiting_for_kind"),
        )
        .outerjoin(GridRow, GridRow.id == j.c.grid_id)
        .outerjoin(lm_train, sa.and_(lm_train.c.job_id == j.c.id, lm_train.c.key == "train_loss"))
        .outerjoin(lm_val, sa.and_(lm_val.c.job_id == j.c.id, lm_val.c.key == "val_loss"))
        .order_by(j.c.id)
    )
    if grid is not None:
        by_id = str(grid).isdigit()
        query = query.where(GridRow.id == int(grid)) if by_id else query.where(GridRow.name == str(grid))
    if active_only:
        query = query.where(j.c.status.in_(ACTIVE))
    if job_ids is not None:
        query = query.where(j.c.id.in_([int(i) for i in job_ids]))
    with eng.connect() as conn:
        df = pd.read_sql(query, conn)
    ids, kinds = df.pop("waiting_for_id"), df.pop("waiting_for_kind")
    df["waiting_for"] = [None if pd.isna(i) else f"{k} job {int(i)}" for i, k in zip(ids, kinds)]
    return df


# the Queue page's columns of the listing
JOB_COLUMNS = [
    "job_id",
    "grid_id",
    "grid",
    "kind",
    "recipe",
    "variant_label",
    "size",
    "seed",
    "status",
    "priority",
    "owner",
    "attempts",
    "budget_tokens",
    "budget_time_s",
    "created_at",
    "started_at",
    "finished_at",
    "heartbeat_at",
    "worker",
    "progress_done",
    "progress_total",
    "eta_s",
    "waiting_for",
    "error",
]


def jobs(url: str) -> pd.DataFrame:
    """Every job with its state and progress (`JOB_COLUMNS` of `job_listing`); the error text only for
    failed jobs (a retried job's old traceback is not its state)."""
    df = job_listing(engine(url))[JOB_COLUMNS].copy()
    df["error"] = df["error"].where(df["status"] == JobStatus.FAILED)
    return df


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


def grid_rows(url: str, grids: Iterable[str | int], where: str) -> pd.DataFrame:
    """The stored grids named (or numbered) by `grids` (id, name, created_at, spec) in id order, for a
    command that works on grids (`looplab report`, `looplab export --grid`). A name matches every grid
    of that name. ConfigError from `where` naming a grid that is not in the database, with those that are."""
    from looplab.model.errors import ConfigError

    with engine(url).connect() as conn:
        stored = pd.read_sql(sa.select(GridRow.id, GridRow.name, GridRow.created_at, GridRow.spec), conn)
    picked = []
    for name in grids:
        hit = stored[(stored["name"] == str(name)) | (stored["id"].astype(str) == str(name))]
        if hit.empty:
            known = ", ".join(sorted(set(stored["name"]))) or "(none: the database has no grid)"
            raise ConfigError(f"{where}: grid {str(name)!r} is not in the database; accepted: {known}")
        picked.append(hit)
    if not picked:
        return stored.iloc[:0]
    return pd.concat(picked).drop_duplicates("id").sort_values("id").reset_index(drop=True)


# ---------------------------------------------------------------- runs and results


def _variant_sql(job: str) -> str:
    """The variant and resolved architecture of job alias `job` (stored at submission, revision 0004) and
    where an imported model came from (NULL for one trained here, revision 0012); the trained loop count
    is `train_loops` (a depth sweep's own `loops` is the evaluated count)."""
    cols = ["variant_id", "variant_label", *LOOPED_ARCH_COLUMNS, "imported_from"]
    return ", ".join(f"{job}.{c}" for c in cols) + f", {job}.loops AS train_loops"


def _budget_sql(job: str) -> str:
    """The budget columns of job alias `job`: what `analysis.variants.budget_labels` reads to tell a
    run's budget (tokens, FLOPs, seconds, or the time of another run: `_with_match_time`)."""
    return f"{job}.budget_tokens, {job}.budget_time_s, {job}.budget_flops, {job}.budget AS stored_budget"


def _with_match_time(df: pd.DataFrame) -> pd.DataFrame:
    """`df` with `match_time_of` (the reference job of an iso-time run) in place of the stored budget."""
    df[MATCH_TIME] = pd.array([stored_reference(b) for b in df.pop("stored_budget")], dtype="Int64")
    return df


def runs(url: str) -> pd.DataFrame:
    """One row per run of the `runs` view (orchestrator/views.py) with its result (NaN until it
    finished) and how it loops.

    Adds `match_time_of` (the reference job of an iso-time run, orchestrator.pairing),
    `loop_mode` / `train_loops` (from the sampler and loop count stored with the job at submission),
    how a step runs (the view's `batch_size`, `micro_batch_size`, `workers`),
    what the view leaves to the tables (grid id, peak memory, device, concurrent jobs), and the FLOPs:
    `train_flops` is the trainer's total, else FLOPs per token × tokens trained (a run stored before
    FLOPs were counted). Only the view's columns named here are read, so its best-loop subqueries
    are not evaluated.
    """
    df = _read(
        url,
        """
        SELECT v.job_id, j.grid_id, v.grid, v.recipe, v.size, v.seed, v.status,
               j.budget AS stored_budget, v.budget_tokens, v.budget_time_s, v.budget_flops, v.loop_sampler, v.variant_id,
               v.variant_label, v.n_prelude, v.n_recurrent, v.n_coda, v.effective_depth, v.d_model, v.injection,
               v.n_once, v.n_rec, v.loops AS train_loops,
               v.steps, v.tokens, v.train_seconds, v.tokens_per_s, v.final_train_loss, v.final_val_loss,
               v.final_val_bpb, r.peak_mem_mb, v.n_params, r.n_params_non_embedding, r.time_budget_s, r.device,
               v.flops_per_token, COALESCE(v.train_flops, v.flops_per_token * v.tokens) AS train_flops,
               v.achieved_flops_per_s, v.mfu, v.padding_waste, r.concurrent_jobs, v.imported_from,
               v.batch_size, v.micro_batch_size, v.workers
        FROM runs v
        JOIN jobs j ON j.id = v.job_id
        LEFT JOIN train_results r ON r.job_id = v.job_id
        ORDER BY v.job_id
        """,
    )
    df = _with_match_time(df)
    df["loop_mode"] = [_loop_mode(s, n) for s, n in zip(df["loop_sampler"], df["train_loops"], strict=True)]
    df["train_loops"] = pd.array([None if pd.isna(n) else int(n) for n in df["train_loops"]], dtype="Int64")
    for column in ("batch_size", "micro_batch_size", "workers"):
        df[column] = df[column].astype("Int64")
    return df.drop(columns=["loop_sampler"])


def _loop_mode(sampler: str | None, loops: float | None) -> str | None:
    """ "fixed" | "sampled" | "none" (one pass: not looped); None when the job's sampler is unknown."""
    if sampler is None or pd.isna(sampler):
        return None
    if sampler != "fixed":
        return "sampled"  # the stored loop count is the sampler's mean
    return "none" if loops == 1 else "fixed"


def _sweep_rows(url: str, table: str, columns: str, order: str, job_id: str = "sweep_job_id") -> pd.DataFrame:
    """Rows of a follow-up's result `table` (aliased r; a depth sweep's by default) labelled with its
    trained model: the follow-up's id as `job_id`, the train_job_id, recipe, size, seed, budget
    (`_budget_sql`, with `match_time_of`) and variant columns, then `columns` (of r), sorted by the train
    job and then `order` (of r)."""
    df = _read(
        url,
        f"""
        SELECT r.job_id AS {job_id}, t.id AS train_job_id, t.grid_id, t.recipe, t.size, t.seed,
               {_budget_sql("t")}, {_variant_sql("t")}, {columns}
        FROM {table} r
        JOIN job_deps d ON d.job_id = r.job_id
        JOIN jobs t ON t.id = d.depends_on AND t.kind IN :kinds
        ORDER BY t.id, {order}
        """,
        kinds=list(MODEL_SOURCES),
    )
    return _with_match_time(df)


def depth(url: str) -> pd.DataFrame:
    """Depth-sweep results labelled with the trained model (train_job_id, recipe, size, seed, variant); the
    far-copy share, distance and definition and `bf16_round` are NULL for sweeps before revision 0018
    (whose far-copy rows hold definition 1); `test_loss` / `test_bpb` are NULL unless the sweep
    evaluated the test split (revision 0020)."""
    columns = (
        "r.loops, r.val_loss, r.val_bpb, r.far_copy_loss, r.near_loss, r.far_share, r.far_distance, "
        "r.far_definition, r.bf16_round, r.test_loss, r.test_bpb"
    )
    return _sweep_rows(url, "depth_evals", columns, "r.loops")


def round_deltas(url: str) -> pd.DataFrame:
    """Per-round loop geometry (relative change, angle, state variance: the last two NULL for sweeps
    stored before revision 0007; change ratio and bf16 resolution: NULL before 0018), labelled with the
    trained model and its variant."""
    return _sweep_rows(
        url,
        "round_deltas",
        "r.loops, r.round, r.rel_change, r.angle, r.state_var, r.change_ratio, r.bf16_resolution",
        "r.loops, r.round",
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
    df = _read(
        url,
        f"""
        SELECT ts.job_id AS eval_job_id, t.id AS train_job_id, t.grid_id, t.recipe, t.size, t.seed,
               {_budget_sql("t")}, {_variant_sql("t")}, ts.task, ts.category, ts.subset, ts.loops, ts.n,
               ts.acc, ts.acc_norm, ts.stderr, ts.chance
        FROM task_scores ts
        JOIN job_deps d ON d.job_id = ts.job_id
        JOIN jobs t ON t.id = d.depends_on AND t.kind IN :kinds
        ORDER BY t.id, ts.task, ts.subset, ts.loops
        """,
        kinds=list(MODEL_SOURCES),
    )
    return _with_match_time(df)


ADAPTIVE_ID = "adaptive_job_id"


def adaptive(url: str) -> pd.DataFrame:
    """The adaptive jobs' cells (exit rule x threshold x KV strategy, rule `fixed` for the fixed depth;
    workers/adaptive/job.py) labelled with the trained model and its variant."""
    columns = (
        "r.config, r.rule, r.threshold, r.kv_strategy, r.kv_m, r.min_rounds, r.max_rounds, r.changes_function, "
        "r.val_loss, r.val_bpb, r.tokens, r.mean_rounds, r.equivalent_rounds, r.forward_flops_per_token, "
        "r.rule_flops_per_token, r.fixed_flops_per_token, r.kv_mib, r.kv_mib_needed"
    )
    return _sweep_rows(url, "adaptive_evals", columns, "r.config", ADAPTIVE_ID)


def exit_rounds(url: str) -> pd.DataFrame:
    """The adaptive jobs' exit-round histograms (by token position and by loss bucket), labelled."""
    columns = "r.config, r.split, r.bucket, r.bucket_lo, r.bucket_hi, r.round, r.count"
    return _sweep_rows(
        url, "adaptive_exit_rounds", columns, "r.config, r.split, r.bucket, r.round", ADAPTIVE_ID
    )


def adaptive_tasks(url: str) -> pd.DataFrame:
    """The adaptive jobs' task scores per cell, labelled with the trained model."""
    columns = "r.config, r.task, r.category, r.subset, r.n, r.acc, r.acc_norm, r.stderr, r.chance"
    return _sweep_rows(url, "adaptive_task_scores", columns, "r.config, r.task, r.subset", ADAPTIVE_ID)


def adaptive_decodes(url: str) -> pd.DataFrame:
    """The adaptive jobs' decode timings with exits against the fixed depth, labelled."""
    columns = (
        "r.config, r.batch_size, r.mode, r.context_len, r.ms_per_token, r.ms_p10, r.ms_p90, r.tokens_per_s, "
        "r.fixed_ms_per_token, r.speedup, r.equal_loss_rounds, r.equal_loss_ms_per_token, r.mean_exit_round, "
        "r.mean_step_rounds, r.kv_mib, r.kv_mib_needed, r.device, r.concurrent_jobs"
    )
    return _sweep_rows(url, "adaptive_decodes", columns, "r.config, r.batch_size, r.mode", ADAPTIVE_ID)


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


def reported_keys(url: str, job_ids: Iterable[int], pattern: str = "%") -> pd.DataFrame:
    """(job_id, key) of every metric matching `pattern` (SQL LIKE) the given jobs reported, from
    `latest_metrics` (one row per job and key: cheap), so a page knows which curves exist before reading
    them."""
    ids = [int(i) for i in job_ids]
    if not ids:
        return pd.DataFrame(columns=["job_id", "key"])
    return _read(
        url,
        "SELECT job_id, key FROM latest_metrics WHERE job_id IN :ids AND key LIKE :pattern ORDER BY job_id, key",
        ids=ids,
        pattern=pattern,
    )


def depth_metric_keys(url: str, job_ids: Iterable[int]) -> pd.DataFrame:
    """(job_id, key) of every `val_loss@N` metric the given jobs reported (`reported_keys`)."""
    return reported_keys(url, job_ids, DEPTH_KEY_PATTERN)


def superseded(url: str, job_ids: Iterable[int], key: str) -> pd.DataFrame:
    """The points of `key` that rewinds superseded (job_id, rewind, step, tokens, wall_s, value): the
    spiked segments, drawn faint on the Runs page and never a curve (orchestrator/schema.py
    `SupersededPoint`). Few by construction: a rewind supersedes at most a checkpoint interval."""
    ids = [int(i) for i in job_ids]
    if not ids:
        return pd.DataFrame(columns=["job_id", "rewind", "step", "tokens", "wall_s", "value"])
    return _read(
        url,
        "SELECT job_id, rewind, step, tokens, wall_s, value FROM superseded_points "
        "WHERE job_id IN :ids AND key = :key ORDER BY job_id, rewind, step",
        ids=ids,
        key=key,
    )


def rewinds(url: str, job_ids: Iterable[int]) -> pd.DataFrame:
    """The rewinds of `job_ids` (job_id, n, attempt, step gone back to, spiked_step, skipped rows as a
    list, ts): what `looplab rewinds` prints and the Runs page lists."""
    import json

    ids = [int(i) for i in job_ids]
    cols = ["job_id", "n", "attempt", "step", "spiked_step", "rows", "ts"]
    if not ids:
        return pd.DataFrame(columns=cols)
    out = _read(
        url, f"SELECT {', '.join(cols)} FROM rewinds WHERE job_id IN :ids ORDER BY job_id, n", ids=ids
    )
    return out.assign(rows=[json.loads(r) for r in out["rows"]])


def curves(
    url: str,
    job_ids: Iterable[int],
    keys: Iterable[str] = ("train_loss", "val_loss"),
    max_points: int = MAX_POINTS,
) -> pd.DataFrame:
    """Metric points of the given jobs, at most `max_points` per (job, key): every 2^L-th point, the
    first and the last (the rule of `analysis.curves.downsample`, L from `stride_level`).

    Reads only the rows it returns: each curve's point count is on its `latest_metrics` row; a curve of
    at most `max_points` points is then read whole (unique index), a longer one as its points of
    `curve_level >= L` (one range of the partial index ix_metrics_curve_level, which the writer fills
    as points arrive) and its last point (the largest step, found through the unique index), so a
    running job's curve ends at its newest point. The bounds are numbers in the SQL, the range first:
    SQLite uses a partial index only where the query repeats its condition (`curve_level >= 1`), and of
    two lower bounds on one column it seeks by the first it reads (by `>= 1` it would walk half the
    curve).
    """
    ids, keys = [int(i) for i in job_ids], list(keys)
    cols = ["job_id", "key", "step", "tokens", "wall_s", "value"]
    if not ids or not keys:
        return pd.DataFrame(columns=cols)
    counts = _read(
        url,
        "SELECT job_id, key, points FROM latest_metrics WHERE job_id IN :ids AND key IN :keys",
        ids=ids,
        keys=keys,
    )
    if counts.empty:
        return pd.DataFrame(columns=cols)
    counts["level"] = [stride_level(int(n), max_points) for n in counts["points"]]
    selects, params = [], {}
    m_cols = ", ".join(f"m.{c}" for c in cols)
    for i, ((key, level), group) in enumerate(counts.groupby(["key", "level"])):
        params.update({f"key{i}": key, f"ids{i}": [int(j) for j in group["job_id"]]})
        mine = f"m.key = :key{i} AND m.job_id IN :ids{i}"
        if not level:
            selects.append(f"SELECT {m_cols} FROM metrics m WHERE {mine}")
            continue
        selects.append(
            f"SELECT {m_cols} FROM metrics m WHERE {mine} AND m.curve_level BETWEEN {int(level)} "
            f"AND {CURVE_LEVEL_TOP} AND m.curve_level >= 1"
        )
        selects.append(
            f"SELECT {m_cols} FROM latest_metrics l JOIN metrics m ON m.job_id = l.job_id AND m.key = l.key "
            "AND m.step = (SELECT MAX(s.step) FROM metrics s WHERE s.job_id = l.job_id AND s.key = l.key) "
            f"WHERE l.key = :key{i} AND l.job_id IN :ids{i}"
        )
    points = _read(url, " UNION ALL ".join(selects), **params)
    # the last point is read twice when its level is high enough
    return (
        points.drop_duplicates(["job_id", "key", "step"])
        .sort_values(["job_id", "key", "step"])
        .reset_index(drop=True)
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
    from looplab.orchestrator.sql import DEFAULT_TIMEOUT_S, run_readonly

    timeout_s = DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s
    columns, rows, truncated = run_readonly(url, sql, timeout_s=timeout_s, limit=limit)
    return pd.DataFrame.from_records(rows, columns=columns), truncated


def planned_vs_actual(eng: Engine) -> pd.DataFrame:
    """Finished jobs with a stored plan estimate: planned and actual wall seconds (the attempts' sum),
    their ratio, the estimate's source and the contention the job ran under."""
    attempts = Attempt.__table__
    jobs_t = Job.__table__
    wall = (
        sa.select(attempts.c.job_id, sa.func.sum(attempts.c.ended_at - attempts.c.started_at).label("actual"))
        .where(attempts.c.ended_at.is_not(None))
        .group_by(attempts.c.job_id)
        .subquery()
    )
    results = TrainResult.__table__
    contention = (
        sa.select(DecodeBench.job_id, sa.func.max(DecodeBench.concurrent_jobs).label("concurrent"))
        .group_by(DecodeBench.job_id)
        .subquery()
    )
    query = (
        sa.select(
            jobs_t.c.id.label("job_id"),
            GridRow.name.label("grid"),
            jobs_t.c.kind,
            jobs_t.c.variant_label,
            jobs_t.c.size,
            jobs_t.c.seed,
            jobs_t.c.status,
            jobs_t.c.planned_source.label("source"),
            jobs_t.c.planned_seconds,
            wall.c.actual.label("actual_seconds"),
            sa.func.coalesce(results.c.concurrent_jobs, contention.c.concurrent).label("concurrent_jobs"),
        )
        .join(wall, wall.c.job_id == jobs_t.c.id)
        .outerjoin(GridRow, GridRow.id == jobs_t.c.grid_id)
        .outerjoin(results, results.c.job_id == jobs_t.c.id)
        .outerjoin(contention, contention.c.job_id == jobs_t.c.id)
        .where(jobs_t.c.planned_seconds.is_not(None), jobs_t.c.status == JobStatus.SUCCEEDED)
        .order_by(jobs_t.c.id)
    )
    with eng.connect() as conn:
        df = pd.DataFrame(conn.execute(query).all(), columns=[c.name for c in query.selected_columns])
    df["ratio"] = df["actual_seconds"] / df["planned_seconds"]
    return df
