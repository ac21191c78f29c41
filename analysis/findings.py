"""The lean-recipe study's findings checked against a run of it: each claim beside this run's figure,
with a 95 % interval where the seeds allow, and whether its shape holds.

The claims, as the study states them for about 1 M tokens on `tiny` (the scale `looplab demo --study lean`
runs):
- `parcae_share`: parcae's 4 loops carry ~94-99 % of its 1→8 gain. Per seed, share = (L1 − L4) /
  (L1 − L8) of its depth sweep; the figure is the mean over seeds with a t interval; it holds when the
  mean is at least `SHARE_HOLDS` (most of the gain is reached by 4 loops).
- `parcae_best`: parcae, trained with a mean of 8 loops, is usually best at 8-12 loops: the loop count
  of the lowest mean loss over seeds (ties: the fewer loops); holds inside 8-12; the figure says how far
  8-12 is from the best, since on a flat curve a best outside the range may be a near tie.
- `fixed4_best`, `lean_best`: the fixed-4 recipes are best at their trained 4 loops and worse beyond:
  holds when the lowest mean loss is at 4 loops and every evaluated count above 4 is higher. The figure
  is the closest count above 4: its excess loss over 4 loops, with a t interval over the per-seed excesses.
- `equal_data`: at equal data the three are within ~0.002 of each other, inside the seed noise. The
  figure is the spread of their iso-data means and each difference to parcae with its interval and
  verdict, from `analysis.comparison.iso_data_table` (the Compare page's table); holds when no
  difference is resolved (no "better" or "worse").

Pure pandas: `depth` is the depth frame (`orchestrator.frames.depth`: train_job_id, recipe, seed,
loops, val_loss, variant columns), `evals` the finished runs with `comparison.eval_loss_per_run`'s loss.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from analysis import comparison
from analysis.stats import LEVEL, Verdict
from analysis.variants import MISSING, with_variants

# "most of the gain": below the claimed ~94-99 %, so that seed noise on a short run does not decide it
SHARE_HOLDS = 0.90
PARCAE_BEST = (8, 12)
TRAINED = 4  # the fixed recipes' trained loop count
RECIPES = ("parcae", "fixed4", "lean")
COLUMNS = ["key", "finding", "study", "this_run", "value", "ci_low", "ci_high", "n_seeds", "holds"]
UNRESOLVED = (Verdict.NOT_RESOLVED, Verdict.NOISE)  # verdicts under which the data cannot tell two apart


def mean_interval(values: pd.Series, level: float = LEVEL) -> tuple[float, float, float]:
    """(mean, low, high): the t interval on the mean of per-seed values; low and high NaN for one seed."""
    v = values.dropna().astype(float).to_numpy()
    if len(v) == 0:
        return math.nan, math.nan, math.nan
    mean = float(v.mean())
    if len(v) < 2:
        return mean, math.nan, math.nan
    half = float(scipy_stats.t.ppf((1 + level) / 2, len(v) - 1) * v.std(ddof=1) / math.sqrt(len(v)))
    return mean, mean - half, mean + half


def judged(holds: bool, low: float, high: float, line: float) -> str:
    """ "yes" / "no" from the estimate, "not resolved" when its 95 % interval reaches across `line` (the
    value where the shape would turn); with one seed there is no interval and the estimate decides."""
    if math.isfinite(low) and math.isfinite(high) and low <= line <= high:
        return Verdict.NOT_RESOLVED
    return "yes" if holds else "no"


def variant_of(df: pd.DataFrame, recipe: str) -> str | None:
    """The label of `recipe`'s plainest variant in `df` (the label equal to the recipe, else the one with
    the fewest overrides); None when the recipe has no row."""
    labels = sorted(set(with_variants(df).loc[lambda d: d["recipe"] == recipe, "variant_label"]))
    if not labels:
        return None
    return recipe if recipe in labels else min(labels, key=lambda label: (label.count(" · "), label))


def per_seed_curves(depth: pd.DataFrame, label: str) -> pd.DataFrame:
    """One row per seed, one column per evaluated loop count: the variant's depth-sweep loss."""
    d = with_variants(depth)
    d = d[d["variant_label"] == label].dropna(subset=["val_loss"])
    return d.groupby(["seed", "loops"])["val_loss"].mean().unstack("loops").sort_index(axis=1)


def _best(curves: pd.DataFrame) -> tuple[int, list[int]]:
    """(the loop count of the lowest mean loss, each seed's own best), ties to the fewer loops."""
    mean = curves.mean(axis=0)
    best = int(mean.index[int(np.nanargmin(mean.to_numpy()))])
    per_seed = [int(row.index[int(np.nanargmin(row.to_numpy()))]) for _, row in curves.iterrows()]
    return best, per_seed


def _fmt_interval(low: float, high: float, scale: float = 1.0, digits: int = 4, unit: str = "") -> str:
    if not (math.isfinite(low) and math.isfinite(high)):
        return "no interval: one seed"
    return f"95 % interval {low * scale:.{digits}f} to {high * scale:.{digits}f}{unit}"


def _row(
    key: str,
    finding: str,
    study: str,
    this_run: str,
    value: float = math.nan,
    ci: tuple[float, float] = (math.nan, math.nan),
    n_seeds: int = 0,
    holds: str = MISSING,
) -> dict:
    return dict(
        key=key,
        finding=finding,
        study=study,
        this_run=this_run,
        value=value,
        ci_low=ci[0],
        ci_high=ci[1],
        n_seeds=n_seeds,
        holds=holds,
    )


def _parcae_rows(depth: pd.DataFrame) -> list[dict]:
    share_finding = "parcae: 4 loops carry most of the 1→8 gain"
    best_finding = "parcae: the loop count where it is best"
    label = variant_of(depth, "parcae")
    curves = per_seed_curves(depth, label) if label else pd.DataFrame()
    if curves.empty or not {1, 4, 8} <= set(curves.columns):
        missing = "no depth sweep of parcae at 1, 4 and 8 loops"
        return [
            _row("parcae_share", share_finding, "94-99 %", missing),
            _row("parcae_best", best_finding, "8-12 loops (usually)", missing),
        ]
    gain = curves[1] - curves[8]
    shares = ((curves[1] - curves[4]) / gain).where(gain != 0)
    mean, low, high = mean_interval(shares)
    seeds = " / ".join(f"{100 * s:.1f} %" for s in shares.dropna())
    share = _row(
        "parcae_share",
        share_finding,
        "94-99 %",
        f"{100 * mean:.1f} % (per seed {seeds}; {_fmt_interval(low, high, 100, 1, ' %')})",
        mean,
        (low, high),
        int(shares.notna().sum()),
        judged(mean >= SHARE_HOLDS, low, high, SHARE_HOLDS),
    )
    best, per_seed = _best(curves)
    lo, hi = PARCAE_BEST
    seeds = " / ".join(str(b) for b in per_seed)
    mean = curves.mean(axis=0)
    inside = [c for c in curves.columns if lo <= c <= hi]
    # how far the study's range is from the best: on a flat curve a best outside it may be a near tie
    gap = f"; {lo}-{hi} loops {mean[inside].min() - mean[best]:+.4f} from the best" if inside else ""
    best_row = _row(
        "parcae_best",
        best_finding,
        f"{lo}-{hi} loops (usually)",
        f"{best} loops (per seed {seeds}{gap}; evaluated {_counts(curves)})",
        float(best),
        n_seeds=len(curves),
        holds="yes" if lo <= best <= hi else "no",
    )
    return [share, best_row]


def _counts(curves: pd.DataFrame) -> str:
    return ", ".join(str(int(c)) for c in curves.columns)


def _fixed_row(depth: pd.DataFrame, recipe: str) -> dict:
    key, finding = f"{recipe}_best", f"{recipe}: best at its trained {TRAINED} loops, worse beyond"
    study = f"best at {TRAINED} loops, worse beyond"
    label = variant_of(depth, recipe)
    curves = per_seed_curves(depth, label) if label else pd.DataFrame()
    beyond = [c for c in curves.columns if c > TRAINED]
    if curves.empty or TRAINED not in curves.columns or not beyond:
        return _row(key, finding, study, f"no depth sweep of {recipe} at {TRAINED} loops and beyond")
    best, per_seed = _best(curves)
    mean = curves.mean(axis=0)
    excess = mean[beyond] - mean[TRAINED]
    closest = int(excess.idxmin())
    value, low, high = mean_interval(curves[closest] - curves[TRAINED])
    holds = best == TRAINED and bool((excess > 0).all())
    seeds = " / ".join(str(b) for b in per_seed)
    text = (
        f"best at {best} loops (per seed {seeds}); closest above {TRAINED}: {closest} loops, "
        f"{value:+.4f} ({_fmt_interval(low, high)})"
    )
    return _row(key, finding, study, text, value, (low, high), len(curves), judged(holds, low, high, 0.0))


def _equal_data_row(evals: pd.DataFrame, threshold: float) -> dict:
    finding = "parcae, fixed4 and lean at equal data"
    study = "within ~0.002 of each other (inside the seed noise)"
    labels = {r: variant_of(evals, r) for r in RECIPES} if not evals.empty else {}
    if not labels or any(v is None for v in labels.values()):
        return _row("equal_data", finding, study, "needs finished runs of all three")
    table = comparison.iso_data_table(evals, reference=labels["parcae"], threshold=threshold)
    table = table[table["variant_label"].isin(labels.values())]
    # the block (size, budget) holding all three, the largest budget if several do
    complete = table.groupby(["size", "budget_tokens"])["variant_label"].transform("nunique") == len(RECIPES)
    table = table[complete]
    if table.empty:
        return _row("equal_data", finding, study, "no size and token budget with all three")
    table = table[table["budget_tokens"] == table["budget_tokens"].max()]
    spread = float(table["mean"].max() - table["mean"].min())
    others = table[table["variant_label"] != labels["parcae"]]
    parts = [
        f"{r.variant_label} {r.diff:+.4f} ({_fmt_interval(r.ci_low, r.ci_high)}, {r.verdict})"
        for r in others.itertuples()
    ]
    holds = all(v in UNRESOLVED for v in others["verdict"])
    text = f"spread {spread:.4f}; against {labels['parcae']}: " + "; ".join(parts)
    return _row(
        "equal_data",
        finding,
        study,
        text,
        spread,
        n_seeds=int(table["n_seeds"].min()),
        holds="yes" if holds else "no",
    )


def lean_study_findings(
    depth: pd.DataFrame, evals: pd.DataFrame, threshold: float = comparison.NOISE_THRESHOLD
) -> pd.DataFrame:
    """One row per finding (COLUMNS): key, the finding, the study's figure, this run's figure as text,
    its value with a 95 % interval (ci_low, ci_high; NaN where there is none), the seeds it rests on and
    whether the shape holds ("yes" / "no"; "not resolved" when the interval reaches across the line the
    shape turns at, `judged`; "—" without the data). `threshold` is the fixed noise
    threshold iso-data falls back to where no interval exists."""
    rows = [
        *_parcae_rows(depth),
        _fixed_row(depth, "fixed4"),
        _fixed_row(depth, "lean"),
        _equal_data_row(evals, threshold),
    ]
    return pd.DataFrame(rows, columns=COLUMNS)


def applies(runs: pd.DataFrame) -> bool:
    """Whether `runs` hold the study's three recipes (a report lists the findings then)."""
    return not runs.empty and set(RECIPES) <= set(runs["recipe"].dropna())
