"""Adaptive compute: loss against compute per exit rule, and the rounds an exit rule saves at equal loss.

Inputs as `orchestrator.frames` reads them: `evals` (one row per adaptive-job cell: train_job_id,
seed, size, the variant columns, config, rule, threshold, kv_strategy, kv_m, changes_function,
max_rounds, val_loss, mean_rounds, equivalent_rounds, kv_mib, kv_mib_needed; workers/adaptive/job.py) and
`depth` (the depth sweeps: train_job_id, seed, variant columns, loops, val_loss).

- `frontier`: per variant, rule, KV strategy and threshold the mean over seeds of the loss, mean rounds
  per token and equivalent rounds (the FLOPs spent, the rule's readouts included, as the fixed depth
  that spends as much), sorted by compute: one line per (variant, rule, strategy).
- `reference_curve`: the fixed-depth curve of each variant from its depth sweeps (mean over seeds),
  with the noise band `band` around it (`equal_band`).
- `rounds_saved`: per variant, rule and strategy, the cheapest threshold whose loss is *equal* to the
  fixed depth max_rounds (the same seeds, the same validation tokens): equal = the difference of the
  mean losses is inside the measured noise floor's interval (`equal_band`: t sigma sqrt(1/n + 1/n_ref),
  `analysis.stats.noise_floor`), or below it (equal or better); where no noise floor was measured (no
  repeated seeds), under the fixed threshold (default 0.01). `rounds_saved` = max_rounds - mean rounds,
  `compute_saved` = max_rounds - equivalent rounds (the rule's readouts charged), and `vs_fixed` =
  the shallowest fixed depth of the sweep that is itself equal, minus the equivalent rounds: what the
  rule saves against simply running fewer rounds (negative: the shallower fixed model is cheaper).
  The reference is the trained model's fixed depth; `first` and `last_m` change the function even
  without exits, and their rows say so (`changes_function`).
- `accuracy_frontier`: task accuracy against the same compute (measured on the validation text).
- `kv_table`: KV MiB (allocated by a static cache, and needed) against loss per strategy.
- `exit_histogram`: the exit-round distribution of a cell by position or by loss bucket, as shares;
  `first_rule_cell`: the cell a page shows it for first.

Pure pandas / numpy: no Streamlit, no database. Tested in tests/analysis/test_adaptive.py.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from looplab.analysis.stats import FLOOR, LEVEL, NoiseFloor
from looplab.analysis.variants import with_variants
from looplab.model.exit_names import EMULATED, FIXED, CellKey, KVStrategy, strategy_label

EQUAL_THRESHOLD = 0.01  # loss difference counted as equal where no interval exists
POINT = ["variant_id", "size", "rule", "kv_strategy", "kv_m", "threshold"]
LINE = ["variant_id", "size", "rule", "kv_strategy", "kv_m"]
# what `rounds_saved` says a line at its cheapest equal threshold spends and saves (module docstring)
SAVINGS = [
    "mean_rounds",
    "equivalent_rounds",
    "rounds_saved",
    "compute_saved",
    "fixed_equal_depth",
    "vs_fixed",
]


def _variants(df: pd.DataFrame) -> pd.DataFrame:
    df = with_variants(df)
    if "kv_m" in df.columns:  # NULL for every strategy but last_m: a group key, not missing data
        df["kv_m"] = df["kv_m"].fillna(0).astype(int)
    if "threshold" in df.columns:
        df["threshold"] = df["threshold"].astype(float).fillna(-1.0)  # the fixed cells: no threshold
    return df


def _strategy_labels(df: pd.DataFrame) -> list[str]:
    """The strategy of each row as its cells name it (`last_m2`; `model.exit_names.strategy_label`)."""
    return [strategy_label(s, m) for s, m in zip(df["kv_strategy"], df["kv_m"])]


def _point_means(
    df: pd.DataFrame,
    means: list[str],
    first: list[str],
    count: str | None = None,
    keys: list[str] | None = None,
) -> pd.DataFrame:
    """One row per cell point (`keys`) of labelled cells: the mean over seeds of `means`, the value of
    `first` (the same in every seed), `n_seeds` (the seeds with a `count`) when `count` is given, the
    strategy's label, and the threshold (NaN for the fixed depth, which stores -1)."""
    g = df.groupby(keys or POINT, sort=False, dropna=False)
    out = g[means].mean()
    if count is not None:
        out["n_seeds"] = g[count].count()
    out = out.join(g[first].first()).reset_index()
    out["strategy"] = _strategy_labels(out)
    out["threshold"] = out["threshold"].where(out["threshold"] >= 0)
    return out


def frontier(evals: pd.DataFrame) -> pd.DataFrame:
    """Per (variant, size, rule, kv_strategy, kv_m, threshold): the mean over seeds of val_loss,
    mean_rounds and equivalent_rounds and the seeds counted, with the variant's label, max_rounds and
    changes_function; sorted by variant, rule, strategy and mean rounds."""
    cols = [
        *POINT,
        "variant_label",
        "strategy",
        "max_rounds",
        "changes_function",
        "val_loss",
        "mean_rounds",
        "equivalent_rounds",
        "n_seeds",
    ]
    if evals.empty:
        return pd.DataFrame(columns=cols)
    means = ["val_loss", "mean_rounds", "equivalent_rounds"]
    out = _point_means(
        _variants(evals), means, ["variant_label", "max_rounds", "changes_function"], "val_loss"
    )
    return out.sort_values(["variant_label", "rule", "strategy", "mean_rounds"])[cols].reset_index(drop=True)


def equal_band(
    noise: NoiseFloor | None, n: int, n_ref: int | None = None, threshold: float = EQUAL_THRESHOLD
) -> tuple[float, str]:
    """(half-width, method) of the band inside which the difference of two mean losses, over `n` and
    `n_ref` seeds (default n), counts as equal: the measured noise floor's interval t_{dof} sigma
    sqrt(1/n + 1/n_ref) (`analysis.stats`), else the fixed `threshold`. Both losses are of one
    trained model on one validation set, so what separates them from "equal" is the seed noise of
    the training, which the noise floor measures."""
    n_ref = n if n_ref is None else n_ref
    if noise is None or not noise.measured or min(n, n_ref) < 1:
        return threshold, f"threshold {threshold:g}"
    half = scipy_stats.t.ppf((1 + LEVEL) / 2, noise.dof) * noise.sigma * math.sqrt(1 / n + 1 / n_ref)
    return float(half), FLOOR


def reference_curve(
    depth: pd.DataFrame, noise: NoiseFloor | None = None, threshold: float = EQUAL_THRESHOLD
) -> pd.DataFrame:
    """The fixed-depth curve per variant (mean val_loss over seeds per loop count) with `band` =
    `equal_band` at its seed count, and `low` / `high` = mean -/+ band."""
    cols = ["variant_id", "variant_label", "size", "loops", "val_loss", "n_seeds", "band", "low", "high"]
    if depth.empty:
        return pd.DataFrame(columns=cols)
    df = with_variants(depth)
    g = df.groupby(["variant_id", "size", "loops"], sort=True)
    out = g["val_loss"].mean().to_frame()
    out["n_seeds"] = g["val_loss"].count()
    out = out.join(g[["variant_label"]].first()).reset_index()
    out["band"] = [equal_band(noise, int(n), threshold=threshold)[0] for n in out["n_seeds"]]
    out["low"], out["high"] = out["val_loss"] - out["band"], out["val_loss"] + out["band"]
    return out[cols]


def _per_seed(df: pd.DataFrame, value: str = "val_loss") -> pd.Series:
    """`value` indexed by seed (a seed evaluated twice: its mean)."""
    return df.groupby("seed")[value].mean()


def _equal(side: pd.Series, reference: pd.Series, noise: NoiseFloor | None, threshold: float) -> dict:
    """The difference mean(side) - mean(reference) with its band; `equal` when it is no larger than the
    band's half-width (inside the band, or below it: equal or better)."""
    diff = float(side.mean() - reference.mean())
    half, method = equal_band(noise, len(side), len(reference), threshold)
    return {
        "equal": diff <= half,
        "diff": diff,
        "ci_low": diff - half,
        "ci_high": diff + half,
        "method": method,
    }


def rounds_saved(
    evals: pd.DataFrame,
    depth: pd.DataFrame,
    noise: NoiseFloor | None = None,
    threshold: float = EQUAL_THRESHOLD,
) -> pd.DataFrame:
    """Per (variant, size, rule, kv_strategy, kv_m): the cheapest threshold (fewest mean rounds) at
    equal loss to the fixed depth max_rounds, and what it saves (module docstring). The reference at
    max_rounds is the depth sweep's loss there, else the adaptive job's own `fixed | per_round` cell
    (the same forward). A line with no equal threshold has NaN savings and `threshold` missing."""
    cols = [
        "variant_label",
        "size",
        "rule",
        "strategy",
        "changes_function",
        "max_rounds",
        "reference_loss",
        "threshold",
        "val_loss",
        "diff",
        "ci_low",
        "ci_high",
        "method",
        *SAVINGS,
        "n_seeds",
        "variant_id",
    ]
    rules = evals[evals["rule"] != FIXED] if not evals.empty else evals
    if rules.empty:
        return pd.DataFrame(columns=cols)
    ev, sweep = _variants(evals), with_variants(depth) if not depth.empty else depth
    rows = []
    for key, line in _variants(rules).groupby(LINE, sort=True, dropna=False):
        variant_id, size = key[0], key[1]
        R = int(line["max_rounds"].iloc[0])
        seeds = set(line["seed"])
        ref, curve = _reference(ev, sweep, variant_id, size, R, seeds)
        row = {
            "variant_id": variant_id,
            "size": size,
            "rule": key[2],
            "max_rounds": R,
            "variant_label": line["variant_label"].iloc[0],
            "changes_function": bool(line["changes_function"].iloc[0]),
            "strategy": strategy_label(key[3], key[4]),
            "reference_loss": float(ref.mean()) if len(ref) else np.nan,
        }
        best = None
        if len(ref):
            for threshold_value, point in line.groupby("threshold"):
                judged = _equal(_per_seed(point), ref, noise, threshold)
                rounds = float(point["mean_rounds"].mean())
                if judged["equal"] and (best is None or rounds < best[1]):
                    best = (threshold_value, rounds, point, judged)
        if best is not None:
            threshold_value, rounds, point, judged = best
            eq = float(point["equivalent_rounds"].mean())
            depth_equal = _shallowest_equal(curve, ref, noise, threshold)
            row.update(
                threshold=threshold_value,
                val_loss=float(point["val_loss"].mean()),
                mean_rounds=rounds,
                equivalent_rounds=eq,
                rounds_saved=R - rounds,
                compute_saved=R - eq,
                fixed_equal_depth=depth_equal,
                vs_fixed=np.nan if depth_equal is None else depth_equal - eq,
                n_seeds=int(point["seed"].nunique()),
                **{k: v for k, v in judged.items() if k != "equal"},
            )
        rows.append(row)
    return pd.DataFrame(rows).reindex(columns=cols)


def _reference(ev: pd.DataFrame, sweep: pd.DataFrame, variant_id, size, R: int, seeds: set) -> tuple:
    """(per-seed loss of the fixed depth R, the variant's depth-sweep rows at those seeds)."""
    curve = pd.DataFrame(columns=["seed", "loops", "val_loss"])
    if not sweep.empty:
        curve = sweep[
            (sweep["variant_id"] == variant_id) & (sweep["size"] == size) & sweep["seed"].isin(seeds)
        ]
    at_r = curve[curve["loops"] == R]
    if not at_r.empty:
        return _per_seed(at_r), curve
    own = ev[
        (ev["variant_id"] == variant_id)
        & (ev["size"] == size)
        & (ev["rule"] == FIXED)
        & (ev["kv_strategy"] == KVStrategy.PER_ROUND)
        & (ev["max_rounds"] == R)
        & ev["seed"].isin(seeds)
    ]
    return _per_seed(own), curve


def _shallowest_equal(curve: pd.DataFrame, ref: pd.Series, noise, threshold: float) -> float | None:
    """The fewest loops of the depth sweep whose loss is equal to the reference, or None."""
    for loops, rows in curve.groupby("loops", sort=True):
        if _equal(_per_seed(rows), ref, noise, threshold)["equal"]:
            return float(loops)
    return None


def accuracy_frontier(tasks: pd.DataFrame, evals: pd.DataFrame, subset: str = "all") -> pd.DataFrame:
    """Task accuracy against compute: per variant, task, rule, KV strategy and threshold, the mean over
    seeds of `acc` (of `subset`, default the whole task) with the cell's mean rounds and equivalent
    rounds measured on the validation text (`evals`, joined on the adaptive job and the cell)."""
    cols = [
        "variant_label",
        "size",
        "task",
        "rule",
        "strategy",
        "threshold",
        "acc",
        "mean_rounds",
        "equivalent_rounds",
        "n_seeds",
        "variant_id",
    ]
    t = tasks[tasks["subset"] == subset] if not tasks.empty else tasks
    if t.empty or evals.empty:
        return pd.DataFrame(columns=cols)
    job = "adaptive_job_id"
    cells = evals[
        [job, "config", "rule", "threshold", "kv_strategy", "kv_m", "mean_rounds", "equivalent_rounds"]
    ]
    df = _variants(t.merge(cells, on=[job, "config"], how="inner"))
    out = _point_means(
        df, ["acc", "mean_rounds", "equivalent_rounds"], ["variant_label"], "acc", [*POINT, "task"]
    )
    return out.sort_values(["variant_label", "task", "rule", "strategy", "mean_rounds"])[cols].reset_index(
        drop=True
    )


def kv_table(evals: pd.DataFrame) -> pd.DataFrame:
    """Per variant and KV strategy: the mean over seeds of KV MiB allocated and needed, with the loss
    and mean rounds of each cell (one row per threshold), for KV MiB against loss."""
    cols = [
        "variant_label",
        "size",
        "strategy",
        "rule",
        "threshold",
        "changes_function",
        "kv_mib",
        "kv_mib_needed",
        "val_loss",
        "mean_rounds",
        "variant_id",
    ]
    if evals.empty:
        return pd.DataFrame(columns=cols)
    means = ["kv_mib", "kv_mib_needed", "val_loss", "mean_rounds"]
    out = _point_means(_variants(evals), means, ["variant_label", "changes_function"])
    return out.sort_values(["variant_label", "strategy", "val_loss"])[cols].reset_index(drop=True)


def exit_histogram(hist: pd.DataFrame, split: str) -> pd.DataFrame:
    """The exit rounds of each (variant, config) by bucket of `split` (position | loss): token counts
    summed over seeds and `share` = the count over the bucket's tokens, so each bucket's shares sum to 1;
    `bucket_label` reads "[lo, hi)"; `mean_round` = the bucket's mean exit round."""
    cols = [
        "variant_label",
        "config",
        "bucket",
        "bucket_label",
        "round",
        "count",
        "share",
        "mean_round",
        "variant_id",
    ]
    h = hist[hist["split"] == split] if not hist.empty else hist
    if h.empty:
        return pd.DataFrame(columns=cols)
    h = with_variants(h)
    keys = ["variant_id", "config", "bucket"]
    out = h.groupby([*keys, "round"], as_index=False).agg(
        count=("count", "sum"),
        lo=("bucket_lo", "first"),
        hi=("bucket_hi", "first"),
        variant_label=("variant_label", "first"),
    )
    total = out.groupby(keys)["count"].transform("sum")
    out["share"] = out["count"] / total
    out["mean_round"] = (out["round"] * out["count"]).groupby([out[k] for k in keys]).transform("sum") / total
    out["bucket_label"] = [f"[{_short(lo)}, {_short(hi)})" for lo, hi in zip(out["lo"], out["hi"])]
    return out.sort_values(["variant_label", "config", "bucket", "round"])[cols].reset_index(drop=True)


def _short(x: float) -> str:
    return "∞" if math.isinf(x) else f"{x:g}"


def emulated(evals: pd.DataFrame) -> bool:
    """Whether any of these adaptive cells had its exits emulated from separate forwards (its `config`
    ends in `model.exit_names.EMULATED`: a family without the readout at any round)."""
    return bool(len(evals)) and bool(evals["config"].str.endswith(EMULATED).any())


def first_rule_cell(configs: list[str], strategies: list[str]) -> int:
    """The index among `configs` (the cells' `config` names) of the first exit-rule cell under one of
    `strategies` (strategy labels, e.g. `last_m2`), else of the first exit-rule cell, else 0."""
    keys = [CellKey.parse(c) for c in configs]
    rules = [i for i, key in enumerate(keys) if not key.is_fixed]
    return next((i for i in rules if keys[i].strategy_label in strategies), rules[0] if rules else 0)


def best_at_loss(evals: pd.DataFrame, strategy: str = "per_round", levels=None) -> pd.DataFrame:
    """Learned and post-hoc rules on one axis: at each loss level (default: every variant's fixed-depth
    loss, the mean over seeds), among every cell under `strategy` of every variant whose mean loss is
    at most the level, the one that spends the fewest equivalent rounds (FLOPs, the readouts charged),
    with its interval over seeds (mean -/+ t sd / sqrt(n) at LEVEL; NaN with one seed). A `gate` cell is
    a learned exit (the variant trained with a gate), the others post hoc. One row per level."""
    cols = ["level", "variant_label", "rule", "threshold", "val_loss", "mean_rounds", "equivalent_rounds"]
    cols += ["rounds_low", "rounds_high", "n_seeds"]
    df = _variants(evals) if not evals.empty else evals
    if df.empty:
        return pd.DataFrame(columns=cols)
    df = df[[s == strategy for s in _strategy_labels(df)]]
    g = df.groupby(POINT, sort=False, dropna=False)
    points = g[["val_loss", "mean_rounds", "equivalent_rounds"]].mean()
    points["n_seeds"] = g["equivalent_rounds"].count()
    points["sd"] = g["equivalent_rounds"].std()
    points = points.join(g[["variant_label"]].first()).reset_index()
    if levels is None:
        levels = sorted(points.loc[points["rule"] == FIXED, "val_loss"].unique())
    rows = []
    for level in levels:
        ok = points[points["val_loss"] <= level + 1e-12]
        if ok.empty:
            continue
        best = ok.sort_values(["equivalent_rounds", "val_loss"]).iloc[0]
        n = int(best["n_seeds"])
        half = scipy_stats.t.ppf((1 + LEVEL) / 2, n - 1) * best["sd"] / math.sqrt(n) if n > 1 else math.nan
        threshold = best["threshold"] if best["threshold"] >= 0 else None
        rows.append(
            {
                "level": float(level),
                **{
                    k: best[k]
                    for k in ("variant_label", "rule", "val_loss", "mean_rounds", "equivalent_rounds")
                },
                "threshold": threshold,
                "rounds_low": best["equivalent_rounds"] - half,
                "rounds_high": best["equivalent_rounds"] + half,
                "n_seeds": n,
            }
        )
    return pd.DataFrame(rows, columns=cols)
