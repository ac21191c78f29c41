"""The numbers behind every dashboard page: pure pandas functions, DataFrame in, DataFrame out.

The pages only draw what these functions return, so every number a researcher reads off the
dashboard is unit-tested here (tests/dashboard/test_analysis.py). Nothing in this module imports
Streamlit or touches the database (the job states come from `orchestrator.states`, a plain enum);
`dashboard.data` builds the input frames.

Honesty rules shared by all functions:
- seeds are averaged per *variant* (recipe + size + model overrides, `dashboard.variants`), never per
  recipe: two variants of one recipe are two rows everywhere;
- missing data stays missing (NaN), never 0: a variant with one seed has no std, a looped run
  without a depth sweep has no best-loop loss;
- every difference to a reference comes with a 95 % interval and n per side, and its verdict comes
  from the interval (`dashboard.stats`): "better" / "worse" when it excludes 0, else "not resolved";
  the noise is measured from repeated seeds, and the fixed threshold (default 0.01 in loss) decides
  ("noise" below it) only where no interval exists (one seed per side and no replicated seeds);
- per-seed values are always shown next to the mean.

Input frames (column names as `dashboard.data` produces them; every frame also carries `variant_id`,
`variant_label` and the architecture columns of `dashboard.variants.ARCH_COLUMNS`):
- runs:   one row per train job: job_id, grid, recipe, size, seed, status, budget_tokens,
          budget_time_s, budget_flops, match_time_of, loop_mode ("fixed" | "sampled" | "none"),
          train_loops, tokens, train_seconds, tokens_per_s, final_val_loss, train_flops, mfu
- depth:  train_job_id, recipe, size, seed, loops, val_loss     (depth_evals of each run's sweep)
- deltas: train_job_id, recipe, size, seed, loops, round, rel_change
- decode: arch, size, context_len, batch_size, device, dtype, ms_per_token, ms_p10, ms_p90,
          kv_cache_mb
- curves: job_id, key, step, tokens, wall_s, value
- jobs / latest: the queue listing and the last metric value per (job, key)
"""

from __future__ import annotations

import math
import re
import time

import numpy as np
import pandas as pd

from dashboard import stats
from dashboard.scaling import (  # noqa: F401 (the iso-depth scaling law, re-exported: dashboard/scaling.py)
    compare_forms,
    compute_optimal,
    fit_iso_depth,
    fit_law,
    recurrence_worth,
)
from dashboard.variants import MISSING, variant_info, with_variants
from orchestrator.states import JobStatus

NOISE_THRESHOLD = 0.01
FLOP_TOLERANCE = 0.05  # runs whose training FLOPs differ by less than this fraction are at equal compute
# columns that identify a configuration; the seed is deliberately not one of them
CONFIG_COLUMNS = ("grid", "variant_id", "variant_label", "recipe", "size", "budget_tokens", "budget_time_s")
JOB_STATES = tuple(status.value for status in JobStatus)  # in the order a job moves through them
DEPTH_METRIC = re.compile(r"^val_loss@(\d+)$")  # validation loss at N loops, recorded during training


def budget_labels(runs: pd.DataFrame) -> list[str]:
    """A short label per run for its budget: '2M tokens', '3e+15 FLOPs', '60 s', or 'time of #12'."""
    out = []
    for r in runs.itertuples(index=False):
        ref = getattr(r, "match_time_of", None)
        if present(ref):
            out.append(f"time of #{int(ref)}")
        elif present(getattr(r, "budget_flops", None)):
            out.append(f"{r.budget_flops:.3g} FLOPs")
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


# ---------------------------------------------------------------- comparisons against a reference


def default_reference(labels) -> str | None:
    """The reference a comparison starts from when nobody chose one: parcae's plainest variant."""
    return _pick_reference(labels, None)


def _pick_reference(labels, reference: str | None) -> str | None:
    """The reference variant label: the one asked for if present, else the variant of that recipe with
    the fewest overrides (labels read "recipe · key=value ..."), tried for `reference` and then for
    `parcae` (a grid that sets e.g. seq_len labels every run "parcae · seq_len=64"); else the first."""
    labels = sorted({r for r in labels if present(r)})
    for wanted in (reference, "parcae"):
        if wanted is None:
            continue
        if wanted in labels:
            return wanted
        of_recipe = [label for label in labels if label.split(" · ")[0] == wanted]
        if of_recipe:
            return min(of_recipe, key=lambda label: (label.count(" · "), label))
    return labels[0] if labels else None


def _versus_reference(
    df: pd.DataFrame,
    block: list[str],
    reference: str | None,
    threshold: float,
    value: str,
    noise: stats.NoiseFloor | None,
    delta: float,
) -> tuple[pd.DataFrame, list[str], str | None]:
    """Seeds side by side per variant within each block (rows that are comparable), and each
    variant's mean against the reference variant's mean in the same block, with a 95 % interval.

    Returns (table, per-seed column names, reference label). The table has the block columns,
    variant_id, variant_label, recipe, one column per seed, mean, std, n_seeds, n_ref (the reference's
    seeds), diff, ci_low, ci_high, method (`stats.difference_interval`), verdict
    (`stats.interval_verdict`) and seeds_needed (per side, to resolve `delta` at the noise floor),
    sorted by block with the reference first in each block.
    """
    keys = [*block, "variant_id"]
    reference = _pick_reference(df["variant_label"], reference)
    per_seed = df.groupby([*keys, "seed"], dropna=False)[value].mean().unstack("seed")
    agg = df.groupby(keys, dropna=False)[value].agg(["mean", "std", "count"])
    agg = agg.rename(columns={"count": "n_seeds"})
    info = df.groupby(keys, dropna=False)[["variant_label", "recipe"]].first()
    by_seed = per_seed.reindex(info.index)  # row i: the seeds of the table's row i, seed -> value
    per_seed.columns = [f"seed {int(s)}" if present(s) else "seed ?" for s in per_seed.columns]
    out = info.join(per_seed).join(agg).reset_index()
    is_ref = (out["variant_label"] == reference).to_numpy()
    ref_row = {}  # table row -> the row of its block's reference
    for rows in out.groupby(block, dropna=False, sort=False).indices.values():
        refs = [r for r in rows if is_ref[r]]
        ref_row.update({r: refs[0] for r in rows if refs})
    intervals = []
    for row in range(len(out)):
        if row not in ref_row:
            intervals.append(stats.Interval(math.nan, math.nan, math.nan, MISSING, 0, 0))
            continue
        side, ref = by_seed.iloc[row].dropna(), by_seed.iloc[ref_row[row]].dropna()
        interval = stats.difference_interval(side, ref, noise)
        if is_ref[row]:  # the reference against itself: a difference of 0, no interval to speak of
            interval = stats.Interval(0.0, math.nan, math.nan, MISSING, interval.n, interval.n_ref)
        intervals.append(interval)
    out["n_ref"] = [i.n_ref for i in intervals]
    out["diff"] = [i.diff for i in intervals]
    out["ci_low"] = [i.low for i in intervals]
    out["ci_high"] = [i.high for i in intervals]
    out["method"] = [i.method for i in intervals]
    out["verdict"] = [
        "reference" if r else stats.interval_verdict(i, threshold) for r, i in zip(is_ref, intervals)
    ]
    sigma = noise.sigma if noise is not None else math.nan
    out["seeds_needed"] = np.where(is_ref, np.nan, stats.seeds_needed(sigma, delta))
    out["_not_ref"] = ~is_ref
    out = out.sort_values([*block, "_not_ref", "variant_label"]).drop(columns=["_not_ref"])
    return out.reset_index(drop=True), list(per_seed.columns), reference


def _loop_columns(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """`best_loops` ('8' or '8/12' when seeds differ) and `loop_rule` per group of `keys`."""
    g = df.groupby(keys, dropna=False)
    out = g["eval_loops"].agg(_join_loops).to_frame("best_loops")
    out["loop_rule"] = g["loop_rule"].agg(lambda s: "/".join(sorted(set(s))))
    return out.reset_index()


# ---------------------------------------------------------------- iso-data


def iso_data_table(
    evals: pd.DataFrame,
    reference: str | None = None,
    threshold: float = NOISE_THRESHOLD,
    value: str = "eval_loss",
    noise: stats.NoiseFloor | None = None,
    delta: float = NOISE_THRESHOLD,
) -> pd.DataFrame:
    """Variants side by side at equal model size and token budget.

    One row per (size, budget_tokens, variant): a column per seed, mean, std, n_seeds, the loop
    count(s) the values were taken at (`best_loops`, '8' or '8/12' when seeds differ) and the rule
    (`loop_rule`), the difference of the mean to the reference variant's mean at the same size and
    budget (`diff`) with its 95 % interval (`ci_low`, `ci_high`, `method`, `n_ref`: the reference's
    seeds), `verdict` (reference / better / worse / not resolved; noise / better / worse by the fixed
    `threshold` only where no interval exists; — without a difference), `seeds_needed` per side to
    resolve a difference `delta` at the noise floor, and `data_worth_pct`: the difference as extra
    training data for the reference (`with_data_worth`). `reference` is a variant label (a recipe run
    without overrides is labelled by its recipe, e.g. 'parcae').

    `noise` defaults to `stats.noise_floor(evals)`. `evals` is `eval_loss_per_run(...)`; runs whose
    budget was derived from another run's time (iso-time runs) and time-budget runs are left out:
    they are not at equal data.
    """
    df = with_variants(evals)
    if "match_time_of" in df.columns:
        df = df[df["match_time_of"].isna()]
    df = df[df["budget_tokens"].notna()]
    block = ["size", "budget_tokens"]
    head = [*block, "variant_label", "recipe", "mean", "diff", "ci_low", "ci_high", "verdict", "n_seeds",
            "n_ref", "method", "seeds_needed", "data_worth_pct", "best_loops"]  # fmt: skip
    tail = ["std", "loop_rule", "variant_id"]
    if df.empty:
        return pd.DataFrame(columns=[*head, *tail])
    noise = stats.noise_floor(df, value) if noise is None else noise
    out, seed_cols, reference = _versus_reference(df, block, reference, threshold, value, noise, delta)
    out = with_data_worth(out, df, reference, value)
    out = out.merge(_loop_columns(df, [*block, "variant_id"]), on=[*block, "variant_id"], how="left")
    return out[[*head, *seed_cols, *tail]]


def with_data_worth(
    table: pd.DataFrame, runs: pd.DataFrame, reference: str | None, value: str
) -> pd.DataFrame:
    """`table` (iso-data rows) with `data_worth_pct`: each row's difference as "worth X % more training
    data", from the reference variant's L(D) fit at that size (`stats.data_fits`): the extra data the
    reference would need, at its budget, to lower its fitted loss by −diff (negative: the variant is
    worth less data than the reference). NaN where the reference has no fit (fewer than 3 budgets)."""
    _, fits = stats.data_fits(
        runs[runs["variant_label"] == reference], value
    )  # only the reference's fit is used
    refs = table.loc[table["variant_label"] == reference].drop_duplicates("size")
    ref_ids = dict(zip(refs["size"], refs["variant_id"]))
    worth = []
    rows = zip(table["size"], table["budget_tokens"], table["diff"], table["variant_label"])
    for size, tokens, diff, label in rows:
        fit = fits.get((size, ref_ids.get(size)))
        usable = fit is not None and label != reference and present(diff)
        worth.append(fit.worth_pct(-diff, tokens) if usable else math.nan)
    return table.assign(data_worth_pct=worth)


def _join_loops(s: pd.Series):
    vals = sorted({int(v) for v in s.dropna()})
    return "/".join(str(v) for v in vals) if vals else None


def iso_data_matrix(table: pd.DataFrame, value: str = "mean") -> pd.DataFrame:
    """The iso-data table as a paper table: rows (size, budget_tokens), one column per variant."""
    if table.empty:
        return pd.DataFrame()
    m = table.pivot_table(
        index=["size", "budget_tokens"], columns="variant_label", values=value, dropna=False
    )
    labels = list(dict.fromkeys(table["variant_label"]))  # keep the table's order (reference first)
    return m.reindex(columns=labels)


# ---------------------------------------------------------------- iso-FLOP


def flop_classes(runs: pd.DataFrame, tolerance: float = FLOP_TOLERANCE) -> pd.Series:
    """A class number per run such that runs of one class are at equal training compute.

    Within each size, runs are sorted by `train_flops`; a class starts at its smallest run and takes
    every following run whose FLOPs are at most (1 + tolerance) times that, so a class never spans
    more than the tolerance. Runs without FLOPs get no class (NaN).
    """
    classes = pd.Series(np.nan, index=runs.index, dtype=float)
    has = runs[runs["train_flops"].notna()] if not runs.empty else runs
    next_class = 0
    for _, group in has.groupby("size", dropna=False, sort=True):
        anchor = None
        for idx, flops in group["train_flops"].sort_values(kind="stable").items():
            if anchor is None or flops > anchor * (1 + tolerance):
                anchor, next_class = flops, next_class + 1
            classes[idx] = next_class
    return classes


def _with_flop_classes(evals: pd.DataFrame, tolerance: float) -> pd.DataFrame:
    """Runs that have training FLOPs, with `flop_class` and `flops` (the mean of their class)."""
    df = with_variants(evals)
    if df.empty or "train_flops" not in df.columns:
        return df.iloc[0:0].assign(flop_class=[], flops=[])
    df = df[df["train_flops"].notna()].copy()
    df["flop_class"] = flop_classes(df, tolerance)
    df["flops"] = df.groupby("flop_class")["train_flops"].transform("mean")
    return df


def iso_flop_table(
    evals: pd.DataFrame,
    reference: str | None = None,
    tolerance: float = FLOP_TOLERANCE,
    threshold: float = NOISE_THRESHOLD,
    value: str = "eval_loss",
    noise: stats.NoiseFloor | None = None,
    delta: float = NOISE_THRESHOLD,
) -> pd.DataFrame:
    """Variants side by side at equal training compute, as `iso_data_table` does at equal tokens.

    Runs of one size whose training FLOPs lie within `tolerance` of each other form a block
    (`flop_classes`); `flops` is the block's mean. Per variant in a block: a column per seed, mean,
    std, n_seeds, the variant's mean FLOPs and tokens (a cheaper variant trained more tokens), the
    difference to the reference variant of the block with its interval, n per side, verdict and
    seeds_needed as in `iso_data_table`. Runs without FLOPs are left out; iso-time and FLOP-budget runs
    are in (compute is what is matched here). `noise` defaults to `stats.noise_floor(evals)` (seeds at
    one size and token budget).
    """
    df = _with_flop_classes(evals, tolerance)
    block = ["size", "flops"]
    head = [*block, "variant_label", "recipe", "mean", "diff", "ci_low", "ci_high", "verdict", "n_seeds",
            "n_ref", "method", "seeds_needed", "best_loops"]  # fmt: skip
    tail = ["train_flops", "tokens", "std", "loop_rule", "variant_id"]
    if df.empty:
        return pd.DataFrame(columns=[*head, *tail])
    noise = stats.noise_floor(evals, value) if noise is None else noise
    out, seed_cols, _ = _versus_reference(df, block, reference, threshold, value, noise, delta)
    keys = [*block, "variant_id"]
    spent = df.groupby(keys, dropna=False)[["train_flops", "tokens"]].mean().reset_index()
    out = out.merge(spent, on=keys, how="left").merge(_loop_columns(df, keys), on=keys, how="left")
    return out[[*head, *seed_cols, *tail]]


def iso_flop_curve(
    evals: pd.DataFrame, tolerance: float = FLOP_TOLERANCE, value: str = "eval_loss"
) -> pd.DataFrame:
    """Loss against training FLOPs per variant: one point per (variant, FLOP class) with the mean
    FLOPs, the mean loss over seeds and its min–max spread; a variant trained at several budgets
    traces a curve."""
    cols = ["variant_id", "variant_label", "recipe", "size", "train_flops", "mean", "min", "max", "n_seeds"]
    df = _with_flop_classes(evals, tolerance)
    if df.empty:
        return pd.DataFrame(columns=cols)
    keys = ["variant_id", "size", "flop_class"]
    g = df.groupby(keys, dropna=False)
    out = g[["variant_label", "recipe"]].first()
    out["train_flops"] = g["train_flops"].mean()
    stats = g[value].agg(["mean", "min", "max", "count"]).rename(columns={"count": "n_seeds"})
    out = out.join(stats).reset_index()
    return out[cols].sort_values(["variant_label", "size", "train_flops"]).reset_index(drop=True)


# ---------------------------------------------------------------- loss by architecture


def by_architecture(evals: pd.DataFrame, x: str, color: str, value: str = "eval_loss") -> pd.DataFrame:
    """One point per variant for a chart of loss against an architecture column `x`, coloured by
    another column `color`: the variant's `x` and `color` values, mean over seeds, std, min, max and
    n_seeds. Sorted by colour then x, so a line per colour reads left to right.

    Raises ValueError naming a column the frame does not have.
    """
    df = with_variants(evals)
    for role, col in (("x", x), ("color", color)):
        if col not in df.columns:
            raise ValueError(f"{role} = {col!r}: not a column of the runs; accepted: {', '.join(df.columns)}")
    cols = list(
        dict.fromkeys(["variant_id", "variant_label", x, color, "mean", "std", "min", "max", "n_seeds"])
    )
    if df.empty:
        return pd.DataFrame(columns=cols)
    stats = df.groupby("variant_id", dropna=False)[value].agg(["mean", "std", "min", "max", "count"])
    stats = stats.rename(columns={"count": "n_seeds"})
    info = df.groupby("variant_id", dropna=False)[list(dict.fromkeys(["variant_label", x, color]))].first()
    out = info.join(stats).reset_index()
    return out[cols].sort_values([color, x, "variant_label"], na_position="last").reset_index(drop=True)


# ---------------------------------------------------------------- iso-time


def iso_time_pairs(
    runs: pd.DataFrame, threshold: float = NOISE_THRESHOLD, noise: stats.NoiseFloor | None = None
) -> pd.DataFrame:
    """Pairs of runs whose training times were matched by a derived budget.

    A run whose budget is {"match_time_of": J} trained for the time run J took; both finished
    their LR decay, so their final validation losses are comparable. One row per matched run, with
    both variants, both times, both token counts, both final losses, `diff` = run − reference, its
    interval (one run per side: only the noise floor `noise` gives one, see
    `stats.difference_interval`) and the verdict.
    """
    cols = ["size", "variant_label", "ref_variant_label", "seed", "ref_seed", "final_val_loss",
            "ref_final_val_loss", "diff", "ci_low", "ci_high", "verdict", "method", "train_seconds",
            "ref_train_seconds", "tokens", "ref_tokens", "job_id", "ref_job_id", "recipe", "ref_recipe",
            "variant_id", "ref_variant_id"]  # fmt: skip
    if runs.empty or "match_time_of" not in runs.columns:
        return pd.DataFrame(columns=cols)
    runs = with_variants(runs)
    a = runs[runs["match_time_of"].notna()].copy()
    if a.empty:
        return pd.DataFrame(columns=cols)
    a["ref_job_id"] = a["match_time_of"].astype("int64")
    ref = runs[["job_id", "recipe", "variant_id", "variant_label", "seed", "train_seconds", "tokens",
                "final_val_loss"]]  # fmt: skip
    ref = ref.rename(columns={c: f"ref_{c}" for c in ref.columns})
    out = a.merge(ref, on="ref_job_id", how="left")
    intervals = [
        stats.difference_interval(pd.Series([loss], dtype=float), pd.Series([ref_loss], dtype=float), noise)
        for loss, ref_loss in zip(out["final_val_loss"], out["ref_final_val_loss"])
    ]
    out["diff"] = [i.diff for i in intervals]
    out["ci_low"] = [i.low for i in intervals]
    out["ci_high"] = [i.high for i in intervals]
    out["method"] = [i.method for i in intervals]
    out["verdict"] = [stats.interval_verdict(i, threshold) for i in intervals]
    order = ["size", "ref_variant_label", "variant_label", "seed"]
    return out[cols].sort_values(order).reset_index(drop=True)


def iso_time_summary(
    pairs: pd.DataFrame,
    threshold: float = NOISE_THRESHOLD,
    noise: stats.NoiseFloor | None = None,
    delta: float = NOISE_THRESHOLD,
) -> pd.DataFrame:
    """Iso-time pairs over seeds: one row per (size, variant, reference variant).

    `diff` = mean final loss of the variant's runs − mean of their reference runs (a reference run
    matched twice counts once), with its interval: paired by seed when both sides have the same seeds,
    as `stats.difference_interval` says; `diff_std` is the spread of the per-pair differences.
    """
    keys = ["size", "variant_label", "ref_variant_label"]
    cols = [*keys, "final_val_loss", "ref_final_val_loss", "diff", "ci_low", "ci_high", "verdict", "n_seeds",
            "n_ref", "method", "seeds_needed", "diff_std", "n_pairs"]  # fmt: skip
    if pairs.empty:
        return pd.DataFrame(columns=cols)
    sigma = noise.sigma if noise is not None else math.nan
    rows = []
    for _, group in pairs.groupby(["size", "variant_id", "ref_variant_id"], dropna=False, sort=True):
        side = group.dropna(subset=["seed"]).groupby("seed")["final_val_loss"].mean()
        ref = group.drop_duplicates("ref_job_id").dropna(subset=["ref_seed"])
        ref = ref.groupby("ref_seed")["ref_final_val_loss"].mean()
        interval = stats.difference_interval(side, ref, noise)
        first = group.iloc[0]
        rows.append(dict(size=first["size"], variant_label=first["variant_label"],
                         ref_variant_label=first["ref_variant_label"], final_val_loss=side.mean(),
                         ref_final_val_loss=ref.mean(), diff=interval.diff, ci_low=interval.low,
                         ci_high=interval.high, verdict=stats.interval_verdict(interval, threshold),
                         n_seeds=interval.n, n_ref=interval.n_ref, method=interval.method,
                         seeds_needed=stats.seeds_needed(sigma, delta), diff_std=group["diff"].std(),
                         n_pairs=int(group["diff"].count())))  # fmt: skip
    return pd.DataFrame(rows, columns=cols)


def wall_time_curves(curves: pd.DataFrame, runs: pd.DataFrame, key: str = "val_loss") -> pd.DataFrame:
    """Loss against training seconds for runs of different lengths.

    Each run's LR schedule decays over its own budget, so a point in the middle of a longer run is
    *not decayed* and sits above where a run of that length would end; only the last point of a
    finished run is a decayed result. `point` says which.
    """
    cols = ["job_id", "series", "variant_label", "recipe", "size", "seed", "wall_s", "value", "point"]
    c = curves[(curves["key"] == key) & curves["wall_s"].notna()] if not curves.empty else curves
    if c.empty:
        return pd.DataFrame(columns=cols)
    info = with_variants(runs)[["job_id", "variant_label", "recipe", "size", "seed", "status"]]
    c = c.merge(info, on="job_id", how="inner").sort_values(["job_id", "wall_s"])
    c["series"] = [f"{v} · {s} · seed {int(sd) if present(sd) else '?'} · #{j}"
                   for v, s, sd, j in zip(c["variant_label"], c["size"], c["seed"], c["job_id"])]  # fmt: skip
    last = c.groupby("job_id")["wall_s"].transform("max") == c["wall_s"]
    c["point"] = np.where(last & (c["status"] == JobStatus.SUCCEEDED), "final (decayed)", "not decayed")
    return c[cols].reset_index(drop=True)


# ---------------------------------------------------------------- depth


def _per_variant(df: pd.DataFrame, value: str, by: list[str], name: str = "recipe") -> pd.DataFrame:
    """`seed_aggregate` over seeds of each variant and `by`, with the variant's label, recipe, size
    and architecture columns alongside (for colouring and filtering)."""
    df = with_variants(df, name)
    agg = seed_aggregate(df, value, by=["variant_id", *by])
    info = variant_info(df, name).drop(columns=[c for c in by if c != "variant_id"], errors="ignore")
    return agg.merge(info.reset_index(), on="variant_id", how="left")


def depth_curves(depth: pd.DataFrame, value: str = "val_loss") -> pd.DataFrame:
    """Validation loss against inference loop count per variant: mean over seeds and the spread.

    `inference_depth` = n_prelude + n_recurrent · loops + n_coda, the layers a token passes through
    at that loop count (missing without the architecture columns).
    """
    out = _per_variant(depth, value, by=["loops"])
    if {"n_prelude", "n_recurrent", "n_coda"} <= set(out.columns):
        out["inference_depth"] = out["n_prelude"] + out["n_recurrent"] * out["loops"] + out["n_coda"]
    else:
        out["inference_depth"] = np.nan
    return out.sort_values(["variant_label", "loops"]).reset_index(drop=True)


def depth_wide(curves: pd.DataFrame) -> pd.DataFrame:
    """The depth curves as a table: one row per variant, one column per inference loop count."""
    if curves.empty:
        return pd.DataFrame()
    wide = curves.pivot_table(index=["variant_label", "size"], columns="loops", values="mean").reset_index()
    wide.columns = [c if isinstance(c, str) else f"{int(c)} loops" for c in wide.columns]
    return wide


def round_delta_curves(deltas: pd.DataFrame, loops: int | None = None) -> pd.DataFrame:
    """Relative hidden-state change per round, per variant (mean and spread over seeds).

    `loops` picks the forward pass's loop count; None keeps every count.
    """
    d = deltas if loops is None or deltas.empty else deltas[deltas["loops"] == loops]
    return _per_variant(d, "rel_change", by=["loops", "round"])


def split_first_round(curves: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(round 1, rounds 2 and later) of `round_delta_curves`.

    Round 1 is the change from the random initial state h0, set by h0's scale rather than by how
    the recurrence converges, and is often ten times the others: drawn on the same axis it flattens
    every later round. The pages draw the two parts in separate panels.
    """
    if curves.empty:
        return curves, curves
    first = curves["round"] == 1
    return curves[first].reset_index(drop=True), curves[~first].reset_index(drop=True)


# ---------------------------------------------------------------- decode and throughput


def decode_table(decode: pd.DataFrame, reference: str | None = None) -> pd.DataFrame:
    """ms/token and KV-cache MB per variant × context × batch, with ratios to the reference variant
    (a label; a bench without a variant is labelled by its arch) at the same size, context, batch,
    device and dtype (NaN where the reference was not run)."""
    where = ["size", "context_len", "batch_size", "device", "dtype"]
    vals = ["ms_per_token", "ms_p10", "ms_p90", "kv_cache_mb"]
    lead = ["variant_label", "arch"]
    if decode.empty:
        return pd.DataFrame(columns=[*lead, *where, *vals, "ms_ratio", "kv_ratio", "variant_id"])
    d = with_variants(decode, name="arch")
    t = d.groupby(["variant_id", *where], dropna=False)[vals].mean()
    t = d.groupby(["variant_id", *where], dropna=False)[lead].first().join(t).reset_index()
    reference = _pick_reference(t["variant_label"], reference)
    ref = t.loc[t["variant_label"] == reference, [*where, "ms_per_token", "kv_cache_mb"]]
    ref = ref.rename(columns={"ms_per_token": "_ref_ms", "kv_cache_mb": "_ref_kv"}).drop_duplicates(where)
    t = t.merge(ref, on=where, how="left")
    t["ms_ratio"] = t["ms_per_token"] / t["_ref_ms"]
    t["kv_ratio"] = t["kv_cache_mb"] / t["_ref_kv"].replace(0, np.nan)
    t = t.sort_values(["variant_label", *where])
    return t[[*lead, *where, *vals, "ms_ratio", "kv_ratio", "variant_id"]].reset_index(drop=True)


def throughput_table(runs: pd.DataFrame, reference: str | None = None) -> pd.DataFrame:
    """Training tokens/s per variant (mean over runs) and the ratio to the reference variant at the
    same size; the achieved FLOP/s and model-FLOPs utilisation alongside when they were recorded."""
    cols = ["variant_label", "recipe", "size", "tokens_per_s", "std", "n_runs", "ratio",
            "achieved_flops_per_s", "mfu", "variant_id"]  # fmt: skip
    r = runs[runs["tokens_per_s"].notna()] if not runs.empty else runs
    if r.empty:
        return pd.DataFrame(columns=cols)
    r = with_variants(r)
    for col in ("achieved_flops_per_s", "mfu"):
        if col not in r.columns:
            r[col] = np.nan
    g = r.groupby(["variant_id", "size"], dropna=False)
    t = (
        g["tokens_per_s"]
        .agg(["mean", "std", "count"])
        .rename(columns={"mean": "tokens_per_s", "count": "n_runs"})
    )
    t = g[["variant_label", "recipe"]].first().join(t).join(g[["achieved_flops_per_s", "mfu"]].mean())
    t = t.reset_index()
    reference = _pick_reference(t["variant_label"], reference)
    ref = t[t["variant_label"] == reference].drop_duplicates("size").set_index("size")["tokens_per_s"]
    t["ratio"] = t["tokens_per_s"] / t["size"].map(ref)
    return t[cols].sort_values(["size", "variant_label"]).reset_index(drop=True)


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


def points_per_curve(n_runs: int, total: int = 60_000, most: int = 500, least: int = 20) -> int:
    """How many points to read per curve so that every selected run is drawn: `total` points shared
    among the runs, between `least` (a curve still has a shape) and `most` (the per-curve cap)."""
    if n_runs <= 0:
        return most
    return int(max(least, min(most, total // n_runs)))


def train_depth_curves(curves: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """Validation loss at several loop counts during training (`val_loss@N` metrics), per run.

    One row per (run, loop count, evaluation): job_id, `run` (a label: variant · seed · #id),
    `eval_loops` (N), step, tokens, wall_s, value; other metrics are ignored.
    """
    cols = ["job_id", "run", "eval_loops", "step", "tokens", "wall_s", "value"]
    if curves.empty:
        return pd.DataFrame(columns=cols)
    loops = curves["key"].str.extract(DEPTH_METRIC)[0]
    c = curves[loops.notna()].assign(eval_loops=pd.to_numeric(loops[loops.notna()]).astype(int))
    if c.empty:
        return pd.DataFrame(columns=cols)
    info = with_variants(runs)[["job_id", "variant_label", "seed"]]
    c = c.merge(info, on="job_id", how="left")
    seeds = [f"seed {int(s)}" if present(s) else "seed ?" for s in c["seed"]]
    c["run"] = [f"{v} · {s} · #{j}" for v, s, j in zip(c["variant_label"], seeds, c["job_id"])]
    return c[cols].sort_values(["job_id", "eval_loops", "step"]).reset_index(drop=True)


def train_depth_last(depth_curves: pd.DataFrame) -> pd.DataFrame:
    """The last evaluation of each run as a table: one row per run, a column per loop count
    (`val_loss@N`), and the tokens it was measured at."""
    if depth_curves.empty:
        return pd.DataFrame()
    last = depth_curves.sort_values("step").groupby(["job_id", "run", "eval_loops"]).tail(1)
    wide = last.pivot_table(index=["job_id", "run"], columns="eval_loops", values="value").reset_index()
    wide.columns = [c if isinstance(c, str) else f"val_loss@{int(c)}" for c in wide.columns]
    tokens = last.groupby("job_id")["tokens"].max()
    wide.insert(2, "tokens", wide["job_id"].map(tokens))
    return wide


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
