"""Variants compared against a reference: at equal data (iso-data), equal training compute (iso-FLOP),
equal training time (iso-time), by architecture, and in decode and training throughput. Pure pandas,
DataFrame in, DataFrame out; the Compare and Decode pages draw what these return and the demo prints it.

Honesty rules shared by all functions:
- seeds are averaged per *variant* (recipe + size + model overrides, `analysis.variants`), never per
  recipe: two variants of one recipe are two rows everywhere;
- missing data stays missing (NaN), never 0: a variant with one seed has no std, a looped run
  without a depth sweep has no best-loop loss;
- every difference to a reference comes with a 95 % interval and n per side, and its verdict comes
  from the interval (`analysis.stats`): "better" / "worse" when it excludes 0, else "not resolved";
  the noise is measured from repeated seeds, and the fixed threshold (default 0.01 in loss) decides
  ("noise" below it) only where no interval exists (one seed per side and no replicated seeds);
- per-seed values are always shown next to the mean.

Input frames (column names as `orchestrator.frames` produces them; every frame also carries
`variant_id`, `variant_label` and the architecture columns of `analysis.variants.ARCH_COLUMNS`):
- runs:   one row per train job: job_id, grid, recipe, size, seed, status, budget_tokens,
          budget_time_s, budget_flops, match_time_of, loop_mode ("fixed" | "sampled" | "none"),
          train_loops, tokens, train_seconds, tokens_per_s, final_val_loss, train_flops, mfu, and
          optionally workers (data-parallel workers; missing: 1)
- depth:  train_job_id, recipe, size, seed, loops, val_loss     (depth_evals of each run's sweep)
- decode: arch, size, context_len, batch_size, device, dtype, ms_per_token, ms_p10, ms_p90,
          kv_cache_mb
A comparison reads the rows it is given: the pages pass the finished runs (job states are
`orchestrator.states`'; this package does not import the orchestrator).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from looplab.analysis import stats
from looplab.analysis.variants import MISSING, present, with_variants

NOISE_THRESHOLD = 0.01
FLOP_TOLERANCE = 0.05  # runs whose training FLOPs differ by less than this fraction are at equal compute


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
        stats.Verdict.REFERENCE if r else stats.interval_verdict(i, threshold)
        for r, i in zip(is_ref, intervals)
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
    head = [*block, *VERSUS_COLUMNS, "data_worth_pct", "best_loops"]
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
    seeds_needed as in `iso_data_table`. A block holding one variant only is left out (nothing to compare
    it with: a table of "—" rows read as results). Runs without FLOPs are left out; iso-time and FLOP-budget runs
    are in (compute is what is matched here). `noise` defaults to `stats.noise_floor(evals)` (seeds at
    one size and token budget).
    """
    df = _with_flop_classes(evals, tolerance)
    block = ["size", "flops"]
    head = [*block, *VERSUS_COLUMNS, "best_loops"]
    tail = ["train_flops", "tokens", "std", "loop_rule", "variant_id"]
    if not df.empty:  # a block of one variant compares nothing: only comparable pairs are listed
        df = df[df.groupby(block, dropna=False)["variant_id"].transform("nunique") > 1]
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


# A difference against a reference and its verdict, as every comparison reports it.
VERDICT_COLUMNS = ("diff", "ci_low", "ci_high", "verdict", "n_seeds", "n_ref", "method", "seeds_needed")
# What a comparison against the reference shows of each variant, after the columns that block it.
VERSUS_COLUMNS = ("variant_label", "recipe", "mean", *VERDICT_COLUMNS)
# The columns of `iso_time_pairs`: each matched run beside its reference (`ref_`).
ISO_TIME_COLUMNS = (
    "size",
    "variant_label",
    "ref_variant_label",
    "seed",
    "ref_seed",
    "final_val_loss",
    "ref_final_val_loss",
    "diff",
    "ci_low",
    "ci_high",
    "verdict",
    "method",
    "train_seconds",
    "ref_train_seconds",
    "workers",
    "ref_workers",
    "matched",
    "device_seconds",
    "ref_device_seconds",
    "tokens",
    "ref_tokens",
    "job_id",
    "ref_job_id",
    "recipe",
    "ref_recipe",
    "variant_id",
    "ref_variant_id",
)
# What of the reference run a pair shows (as `ref_<column>`).
REFERENCE_COLUMNS = (
    "job_id",
    "recipe",
    "variant_id",
    "variant_label",
    "seed",
    "train_seconds",
    "tokens",
    "final_val_loss",
    "workers",
    "device_seconds",
)


def iso_time_pairs(
    runs: pd.DataFrame, threshold: float = NOISE_THRESHOLD, noise: stats.NoiseFloor | None = None
) -> pd.DataFrame:
    """Pairs of runs whose training times were matched by a derived budget.

    A run whose budget is {"match_time_of": J} trained for the time run J took; both finished
    their LR decay, so their final validation losses are comparable. One row per matched run, with
    both variants, both times, both token counts, both final losses, `diff` = run − reference, its
    interval (one run per side: only the noise floor `noise` gives one, see
    `stats.difference_interval`) and the verdict. What was matched (`matched`, orchestrator.pairing):
    "wall seconds" at equal worker counts, "device-seconds" (train_seconds x workers, both shown as
    `device_seconds`) across worker counts.
    """
    cols = list(ISO_TIME_COLUMNS)
    if runs.empty or "match_time_of" not in runs.columns:
        return pd.DataFrame(columns=cols)
    runs = with_variants(runs)
    runs = runs.assign(workers=runs["workers"].fillna(1) if "workers" in runs.columns else 1)
    runs["device_seconds"] = runs["train_seconds"] * runs["workers"]
    a = runs[runs["match_time_of"].notna()].copy()
    if a.empty:
        return pd.DataFrame(columns=cols)
    a["ref_job_id"] = a["match_time_of"].astype("int64")
    ref = runs[list(REFERENCE_COLUMNS)]
    ref = ref.rename(columns={c: f"ref_{c}" for c in ref.columns})
    out = a.merge(ref, on="ref_job_id", how="left")
    same = out["workers"].astype(float) == out["ref_workers"].astype(float)
    matched = np.where(same, "wall seconds", "device-seconds")
    out["matched"] = pd.Series(matched, index=out.index).where(
        out["ref_workers"].notna()
    )  # unknown reference
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
    cols = [
        *keys,
        "final_val_loss",
        "ref_final_val_loss",
        *VERDICT_COLUMNS,
        "diff_std",
        "n_pairs",
    ]
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
        rows.append(
            dict(
                size=first["size"],
                variant_label=first["variant_label"],
                ref_variant_label=first["ref_variant_label"],
                final_val_loss=side.mean(),
                ref_final_val_loss=ref.mean(),
                diff=interval.diff,
                ci_low=interval.low,
                ci_high=interval.high,
                verdict=stats.interval_verdict(interval, threshold),
                n_seeds=interval.n,
                n_ref=interval.n_ref,
                method=interval.method,
                seeds_needed=stats.seeds_needed(sigma, delta),
                diff_std=group["diff"].std(),
                n_pairs=int(group["diff"].count()),
            )
        )
    return pd.DataFrame(rows, columns=cols)


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
    cols = [
        "variant_label",
        "recipe",
        "size",
        "tokens_per_s",
        "std",
        "n_runs",
        "ratio",
        "achieved_flops_per_s",
        "mfu",
        "variant_id",
    ]
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
