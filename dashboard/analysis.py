"""The numbers behind every dashboard page: pure pandas functions, DataFrame in, DataFrame out.

The pages only draw what these functions return, so every number a researcher reads off the
dashboard is unit-tested here (tests/dashboard/test_analysis.py). Nothing in this module imports
Streamlit or touches the database (the job states come from `orchestrator.states`, a plain enum);
`dashboard.data` builds the input frames.

Honesty rules shared by all functions:
- missing data stays missing (NaN), never 0: a recipe with one seed has no std, a looped run
  without a depth sweep has no best-loop loss;
- a difference whose magnitude is below the noise threshold (default 0.01 in loss) is "noise";
- per-seed values are always shown next to the mean.

Input frames (column names as `dashboard.data` produces them):
- runs:   one row per train job: job_id, grid, recipe, size, seed, status, budget_tokens,
          budget_time_s, match_time_of, loop_mode ("fixed" | "sampled" | "none"), train_loops,
          tokens, train_seconds, tokens_per_s, final_val_loss
- depth:  train_job_id, recipe, size, seed, loops, val_loss     (depth_evals of each run's sweep)
- deltas: train_job_id, recipe, size, seed, loops, round, rel_change
- decode: arch, size, context_len, batch_size, device, dtype, ms_per_token, ms_p10, ms_p90,
          kv_cache_mb
- curves: job_id, key, step, tokens, wall_s, value
- jobs / latest: the queue listing and the last metric value per (job, key)
"""

from __future__ import annotations

import math
import time

import numpy as np
import pandas as pd

from orchestrator.states import JobStatus

NOISE_THRESHOLD = 0.01
MISSING = "—"
# columns that identify a configuration; the seed is deliberately not one of them
CONFIG_COLUMNS = ("grid", "recipe", "size", "budget_tokens", "budget_time_s")
JOB_STATES = tuple(status.value for status in JobStatus)  # in the order a job moves through them


def budget_labels(runs: pd.DataFrame) -> list[str]:
    """A short label per run for its budget: '2M tokens', '60 s', or 'time of #12' (iso-time run)."""
    out = []
    for r in runs.itertuples(index=False):
        ref = getattr(r, "match_time_of", None)
        if present(ref):
            out.append(f"time of #{int(ref)}")
        elif present(getattr(r, "budget_tokens", None)):
            out.append(f"{r.budget_tokens / 1e6:g}M tokens")
        elif present(getattr(r, "budget_time_s", None)):
            out.append(f"{r.budget_time_s:g} s")
        else:
            out.append(MISSING)
    return out


# ---------------------------------------------------------------- seeds


def config_columns(df: pd.DataFrame) -> list[str]:
    """The configuration columns present in `df` (everything that defines a run except its seed)."""
    return [c for c in CONFIG_COLUMNS if c in df.columns]


def seed_aggregate(df: pd.DataFrame, value: str, by: list[str] | None = None) -> pd.DataFrame:
    """Mean, std, min, max and count over seeds of `value`, one row per configuration.

    `by` defaults to the configuration columns present. `n_seeds` counts non-missing values, and
    std needs two of them (one seed gives NaN, not 0).
    """
    by = list(by) if by is not None else config_columns(df)
    if "seed" in by:
        raise ValueError("seed_aggregate groups over seeds; 'seed' cannot be a grouping column")
    if df.empty:
        return pd.DataFrame(columns=[*by, "mean", "std", "min", "max", "n_seeds"])
    out = df.groupby(by, dropna=False, sort=True)[value].agg(["mean", "std", "min", "max", "count"])
    return out.reset_index().rename(columns={"count": "n_seeds"})


# ---------------------------------------------------------------- loop count used for comparison


def eval_loss_per_run(runs: pd.DataFrame, depth: pd.DataFrame) -> pd.DataFrame:
    """Add the loss each run is compared by: `eval_loss`, `eval_loops` and `loop_rule`.

    - sampled-loop recipes (parcae & co.): the best loss of their depth sweep, at the loop count
      it was reached (ties: the fewer loops); without a sweep the value is missing;
    - fixed-loop recipes: the sweep's loss at their trained loop count if a sweep measured it,
      else the final validation loss (evaluated at that same count);
    - no loop (plain transformer): the final validation loss.
    """
    out = runs.copy()
    cols = ["train_job_id", "loops", "val_loss"]
    d = depth[cols].dropna(subset=["val_loss"]) if not depth.empty else pd.DataFrame(columns=cols)
    d = d.astype({"train_job_id": "int64", "loops": "float64", "val_loss": "float64"})
    # two sweeps of one run at the same count: their mean
    d = d.groupby(["train_job_id", "loops"], as_index=False)["val_loss"].mean()
    best = d.sort_values(["train_job_id", "val_loss", "loops"]).drop_duplicates("train_job_id")
    best = best.set_index("train_job_id")
    best_loss = out["job_id"].map(best["val_loss"]).astype(float)
    best_loops = out["job_id"].map(best["loops"]).astype(float)
    mode = out["loop_mode"] if "loop_mode" in out else pd.Series(None, index=out.index, dtype=object)
    trained = (
        pd.to_numeric(out["train_loops"], errors="coerce").astype(float) if "train_loops" in out else np.nan
    )
    key = pd.DataFrame({"train_job_id": out["job_id"].astype("int64"), "loops": trained})
    at_trained = key.merge(d, on=["train_job_id", "loops"], how="left")["val_loss"].to_numpy()
    final = out["final_val_loss"].astype(float).to_numpy()
    fixed, none = (mode == "fixed").to_numpy(), (mode == "none").to_numpy()
    swept_fixed = fixed & ~np.isnan(at_trained)
    has_best = ~fixed & ~none & best_loss.notna().to_numpy()
    conds = [swept_fixed, fixed, none, has_best]
    out["eval_loss"] = np.select(conds, [at_trained, final, final, best_loss.to_numpy()], np.nan)
    trained_arr = np.broadcast_to(np.asarray(trained, dtype=float), len(out))
    out["eval_loops"] = np.select(conds, [trained_arr, trained_arr, np.nan, best_loops.to_numpy()], np.nan)
    rules = ["sweep @ trained", "final val @ trained", "final val (no loop)", "best of sweep"]
    out["loop_rule"] = np.select(conds, rules, "no depth sweep")
    return out


def present(x) -> bool:
    return x is not None and not (isinstance(x, float) and math.isnan(x)) and x is not pd.NA


# ---------------------------------------------------------------- iso-data


def verdict(diff: float, threshold: float, lower_is_better: bool = True) -> str:
    """'noise' below the threshold, else 'better' / 'worse'; '—' when the difference is missing."""
    if not present(diff):
        return MISSING
    if abs(diff) < threshold:
        return "noise"
    return "better" if (diff < 0) == lower_is_better else "worse"


def _pick_reference(recipes, reference: str | None) -> str | None:
    recipes = sorted({r for r in recipes if present(r)})
    if reference in recipes:
        return reference
    return "parcae" if "parcae" in recipes else (recipes[0] if recipes else None)


def iso_data_table(
    evals: pd.DataFrame,
    reference: str | None = None,
    threshold: float = NOISE_THRESHOLD,
    value: str = "eval_loss",
) -> pd.DataFrame:
    """Recipes side by side at equal model size and token budget.

    One row per (size, budget_tokens, recipe): a column per seed, mean, std, n_seeds, the loop
    count(s) the values were taken at (`best_loops`, '8' or '8/12' when seeds differ) and the rule
    (`loop_rule`), the difference of the mean to the reference recipe's mean at the same size and
    budget (`diff`), and `verdict` (reference / noise / better / worse / —).

    `evals` is `eval_loss_per_run(...)`; runs whose budget was derived from another run's time
    (iso-time runs) and time-budget runs are left out: they are not at equal data.
    """
    df = evals
    if "match_time_of" in df.columns:
        df = df[df["match_time_of"].isna()]
    df = df[df["budget_tokens"].notna()]
    keys = ["size", "budget_tokens", "recipe"]
    cols = [*keys, "mean", "std", "n_seeds", "best_loops", "loop_rule", "diff", "verdict"]
    if df.empty:
        return pd.DataFrame(columns=cols)
    reference = _pick_reference(df["recipe"], reference)
    per_seed = df.groupby([*keys, "seed"], dropna=False)[value].mean().unstack("seed")
    per_seed.columns = [f"seed {int(s)}" if present(s) else "seed ?" for s in per_seed.columns]
    agg = df.groupby(keys, dropna=False)[value].agg(["mean", "std", "count"])
    agg = agg.rename(columns={"count": "n_seeds"})
    agg["best_loops"] = df.groupby(keys, dropna=False)["eval_loops"].agg(_join_loops)
    agg["loop_rule"] = df.groupby(keys, dropna=False)["loop_rule"].agg(lambda s: "/".join(sorted(set(s))))
    out = per_seed.join(agg).reset_index()
    ref = out[out["recipe"] == reference].set_index(["size", "budget_tokens"])["mean"]
    ref_mean = pd.Series(
        [ref.get((s, b), np.nan) for s, b in zip(out["size"], out["budget_tokens"])], index=out.index
    )
    out["diff"] = out["mean"] - ref_mean
    out["verdict"] = [
        "reference" if r == reference else verdict(d, threshold) for r, d in zip(out["recipe"], out["diff"])
    ]
    seed_cols = list(per_seed.columns)
    out["_not_ref"] = out["recipe"] != reference  # reference recipe first in each block
    out = out.sort_values(["size", "budget_tokens", "_not_ref", "recipe"])
    order = [*keys, "mean", "diff", "verdict", "best_loops", *seed_cols, "std", "n_seeds", "loop_rule"]
    return out[order].reset_index(drop=True)


def _join_loops(s: pd.Series):
    vals = sorted({int(v) for v in s.dropna()})
    return "/".join(str(v) for v in vals) if vals else None


def iso_data_matrix(table: pd.DataFrame, value: str = "mean") -> pd.DataFrame:
    """The iso-data table as a paper table: rows (size, budget_tokens), one column per recipe."""
    if table.empty:
        return pd.DataFrame()
    m = table.pivot_table(index=["size", "budget_tokens"], columns="recipe", values=value, dropna=False)
    recipes = list(dict.fromkeys(table["recipe"]))  # keep the table's order (reference first)
    return m.reindex(columns=recipes)


# ---------------------------------------------------------------- iso-time


def iso_time_pairs(runs: pd.DataFrame, threshold: float = NOISE_THRESHOLD) -> pd.DataFrame:
    """Pairs of runs whose training times were matched by a derived budget.

    A run whose budget is {"match_time_of": J} trained for the time run J took; both finished
    their LR decay, so their final validation losses are comparable. One row per matched run, with
    both times, both token counts, both final losses, `diff` = run − reference and the verdict.
    """
    cols = ["size", "recipe", "seed", "ref_recipe", "ref_seed", "final_val_loss", "ref_final_val_loss",
            "diff", "verdict", "train_seconds", "ref_train_seconds", "tokens", "ref_tokens", "job_id",
            "ref_job_id"]  # fmt: skip
    if runs.empty or "match_time_of" not in runs.columns:
        return pd.DataFrame(columns=cols)
    a = runs[runs["match_time_of"].notna()].copy()
    if a.empty:
        return pd.DataFrame(columns=cols)
    a["ref_job_id"] = a["match_time_of"].astype("int64")
    ref = runs[["job_id", "recipe", "seed", "train_seconds", "tokens", "final_val_loss"]]
    ref = ref.rename(columns={c: f"ref_{c}" for c in ref.columns})
    out = a.merge(ref, on="ref_job_id", how="left")
    out["diff"] = out["final_val_loss"] - out["ref_final_val_loss"]
    out["verdict"] = [verdict(d, threshold) for d in out["diff"]]
    return out[cols].sort_values(["size", "ref_recipe", "recipe", "seed"]).reset_index(drop=True)


def iso_time_summary(pairs: pd.DataFrame, threshold: float = NOISE_THRESHOLD) -> pd.DataFrame:
    """Iso-time pairs averaged over seeds: one row per (size, recipe, reference recipe)."""
    keys = ["size", "recipe", "ref_recipe"]
    if pairs.empty:
        return pd.DataFrame(columns=[*keys, "final_val_loss", "ref_final_val_loss", "diff", "diff_std",
                                     "n_pairs", "verdict"])  # fmt: skip
    g = pairs.groupby(keys, dropna=False)
    out = g[["final_val_loss", "ref_final_val_loss", "diff"]].mean()
    out["diff_std"] = g["diff"].std()
    out["n_pairs"] = g["diff"].count()
    out["verdict"] = [verdict(d, threshold) for d in out["diff"]]
    return out.reset_index()


def wall_time_curves(curves: pd.DataFrame, runs: pd.DataFrame, key: str = "val_loss") -> pd.DataFrame:
    """Loss against training seconds for runs of different lengths.

    Each run's LR schedule decays over its own budget, so a point in the middle of a longer run is
    *not decayed* and sits above where a run of that length would end; only the last point of a
    finished run is a decayed result. `point` says which.
    """
    cols = ["job_id", "series", "recipe", "size", "seed", "wall_s", "value", "point"]
    c = curves[(curves["key"] == key) & curves["wall_s"].notna()] if not curves.empty else curves
    if c.empty:
        return pd.DataFrame(columns=cols)
    info = runs[["job_id", "recipe", "size", "seed", "status"]]
    c = c.merge(info, on="job_id", how="inner").sort_values(["job_id", "wall_s"])
    c["series"] = [f"{r} · {s} · seed {int(sd) if present(sd) else '?'} · #{j}"
                   for r, s, sd, j in zip(c["recipe"], c["size"], c["seed"], c["job_id"])]  # fmt: skip
    last = c.groupby("job_id")["wall_s"].transform("max") == c["wall_s"]
    c["point"] = np.where(last & (c["status"] == JobStatus.SUCCEEDED), "final (decayed)", "not decayed")
    return c[cols].reset_index(drop=True)


# ---------------------------------------------------------------- depth


def depth_curves(depth: pd.DataFrame, value: str = "val_loss") -> pd.DataFrame:
    """Validation loss against inference loop count per recipe: mean over seeds and the spread."""
    return seed_aggregate(depth, value, by=["recipe", "size", "loops"])


def round_delta_curves(deltas: pd.DataFrame, loops: int | None = None) -> pd.DataFrame:
    """Relative hidden-state change per round, per recipe (mean and spread over seeds).

    `loops` picks the forward pass's loop count; None keeps every count.
    """
    d = deltas if loops is None or deltas.empty else deltas[deltas["loops"] == loops]
    return seed_aggregate(d, "rel_change", by=["recipe", "size", "loops", "round"])


# ---------------------------------------------------------------- decode and throughput


def decode_table(decode: pd.DataFrame, reference: str | None = None) -> pd.DataFrame:
    """ms/token and KV-cache MB per architecture × context × batch, with ratios to the reference
    architecture at the same size, context, batch, device and dtype (NaN where it was not run)."""
    keys = ["arch", "size", "context_len", "batch_size", "device", "dtype"]
    vals = ["ms_per_token", "ms_p10", "ms_p90", "kv_cache_mb"]
    if decode.empty:
        return pd.DataFrame(columns=[*keys, *vals, "ms_ratio", "kv_ratio"])
    t = decode.groupby(keys, dropna=False)[vals].mean().reset_index()
    reference = _pick_reference(t["arch"], reference)
    ref = t[t["arch"] == reference].drop(columns=["arch", "ms_p10", "ms_p90"])
    ref = ref.rename(columns={"ms_per_token": "_ref_ms", "kv_cache_mb": "_ref_kv"})
    t = t.merge(ref, on=keys[1:], how="left")
    t["ms_ratio"] = t["ms_per_token"] / t["_ref_ms"]
    t["kv_ratio"] = t["kv_cache_mb"] / t["_ref_kv"].replace(0, np.nan)
    return t.drop(columns=["_ref_ms", "_ref_kv"]).sort_values(keys).reset_index(drop=True)


def throughput_table(runs: pd.DataFrame, reference: str | None = None) -> pd.DataFrame:
    """Training tokens/s per recipe and size (mean over runs) and the ratio to the reference."""
    cols = ["recipe", "size", "tokens_per_s", "std", "n_runs", "ratio"]
    r = runs[runs["tokens_per_s"].notna()] if not runs.empty else runs
    if r.empty:
        return pd.DataFrame(columns=cols)
    t = r.groupby(["recipe", "size"], dropna=False)["tokens_per_s"].agg(["mean", "std", "count"])
    t = t.reset_index().rename(columns={"mean": "tokens_per_s", "count": "n_runs"})
    reference = _pick_reference(t["recipe"], reference)
    ref = t[t["recipe"] == reference].set_index("size")["tokens_per_s"]
    t["ratio"] = t["tokens_per_s"] / t["size"].map(ref)
    return t[cols]


# ---------------------------------------------------------------- curves


def downsample(
    df: pd.DataFrame, max_points: int = 500, by: tuple[str, ...] = ("job_id", "key"), order: str = "step"
) -> pd.DataFrame:
    """Keep at most `max_points` evenly strided points per series, always the first and the last.

    The stride is ceil((n-1)/(max_points-1)), the same rule `dashboard.data` applies in SQL.
    """
    if df.empty or max_points < 2:
        return df
    df = df.sort_values([*by, order])
    g = df.groupby(list(by), sort=False)
    rn = g.cumcount()
    n = g[order].transform("size")
    stride = np.maximum(1, -(-(n - 1) // (max_points - 1)))
    keep = (rn % stride == 0) | (rn == n - 1)
    return df[keep.to_numpy()].reset_index(drop=True)


def join_labels(df: pd.DataFrame, columns: list[str], sep: str = " · ") -> pd.Series:
    """One label per row from several columns ('lean · tiny · 1M tokens'), vectorised (a row-wise
    join takes seconds on a few thousand curve points)."""
    parts = []
    for c in columns:
        col = df[c]
        if pd.api.types.is_float_dtype(col) and (col.dropna() % 1 == 0).all():
            col = col.astype("Int64")  # a seed column made float by a missing value: show 0, not 0.0
        parts.append(col.astype(object).where(col.notna(), MISSING).astype(str))
    out = parts[0]
    for p in parts[1:]:
        out = out + sep + p
    return out


def curve_bands(curves: pd.DataFrame, by: list[str], x: str = "tokens", bins: int = 200) -> pd.DataFrame:
    """Mean line and min–max band over seeds for curves grouped by configuration.

    Seeds of one configuration log at the same steps, but wall time differs between them, so x is
    binned (per group, `bins` bins up to the group's largest x) before averaging.
    """
    cols = [*by, x, "mean", "min", "max", "n_seeds"]
    c = curves.dropna(subset=[x, "value"]) if not curves.empty else curves
    if c.empty:
        return pd.DataFrame(columns=cols)
    c = c.copy()
    xmax = c.groupby(by, dropna=False)[x].transform("max").replace(0, 1)
    c["_bin"] = np.floor(c[x] / xmax * bins).astype(int)
    g = c.groupby([*by, "_bin"], dropna=False)
    out = g[x].mean().to_frame()
    out["mean"] = g["value"].mean()
    out["min"] = g["value"].min()
    out["max"] = g["value"].max()
    out["n_seeds"] = g["job_id"].nunique()
    return out.reset_index()[cols]


# ---------------------------------------------------------------- queue


def status_counts(jobs: pd.DataFrame) -> pd.DataFrame:
    """Number of jobs per state, every state listed (a real zero here means no job in that state)."""
    counts = jobs["status"].value_counts() if not jobs.empty else pd.Series(dtype=int)
    states = list(JOB_STATES) + sorted(set(counts.index) - set(JOB_STATES))
    return pd.DataFrame({"status": states, "jobs": [int(counts.get(s, 0)) for s in states]})


def format_duration(seconds) -> str:
    """'1h 02m', '3m 05s', '42s'; '—' when unknown."""
    if not present(seconds) or seconds < 0:
        return MISSING
    s = int(round(seconds))
    if s >= 3600:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m {s % 60:02d}s"
    return f"{s}s"


def running_jobs(jobs: pd.DataFrame, latest: pd.DataFrame, now: float | None = None) -> pd.DataFrame:
    """Running jobs with progress (fraction), tokens/s (last reported), ETA and heartbeat age."""
    cols = ["job_id", "kind", "recipe", "size", "seed", "progress", "progress_done", "progress_total",
            "tokens_per_s", "eta", "heartbeat_age_s"]  # fmt: skip
    r = jobs[jobs["status"] == JobStatus.RUNNING].copy() if not jobs.empty else jobs
    if r.empty:
        return pd.DataFrame(columns=cols)
    now = time.time() if now is None else now
    total = r["progress_total"].where(r["progress_total"] > 0)
    r["progress"] = (r["progress_done"] / total).clip(0, 1)
    tps = latest[latest["key"] == "tokens_per_s"].set_index("job_id")["value"] if not latest.empty else {}
    r["tokens_per_s"] = r["job_id"].map(tps) if len(tps) else np.nan
    r["eta"] = r["eta_s"].map(format_duration)
    r["heartbeat_age_s"] = now - r["heartbeat_at"]
    return r[cols].sort_values("job_id").reset_index(drop=True)


def recent_failures(jobs: pd.DataFrame, n: int = 10) -> pd.DataFrame:
    """The last `n` failed jobs with their error (the traceback's last line first, then all of it)."""
    cols = ["job_id", "kind", "recipe", "size", "seed", "finished_at", "error_summary", "error"]
    f = jobs[jobs["status"] == JobStatus.FAILED].copy() if not jobs.empty else jobs
    if f.empty:
        return pd.DataFrame(columns=cols)
    f["error_summary"] = f["error"].map(_last_line)
    f = f.sort_values(["finished_at", "job_id"], ascending=False, na_position="last").head(n)
    return f[cols].reset_index(drop=True)


def _last_line(text) -> str:
    if not isinstance(text, str) or not text.strip():
        return MISSING
    return text.strip().splitlines()[-1]
