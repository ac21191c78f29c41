"""Is a difference between two variants real? The statistics behind every verdict of the Compare page.

- `noise_floor`: the seed-to-seed spread of the loss of each variant at one size and token budget,
  pooled over every variant that has repeated seeds into one measured noise level σ, with a 95 %
  chi-square interval on σ. A variant with one seed contributes nothing (no spread to measure).
- `difference_interval`: the difference of two variants' mean loss with a 95 % interval, and which
  method gave it (paired t, Welch t, bootstrap, the noise floor, or none: "n too small").
- `Verdict`, `interval_verdict`: better / worse when the interval excludes 0, else "not resolved"; the
  fixed loss threshold decides only where no interval exists. `ClaimVerdict`: a study's claim against
  our runs (`analysis/claims.py`).
- `seeds_needed`: seeds per side to resolve a difference δ at noise σ (a power estimate).
- `fit_loss_vs_data`, `data_fits`: L(D) = E + B·D^(−β) per variant, and with it a loss difference
  expressed as "worth X % more training data".

Pure numpy / scipy / pandas: no Streamlit, no database. Tested in tests/analysis/test_stats.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np
import pandas as pd
from scipy import optimize
from scipy import stats as scipy_stats

from looplab.analysis.variants import MISSING, with_variants
from looplab.model import fields
from looplab.model.errors import ConfigError

LEVEL = 0.95  # every interval here is a two-sided 95 % interval
POWER = 0.8  # the power `seeds_needed` plans for
BOOTSTRAP_RESAMPLES = 4000
BOOTSTRAP_SEED = 0
MIN_BUDGETS = 3  # L(D) has three parameters: fewer budgets cannot pin it down
NO_REPLICATES = "no replicated seeds: using the fixed {threshold:g} threshold"
# `Interval.method` values
PAIRED, WELCH, BOOTSTRAP, FLOOR, TOO_SMALL = "paired t", "Welch t", "bootstrap", "noise floor", "n too small"
BOOTSTRAP_AND_FLOOR = "bootstrap ∪ noise floor"


class Verdict(StrEnum):
    """What a difference to the reference variant amounts to: the only place these names are spelled.

    A member is its plain string ("not resolved", ...), so the tables, the dashboard's colours, the
    reports' CSS classes and anything compared against a string read it unchanged.
    """

    BETTER = "better"  # the interval (or, without one, the difference past the threshold) is below 0
    WORSE = "worse"
    NOT_RESOLVED = "not resolved"  # the interval reaches across 0
    NOISE = "noise"  # no interval, and the difference is under the fixed threshold
    REFERENCE = "reference"  # the row the others are compared with


class ClaimVerdict(StrEnum):
    """What our runs say about a claim of a study (`analysis.claims.judge`): a second question beside
    `Verdict` (a claim is replicated or not, a variant is better or worse), spelled here too so every
    verdict name has one home. "not resolved" is the same string in both.
    """

    REPLICATED = "replicated"  # the interval lies on the claimed side (and meets its magnitude)
    CONTRADICTED = "contradicted"  # the interval lies on the other side, or excludes the magnitude
    NOT_RESOLVED = Verdict.NOT_RESOLVED.value  # the interval reaches across the line, or there is none
    NOT_RUN = "not run"  # the runs the claim needs are missing


# ---------------------------------------------------------------- noise floor


@dataclass(frozen=True, eq=False)
class NoiseFloor:
    """The measured seed-to-seed noise of the loss.

    `sigma` is the pooled standard deviation sqrt(Σ (n_i − 1)·s_i² / Σ (n_i − 1)) over the variants
    with repeated seeds, `dof` = Σ (n_i − 1) its degrees of freedom, (`low`, `high`) the 95 %
    chi-square interval on σ. `groups` has one row per (size, budget, variant). Without a repeated
    seed anywhere `sigma` is NaN and `dof` 0.
    """

    sigma: float
    dof: int
    low: float
    high: float
    n_variants: int  # variants that contributed (two seeds or more)
    groups: pd.DataFrame = field(repr=False)

    @property
    def measured(self) -> bool:
        return self.dof > 0 and math.isfinite(self.sigma)

    def describe(self, threshold: float) -> str:
        """One line for the page: σ with its interval and where it came from, or the fallback."""
        if not self.measured:
            return NO_REPLICATES.format(threshold=threshold)
        return (
            f"σ = {self.sigma:.4f} (95 % interval {self.low:.4f}–{self.high:.4f}), the pooled "
            f"seed-to-seed spread of {self.n_variants} variant(s) with repeated seeds at one size and "
            f"token budget, {self.dof} degree(s) of freedom"
        )


def noise_floor(
    runs: pd.DataFrame, value: str = "eval_loss", by: tuple[str, ...] = ("size", "budget_tokens")
) -> NoiseFloor:
    """The seed-to-seed spread of `value` per variant within each group of `by`, pooled.

    Replicates are runs of one variant with the same `by` values (by default: one size and one token
    budget) and different seeds. Rows missing `value` or a `by` value are left out, and so are iso-time
    runs (`match_time_of`): each was trained for the time of a different reference run, so two of them
    are not replicates. A seed run twice counts once (its mean).
    """
    cols = [*by, "variant_id", "variant_label", "n_seeds", "mean", "std", "dof"]
    df = with_variants(runs) if not runs.empty else runs
    if not df.empty and "match_time_of" in df.columns:
        df = df[df["match_time_of"].isna()]
    if df.empty or value not in df.columns:
        return NoiseFloor(math.nan, 0, math.nan, math.nan, 0, pd.DataFrame(columns=cols))
    df = df.dropna(subset=[*by, value])
    per_seed = df.groupby([*by, "variant_id", "seed"], dropna=False)[value].mean().reset_index()
    g = per_seed.groupby([*by, "variant_id"], dropna=False)[value]
    groups = g.agg(["count", "mean", "std"]).rename(columns={"count": "n_seeds"}).reset_index()
    labels = df.groupby("variant_id")["variant_label"].first()
    groups["variant_label"] = groups["variant_id"].map(labels)
    groups["dof"] = (groups["n_seeds"] - 1).clip(lower=0).astype(int)
    groups = groups[cols].sort_values([*by, "variant_label"]).reset_index(drop=True)
    replicated = groups[groups["dof"] > 0]
    dof = int(replicated["dof"].sum())
    if dof == 0:
        return NoiseFloor(math.nan, 0, math.nan, math.nan, 0, groups)
    sigma = math.sqrt(float((replicated["dof"] * replicated["std"] ** 2).sum()) / dof)
    low, high = sigma_interval(sigma, dof)
    return NoiseFloor(sigma, dof, low, high, len(replicated), groups)


def sigma_interval(sigma: float, dof: int, level: float = LEVEL) -> tuple[float, float]:
    """The chi-square interval on a standard deviation estimated with `dof` degrees of freedom:
    (dof·σ²/χ²_{(1+level)/2, dof})^½ to (dof·σ²/χ²_{(1−level)/2, dof})^½."""
    tail = (1 - level) / 2
    low = sigma * math.sqrt(dof / scipy_stats.chi2.ppf(1 - tail, dof))
    high = sigma * math.sqrt(dof / scipy_stats.chi2.ppf(tail, dof))
    return low, high


# ---------------------------------------------------------------- intervals on a difference


@dataclass(frozen=True)
class Interval:
    """diff = mean(side) − mean(reference) with its interval (`low`, `high`); both NaN when no interval
    exists ("n too small"). `n` and `n_ref` are the seeds on each side."""

    diff: float
    low: float
    high: float
    method: str
    n: int
    n_ref: int

    @property
    def defined(self) -> bool:
        return math.isfinite(self.low) and math.isfinite(self.high)


def difference_interval(
    side: pd.Series,
    reference: pd.Series,
    noise: NoiseFloor | None = None,
    level: float = LEVEL,
    bootstrap_seed: int = BOOTSTRAP_SEED,
    resamples: int = BOOTSTRAP_RESAMPLES,
) -> Interval:
    """The difference of means of two samples of the loss, each a Series indexed by seed, with an interval.

    - both sides ≥ 3 seeds and the same seeds: a paired t interval on the per-seed differences (the same
      seed means the same data order and initialisation, so a seed effect shared by both sides cancels);
      different seeds: Welch's t interval;
    - a side with 2 seeds (the other ≥ 2): a seeded bootstrap of the mean difference (paired by seed
      when both sides have the same seeds). With n = 2 it can only redraw the two values it has: its
      interval is about the range they span and cannot show a spread they did not. So where a noise
      floor was measured, the interval is widened to at least the noise-floor interval below;
    - a side with 1 seed: diff ± t_{dof}·σ·√(1/n + 1/n_ref) with the pooled σ of the noise floor and
      its degrees of freedom (with one seed per side: diff ± t·σ·√2, t → 1.96 as dof grows);
      without a noise floor the interval is undefined ("n too small"), never a made-up one.
    """
    fields.number("level", level, lo=0.0, lo_open=True, hi=1.0, hi_open=True)
    side, reference = side.dropna(), reference.dropna()
    n, n_ref = len(side), len(reference)
    if n == 0 or n_ref == 0:
        return Interval(math.nan, math.nan, math.nan, MISSING, n, n_ref)
    diff = float(side.mean() - reference.mean())
    same_seeds = _same_seeds(side, reference)
    if min(n, n_ref) >= 3:
        if same_seeds:
            per_seed = side.sort_index().to_numpy() - reference.sort_index().to_numpy()
            low, high = _t_interval(diff, per_seed.std(ddof=1) / math.sqrt(n), n - 1, level)
            return Interval(diff, low, high, PAIRED, n, n_ref)
        var, var_ref = side.var(ddof=1) / n, reference.var(ddof=1) / n_ref
        se = math.sqrt(var + var_ref)
        dof = (var + var_ref) ** 2 / (var**2 / (n - 1) + var_ref**2 / (n_ref - 1)) if se > 0 else math.inf
        low, high = _t_interval(diff, se, dof, level)
        return Interval(diff, low, high, WELCH, n, n_ref)
    floor = _floor_interval(diff, n, n_ref, noise, level)
    if min(n, n_ref) == 1:
        if floor is None:
            return Interval(diff, math.nan, math.nan, TOO_SMALL, n, n_ref)
        return Interval(diff, *floor, FLOOR, n, n_ref)
    low, high = bootstrap_interval(side, reference, same_seeds, level, bootstrap_seed, resamples)
    if floor is None:
        return Interval(diff, low, high, BOOTSTRAP, n, n_ref)
    return Interval(diff, min(low, floor[0]), max(high, floor[1]), BOOTSTRAP_AND_FLOOR, n, n_ref)


def bootstrap_interval(
    side: pd.Series,
    reference: pd.Series,
    paired: bool,
    level: float = LEVEL,
    seed: int = BOOTSTRAP_SEED,
    resamples: int = BOOTSTRAP_RESAMPLES,
) -> tuple[float, float]:
    """Percentile bootstrap interval of mean(side) − mean(reference), from a generator seeded with
    `seed` (the same inputs and seed give the same interval). `paired`: seeds are redrawn together on
    both sides (the Series must share their index), else each side is redrawn on its own."""
    rng = np.random.default_rng(seed)
    tail = 100 * (1 - level) / 2
    if paired:
        per_seed = side.sort_index().to_numpy() - reference.sort_index().to_numpy()  # (n,)
        picks = rng.integers(0, len(per_seed), size=(resamples, len(per_seed)))  # (resamples, n)
        means = per_seed[picks].mean(axis=1)
    else:
        values, ref_values = side.to_numpy(), reference.to_numpy()
        picks = rng.integers(0, len(values), size=(resamples, len(values)))
        ref_picks = rng.integers(0, len(ref_values), size=(resamples, len(ref_values)))
        means = values[picks].mean(axis=1) - ref_values[ref_picks].mean(axis=1)
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(low), float(high)


def _same_seeds(side: pd.Series, reference: pd.Series) -> bool:
    seeds, ref_seeds = set(side.index), set(reference.index)
    known = all(isinstance(s, int | float | np.integer | np.floating) and s == s for s in seeds)
    return known and seeds == ref_seeds and len(seeds) == len(side) == len(reference)


def _t_interval(diff: float, se: float, dof: float, level: float) -> tuple[float, float]:
    if se == 0:
        return diff, diff
    half = scipy_stats.t.ppf((1 + level) / 2, dof) * se
    return diff - half, diff + half


def _floor_interval(
    diff: float, n: int, n_ref: int, noise: NoiseFloor | None, level: float
) -> tuple[float, float] | None:
    if noise is None or not noise.measured:
        return None
    return _t_interval(diff, noise.sigma * math.sqrt(1 / n + 1 / n_ref), noise.dof, level)


def interval_verdict(interval: Interval, threshold: float, lower_is_better: bool = True) -> Verdict | str:
    """'better' / 'worse' when the interval excludes 0, else 'not resolved'; '—' without a difference.

    Where no interval exists (one seed per side, no noise floor) the fixed `threshold` decides: 'noise'
    below it, else 'better' / 'worse'.
    """
    if not math.isfinite(interval.diff):
        return MISSING
    better, worse = (Verdict.BETTER, Verdict.WORSE) if lower_is_better else (Verdict.WORSE, Verdict.BETTER)
    if not interval.defined:
        if abs(interval.diff) < threshold:
            return Verdict.NOISE
        return better if interval.diff < 0 else worse
    if interval.high < 0:
        return better
    if interval.low > 0:
        return worse
    return Verdict.NOT_RESOLVED


# ---------------------------------------------------------------- power


def seeds_needed(sigma: float, delta: float, alpha: float = 1 - LEVEL, power: float = POWER) -> float:
    """Seeds per side to resolve a true difference `delta` at seed noise `sigma` (two unpaired samples,
    two-sided test at `alpha` with the given power): n = 2·((z_{1−α/2} + z_{power})·σ/δ)², rounded up.

    NaN when σ was not measured. Pairing by seed can only need fewer.
    """
    fields.number("delta", delta, lo=0.0, lo_open=True)  # the difference to resolve
    for name, value in (("alpha", alpha), ("power", power)):
        fields.number(name, value, lo=0.0, lo_open=True, hi=1.0, hi_open=True)
    if not (isinstance(sigma, int | float) and math.isfinite(sigma)):
        return math.nan
    z = scipy_stats.norm.ppf(1 - alpha / 2) + scipy_stats.norm.ppf(power)
    return float(
        max(1, math.ceil(2 * (z * sigma / delta) ** 2 - 1e-9))
    )  # 1e-9: float noise at exact integers


# ---------------------------------------------------------------- loss-to-data exchange rate


@dataclass(frozen=True)
class DataFit:
    """L(D) = E + B·D^(−beta) fitted to one variant's runs at several token budgets D."""

    E: float  # the loss no amount of data removes (at this size)
    B: float
    beta: float
    n_budgets: int
    n_runs: int
    rmse: float

    def loss(self, tokens) -> np.ndarray:
        return self.E + self.B * np.asarray(tokens, dtype=float) ** -self.beta

    def data_multiplier(self, loss_drop: float, tokens: float) -> float:
        """The factor m on the data D = `tokens` that lowers the fitted loss by `loss_drop`:
        L(m·D) = L(D) − ΔL, so m = (1 − ΔL / (B·D^(−β)))^(−1/β). A negative ΔL (a rise) gives m < 1;
        a drop as large as the loss data can still remove (B·D^(−β)) gives infinity."""
        reducible = self.B * float(tokens) ** -self.beta
        remaining = 1 - loss_drop / reducible
        if remaining <= 0:
            return math.inf
        return remaining ** (-1 / self.beta)

    def worth_pct(self, loss_drop: float, tokens: float) -> float:
        """`loss_drop` as "worth X % more training data" at `tokens`: 100·(m − 1)."""
        return 100 * (self.data_multiplier(loss_drop, tokens) - 1)


def fit_loss_vs_data(tokens, losses) -> DataFit:
    """Least-squares fit of L(D) = E + B·D^(−β) to runs (one point per run: its tokens and its loss).

    Refuses (ConfigError) with fewer than 3 distinct budgets: three parameters need three budgets. The
    exponent is found on a grid first (for a fixed β the model is linear in E and B), then all three
    are refined together by `scipy.optimize.least_squares` with E ≥ 0, B ≥ 0, 0 < β ≤ 4.
    """
    x = np.asarray(tokens, dtype=float)
    y = np.asarray(losses, dtype=float)
    keep = np.isfinite(x) & np.isfinite(y) & (x > 0)
    x, y = x[keep], y[keep]
    n_budgets = len(np.unique(x))
    if n_budgets < MIN_BUDGETS:
        raise ConfigError(
            f"L(D) fit: needs runs at >= {MIN_BUDGETS} token budgets, got {n_budgets} "
            f"({', '.join(f'{d:g}' for d in np.unique(x)) or 'none'})"
        )
    scale = float(np.exp(np.log(x).mean()))  # D in units of its geometric mean: a well-scaled problem
    u = x / scale

    # for a fixed β the model is a straight line in v = u^(−β): E and B by ordinary least squares,
    # for every β of the grid at once
    betas = np.linspace(0.01, 4.0, 400)
    v = u[None, :] ** -betas[:, None]  # (betas, runs)
    v_centred = v - v.mean(axis=1, keepdims=True)
    slopes = (v_centred @ (y - y.mean())) / (v_centred**2).sum(axis=1)  # B per β, (betas,)
    intercepts = y.mean() - slopes * v.mean(axis=1)  # E per β
    sse = ((intercepts[:, None] + slopes[:, None] * v - y[None, :]) ** 2).sum(axis=1)
    best = int(np.argmin(sse))
    e0, b0, start_beta = intercepts[best], slopes[best], betas[best]
    result = optimize.least_squares(
        lambda p: p[0] + p[1] * u ** -p[2] - y,
        x0=[max(e0, 0.0), max(b0, 1e-12), start_beta],
        bounds=([0.0, 0.0, 1e-6], [np.inf, np.inf, 4.0]),
        x_scale="jac",
        xtol=1e-14,
        ftol=1e-14,
        gtol=1e-14,
    )
    e, b_scaled, beta = (float(p) for p in result.x)
    rmse = float(np.sqrt(np.mean(result.fun**2)))
    return DataFit(E=e, B=b_scaled * scale**beta, beta=beta, n_budgets=n_budgets, n_runs=len(x), rmse=rmse)


def data_fits(runs: pd.DataFrame, value: str = "eval_loss") -> tuple[pd.DataFrame, dict]:
    """L(D) per (size, variant) from its token-budget runs (iso-time runs left out).

    Returns (table, fits): one table row per (size, variant) with E, B, beta, n_budgets, n_runs, rmse
    and `note` (why there is no fit, else empty), and {(size, variant_id): DataFit} for those fitted.
    """
    cols = ["size", "variant_label", "E", "B", "beta", "n_budgets", "n_runs", "rmse", "note", "variant_id"]
    df = with_variants(runs) if not runs.empty else runs
    if not df.empty and "match_time_of" in df.columns:
        df = df[df["match_time_of"].isna()]
    if df.empty or value not in df.columns or "budget_tokens" not in df.columns:
        return pd.DataFrame(columns=cols), {}
    df = df.dropna(subset=["budget_tokens", value])
    rows, fits = [], {}
    for (size, variant_id), group in df.groupby(["size", "variant_id"], dropna=False, sort=True):
        row = dict(
            size=size,
            variant_id=variant_id,
            variant_label=group["variant_label"].iloc[0],
            n_budgets=group["budget_tokens"].nunique(),
            n_runs=len(group),
            note="",
        )
        try:
            fit = fit_loss_vs_data(group["budget_tokens"], group[value])
        except ConfigError as e:
            row["note"] = str(e)
        else:
            fits[(size, variant_id)] = fit
            row.update(E=fit.E, B=fit.B, beta=fit.beta, rmse=fit.rmse)
            if fit.B <= 0:
                row["note"] = "the loss does not fall with data here: no exchange rate"
                del fits[(size, variant_id)]
        rows.append(row)
    return pd.DataFrame(rows).reindex(columns=cols), fits
