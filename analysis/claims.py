"""The three studies' claims as data, and one rule that judges each claim, the same way for the study's
own numbers and for our runs.

The registry: `CLAIMS` (records of `analysis/claims_base.py`, the studies' numbers as printed), kept as
data, files per study (analysis/claims_data/lean.toml, lean_cost.toml, lean_added.toml,
iso_depth.toml, loop_design.toml) checked
against the schema of `analysis/claims_schema.py` at import, and `STUDIES` (each file with its sha256
and noise statement: claims_lean, claims_iso_depth, claims_loop_design). tests/analysis/test_claims.py checks every number against the files in ../shared/seeds/.

The rule (`judge`), one for every comparison kind:
- θ, the claim's figure, is computed per seed by the kind (`theta`) from values keyed (series, x); a
  seed is a distinct training seed of the claim's own study (`claims_measure` averages the runs of one
  seed; it never counts runs as seeds);
- its interval (`estimate`): over 2 or more seeds a t interval of the per-seed θ (with 2 seeds t has
  one degree of freedom and the interval is wide, as it should be: two values do not measure a spread);
  over 1 none. Where the study states its noise ("a loss difference under 0.01 is noise") and θ is a
  loss compared across separately trained models, an interval from 1 or 2 seeds is widened to at
  least θ ± that noise; where it states none for the figure's unit, by our documented default instead
  (`default_of`, analysis/claims_noise.py), said as ours. A fit brings its own bootstrap interval (`fitted`);
- the noise floor (`floor_of`): a loss compared within one model's depth sweep (a difference, a best
  loop count, a trend) must clear the study's noise margin too, the same margin the study's
  "within noise" claims on that sweep use: replicated only beyond line + floor on the claimed side,
  contradicted only beyond line − floor on the other, not resolved between;
- sign (`line_of`): *replicated* when the interval lies on the claimed side, *contradicted* when it
  lies on the other side, *not resolved* when it reaches across the line, *not run* when values are
  missing;
- size (`band_of`): every magnitude claim (a difference, a share, a ratio, an exponent) has a band of
  stated width: the union of the study's own seed interval, its stated figure or range (each to half
  its last printed digit) and the figure ± `DEFAULT_BAND` (25 %, the "about" of a figure printed
  without a spread; for a fraction of a whole, `bounded`, 25 % of its distance to 0 or 1, whichever is
  nearer, so a share of 94 % is not "about" 71 %); a band the study gives no part of reads "band:
  default (reason)", and a figure with no honest band (`no_band`) is judged on sign only. An interval
  inside the band replicates, one wholly outside contradicts, one reaching across the band's edge is not
  resolved;
- scale (MISSION): a scale-free figure (an exponent, a share, a ratio: `SCALE_FREE_KINDS`) is judged on
  size at any scale, so a fitted φ is always compared with 0.46; a scale-bound one (a loss or accuracy
  difference) on size only at the study's scale (`same_scale`: the parameters and/or tokens the study
  prints for the claim, each record citing the seed's line), elsewhere on sign only; where the study
  prints no count for it, on sign only (its own numbers excepted). Every judgement says what it
  compared (`Judgement.judged`: "size and sign", "sign only", "not judgeable") and why (`scale_basis`);
- a within-noise claim of a study that states no margin is "not judgeable": no margin is invented.

Pure pandas / numpy / scipy: no torch, no database.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from looplab.analysis import claims_iso_depth, claims_lean, claims_loop_design, claims_noise, claims_schema
from looplab.analysis.claims_base import (
    SEEDS_DIR,
    Claim,
    Comparison,
    DefaultNoise,
    Scale,
    Side,
    Study,
    Unit,
    printed_step,
)
from looplab.analysis.stats import LEVEL, ClaimVerdict
from looplab.model.errors import ConfigError

__all__ = ["CLAIMS", "SEEDS_DIR", "STUDIES", "Claim", "ClaimVerdict", "Comparison", "Scale", "Side"]

STUDIES: dict[str, Study] = {
    s.key: s for s in (claims_lean.STUDY, claims_iso_depth.STUDY, claims_loop_design.STUDY)
}
# each study's claims, kept as data (analysis/claims_data/*.toml) and checked against the schema of
# analysis/claims_schema.py here, at import
CLAIMS: tuple[Claim, ...] = (
    *(c for name in ("lean", "lean_cost", "lean_added") for c in claims_schema.load(name, "lean", "lean")),
    *claims_schema.load("iso_depth", claims_iso_depth.STUDY.key, "iso"),
    *claims_schema.load("loop_design", claims_loop_design.STUDY.key, "loop"),
)
BY_ID: dict[str, Claim] = {c.id: c for c in CLAIMS}
if len(BY_ID) != len(CLAIMS):  # ids are unique within a file (the loader) and across files (here)
    _ids = [c.id for c in CLAIMS]
    raise ConfigError(
        f"claims_data: claim ids repeat across files: {sorted({i for i in _ids if _ids.count(i) > 1})}"
    )
# the kinds' own lines; NO_WORSE and EQUIVALENT take the study's noise margin, EXPONENT the claim's
LINES = {
    Comparison.DIFFERENCE: 0.0,
    Comparison.SHARE: 0.5,  # "most of the gain"
    Comparison.LOCATION: 0.0,
    Comparison.TREND: 0.0,
    Comparison.RANK: 0.0,
    Comparison.RATIO: 1.0,
}
# the kinds whose figure has a size the study states; the others are shapes (a side of the line)
MAGNITUDE_KINDS = (Comparison.DIFFERENCE, Comparison.SHARE, Comparison.RATIO, Comparison.EXPONENT)
# the kinds whose figure does not depend on the model's size (MISSION): judged on size at any scale
SCALE_FREE_KINDS = (Comparison.SHARE, Comparison.RATIO, Comparison.EXPONENT)
# the kinds that compare a loss within one model's depth sweep and so take the sweep's noise floor
SWEEP_KINDS = (Comparison.DIFFERENCE, Comparison.LOCATION, Comparison.TREND)
# the half-width of a magnitude band, relative to the figure, where the study prints a figure without a
# spread of its own: its "about" (0.016 "about" → [0.012, 0.020]); the study's seed interval or stated
# range widens the band further, never narrows it
DEFAULT_BAND = 0.25
# what each judgement compared (`Judgement.judged`)
ON_SIZE, SIGN_ONLY, NOT_JUDGEABLE = "size and sign", "sign only", "not judgeable"
SCALE_FACTOR = 1.5  # runs within this factor of a claim's parameters and tokens are at its scale
# what a judgement compares, by the runs' scale (`scale_basis`; the scorecard's scale_note)
AT_SCALE = "at the study's scale"
SCALE_FREE = "other scale: size judged (the figure does not depend on scale)"
OTHER_SCALE = "other scale: sign only"
NO_SCALE = "scale not stated by the study: sign only"
SCALE_NOTES = (AT_SCALE, SCALE_FREE, OTHER_SCALE, NO_SCALE)
POINT_COLUMNS = ["series", "x", "seed", "value"]


def claims_of(study: str | None = None) -> tuple[Claim, ...]:
    """The claims of one study (its key), or all of them for None."""
    if study is None:
        return CLAIMS
    if study not in STUDIES:
        raise ConfigError(f"--study: unknown {study!r}; accepted: {', '.join(STUDIES)}")
    return tuple(c for c in CLAIMS if c.study == study)


def margin_of(claim: Claim) -> float | None:
    """The study's noise statement (a loss difference it counts as noise), None where it makes none."""
    noise = STUDIES[claim.study].noise
    return noise.value if noise is not None else None


def noise_of(claim: Claim) -> float | None:
    """The half-width the study's noise statement gives θ: only a loss across trained models."""
    return margin_of(claim) if claim.unit == Unit.LOSS and claim.across_models else None


def default_of(claim: Claim) -> DefaultNoise | None:
    """Our documented default noise of one run's figure (`claims_noise`), where the study states none for
    the claim's unit; None for an exact figure or where the study's own noise applies."""
    if noise_of(claim) is not None or claim.unit == Unit.EXACT:
        return None
    return next((d for d in STUDIES[claim.study].defaults if claim.unit in d.units), None)


def floor_of(claim: Claim) -> float:
    """The noise floor around the line: the study's margin for a loss compared within one model's depth
    sweep (the margin its within-noise claims on the same sweep use), 0 otherwise."""
    margin = margin_of(claim)
    sweep = claim.unit == Unit.LOSS and not claim.across_models and claim.kind in SWEEP_KINDS
    return margin if sweep and margin is not None else 0.0


def line_of(claim: Claim) -> float | None:
    """The value where the claim turns; None for a within-noise claim of a study that states no noise."""
    if claim.kind in (Comparison.NO_WORSE, Comparison.EQUIVALENT):
        return margin_of(claim)
    if claim.line is not None:
        return claim.line
    return LINES[claim.kind]


# ---------------------------------------------------------------- θ per seed


def _pairs(claim: Claim) -> list[tuple[tuple, tuple | None]]:
    """(a, b) keys of a pairwise kind; b None where the single value already is the figure."""
    terms = claim.terms
    if terms and isinstance(terms[0], tuple) and terms[0] and isinstance(terms[0][0], tuple):
        return [(a, b) for a, b in terms]
    if len(terms) == 1:
        return [(terms[0], None)]
    return [(terms[0], terms[1])] if len(terms) == 2 else [(t, None) for t in terms]


def needed(claim: Claim) -> list[tuple]:
    """The (series, x) keys θ reads."""
    k, t = claim.kind, claim.terms
    if k == Comparison.SHARE:
        return [(t[0], x) for x in t[1:4]]
    if k == Comparison.LOCATION:
        return [(t[0], t[1]), *((t[0], x) for x in t[2])]
    if k == Comparison.TREND:
        return [(t[0], x) for x in t[1]]
    if k == Comparison.EXPONENT:
        return [(t[0], t[1])]
    if k == Comparison.RANK:
        return [(s, x) for s in t[:2] for x in t[2]]
    return [key for pair in _pairs(claim) for key in pair if key is not None]


def _worst(values: list[float], side: Side) -> float:
    """The least favourable of several figures for a claim on `side` (the one nearest the other side)."""
    return min(values) if side == Side.ABOVE else max(values)


def theta(claim: Claim, y: Mapping[tuple, float]) -> float:
    """The claim's figure from one seed's values {(series, x): value}; NaN when a value is missing."""
    if any(key not in y or not math.isfinite(y[key]) for key in needed(claim)):
        return math.nan
    k, t = claim.kind, claim.terms
    sign = -1.0 if claim.higher_better else 1.0
    if k == Comparison.SHARE:
        start, mid, end = (y[(t[0], x)] for x in t[1:4])
        return (start - mid) / (start - end) if start != end else math.nan
    if k == Comparison.LOCATION:
        best = y[(t[0], t[1])]
        return min(sign * (y[(t[0], x)] - best) for x in t[2])
    if k == Comparison.TREND:
        steps = np.diff([y[(t[0], x)] for x in t[1]])
        return float(steps.min() if claim.side == Side.ABOVE else steps.max())
    if k == Comparison.EXPONENT:
        phi = y[(t[0], t[1])]
        return phi if t[2] is None else float(t[2]) ** phi
    if k == Comparison.RANK:
        a, b = ([y[(s, x)] for x in t[2]] for s in t[:2])
        return float(scipy_stats.spearmanr(a, b).statistic)
    values = []
    for a, b in _pairs(claim):
        if k == Comparison.RATIO:
            values.append(y[a] / y[b] if b is not None else y[a])
        else:
            values.append(y[a] - y[b] if b is not None else y[a])
    if k == Comparison.EQUIVALENT:
        return max(abs(v) for v in values)
    if k == Comparison.NO_WORSE:
        return max(sign * v for v in values)
    return _worst(values, claim.side)


def study_points(claim: Claim) -> pd.DataFrame:
    """The study's own values of a claim as runs' figures: columns series, x, seed, value, and step (half
    the last printed digit of each)."""
    rows = [(p.series, p.x, p.seed, p.quote.value, printed_step(p.quote.text)) for p in claim.points]
    return pd.DataFrame(rows, columns=[*POINT_COLUMNS, "step"])


def per_seed(claim: Claim, points: pd.DataFrame) -> pd.Series:
    """θ per seed from values (columns series, x, seed, value); a seed missing a value gives none.
    Values without a seed (NaN) are one run of their own."""
    if points.empty:
        return pd.Series(dtype=float)
    out = {}
    for seed, group in points.groupby("seed", dropna=False, sort=True):
        y = {(s, x): float(v) for s, x, v in zip(group["series"], group["x"], group["value"], strict=True)}
        value = theta(claim, y)
        if math.isfinite(value):
            out[seed] = value
    return pd.Series(out, dtype=float)


# ---------------------------------------------------------------- the interval


@dataclass(frozen=True)
class Estimate:
    """θ with its interval (`low`, `high`; NaN where none exists) over `n` seeds (or runs of a fit)."""

    value: float
    low: float
    high: float
    n: int
    method: str

    @property
    def defined(self) -> bool:
        return math.isfinite(self.low) and math.isfinite(self.high)

    def describe(self) -> str:
        if not math.isfinite(self.value):
            return "—"
        if not self.defined:
            return f"{self.value:.4g} (no interval: {self.method})"
        return f"{self.value:.4g} [{self.low:.4g}, {self.high:.4g}] ({self.method})"


def fitted(value: float, low: float, high: float, n: int, method: str = "bootstrap of the fit") -> Estimate:
    """A figure a fit gives with its own interval (φ, a compute-optimal width): taken as it is."""
    return Estimate(float(value), float(low), float(high), int(n), method)


def estimate(claim: Claim, points: pd.DataFrame, level: float = LEVEL) -> Estimate:
    """θ over the seeds of `points` with its interval, by the rule of the module docstring."""
    thetas = per_seed(claim, points).to_numpy()
    n = len(thetas)
    if n == 0:
        return Estimate(math.nan, math.nan, math.nan, 0, "no values")
    value = float(thetas.mean())
    if n >= 2:
        half = float(scipy_stats.t.ppf((1 + level) / 2, n - 1) * thetas.std(ddof=1) / math.sqrt(n))
        low, high, method = value - half, value + half, f"t interval over {n} seeds"
    elif claim.unit == Unit.EXACT:
        low, high, method = value, value, "exact: no noise"
    else:
        low, high, method = math.nan, math.nan, "one run"
    noise, default = noise_of(claim), default_of(claim)
    if n <= 2 and noise is not None:
        low, high = np.nanmin([low, value - noise]), np.nanmax([high, value + noise])
        method += f" ∪ the study's noise ±{noise:g}"
    elif n <= 2 and default is not None:  # our documented default (docs/claims.md), said as ours
        ends = claims_noise.default_interval(default, lambda y: theta(claim, y), needed(claim), points, value)
        if math.isfinite(ends[0]):
            low, high = np.nanmin([low, ends[0]]), np.nanmax([high, ends[1]])
            method += f" ∪ our default noise {default.describe()}"
    if not math.isfinite(low):
        method += " and no stated noise for it"
    return Estimate(value, float(low), float(high), n, method)


# ---------------------------------------------------------------- the verdict


def same_scale(claim: Scale, ours: Scale | None) -> bool:
    """Whether runs at `ours` are at the claim's scale: every count the study prints for the claim
    (parameters and/or tokens) stated for ours too and within `SCALE_FACTOR` of it. A claim whose study
    prints neither is at its scale only for the study's own numbers (`ours` is the claim's scale)."""
    if ours is None:
        return False
    if ours == claim:
        return True
    pairs = [
        (a, b) for a, b in ((claim.params, ours.params), (claim.n_tokens, ours.n_tokens)) if math.isfinite(a)
    ]
    return bool(pairs) and all(
        math.isfinite(b) and a > 0 and b > 0 and max(a / b, b / a) <= SCALE_FACTOR for a, b in pairs
    )


def scale_basis(claim: Claim, at_scale: bool) -> str:
    """What a judgement of `claim` compares, given whether the runs are at its scale (`SCALE_NOTES`)."""
    if at_scale:
        return AT_SCALE
    if claim.kind in SCALE_FREE_KINDS:
        return SCALE_FREE
    return OTHER_SCALE if claim.scale.stated else NO_SCALE


@dataclass(frozen=True)
class Band:
    """The sizes of a magnitude claim's figure that count as the study's: [low, high] and where its
    width comes from (`band_of`); `default` says why the width is wholly ours (the study prints the
    figure once, without a spread or a range), empty where the study gives part of it."""

    low: float
    high: float
    source: str
    default: str = ""

    def describe(self) -> str:
        if self.default:
            return f"[{self.low:.4g}, {self.high:.4g}] (band: default ({self.source}): {self.default})"
        return f"[{self.low:.4g}, {self.high:.4g}] ({self.source})"


@dataclass(frozen=True)
class Judgement:
    """A claim judged against runs' figures: the verdict, both figures with their intervals, both scales,
    the band of the study's figure, what was judged (`judged`: size and sign, sign only, not judgeable)
    and why (`reason`)."""

    claim: Claim
    verdict: ClaimVerdict
    ours: Estimate | None
    study: Estimate | None
    at_scale: bool
    our_scale: str
    reason: str
    runs: tuple = ()
    band: Band | None = None
    judged: str = ""
    premise: str = ""  # what the claim takes for granted that our runs do not show (`premise`)

    @property
    def scale_note(self) -> str:
        return scale_basis(self.claim, self.at_scale)


def study_estimate(claim: Claim) -> Estimate | None:
    """The study's own figure of a claim under the rule, None where it prints no values for it."""
    return estimate(claim, study_points(claim)) if claim.points else None


def bounded(claim: Claim) -> bool:
    """Whether the claim's figure is a fraction of a whole (a share of a gain, a fraction), so it
    saturates at 1 as it does at 0."""
    return claim.kind == Comparison.SHARE or claim.unit == Unit.FRACTION and claim.kind in MAGNITUDE_KINDS


def band_of(claim: Claim) -> Band | None:
    """The band of a magnitude claim (module docstring): the union of the study's figure ±
    `DEFAULT_BAND`, its seed interval and its stated figure or range (to half a printed digit); None
    for a shape claim or where the study prints no values."""
    study = study_estimate(claim)
    if claim.kind not in MAGNITUDE_KINDS or claim.no_band or study is None or not math.isfinite(study.value):
        return None
    v = study.value
    if bounded(claim):  # a fraction near 1 has little room left: the "about" is of what remains
        half, sources = (
            DEFAULT_BAND * min(abs(v), abs(1 - v)),
            [f"±{DEFAULT_BAND:.0%} of min({v:.4g}, 1 − it)"],
        )
    else:
        half, sources = DEFAULT_BAND * abs(v), [f"±{DEFAULT_BAND:.0%} of {v:.4g}"]
    low, high = v - half, v + half
    default = default_of(claim)
    if study.defined and study.high > study.low:
        low, high = min(low, study.low), max(high, study.high)
        ours = default is not None and study.n <= 1
        sources.append(f"one run {default.describe()}" if ours else f"the study's {study.method}")
    if claim.stated:
        values = [claim.stated_sign * q.value for q in claim.stated]
        slack = max(printed_step(q.text) for q in claim.stated)
        low, high = min(low, min(values) - slack), max(high, max(values) + slack)
        sources.append("stated " + " to ".join(q.text for q in claim.stated))
    return Band(float(low), float(high), "; ".join(sources), _ours_only(claim, study, default))


def _ours_only(claim: Claim, study: Estimate, default: DefaultNoise | None) -> str:
    """Why a band's width is wholly ours ("" where the study gives part of it: its seeds' spread, its
    noise statement or a stated range): a figure printed once without any, and our default's reason."""
    if study.n > 1 or len(claim.stated) > 1 or noise_of(claim) is not None:
        return ""
    why = "the study gives this figure from one run, without a spread or a range"
    return why + (f"; our default noise of one run: {default.why}" if default is not None else "")


def _sign(claim: Claim, ours: Estimate) -> tuple[ClaimVerdict | None, str]:
    """The verdict on the claimed side of the line with its noise floor: (REPLICATED, where) on the
    claimed side, (CONTRADICTED, why) on the other, (NOT_RESOLVED, why) across."""
    line, floor = line_of(claim), floor_of(claim)
    above = claim.side == Side.ABOVE
    direction = 1.0 if above else -1.0
    toward, away = line + direction * floor, line - direction * floor
    on_side = ours.low > toward if above else ours.high < toward
    other_side = ours.high < away if above else ours.low > away
    where = f"interval [{ours.low:.4g}, {ours.high:.4g}], line {line:g}"
    if floor:
        where += f" ± the sweep's noise floor {floor:g}"
    if other_side:
        return ClaimVerdict.CONTRADICTED, f"{where}: on the other side"
    if not on_side:
        return ClaimVerdict.NOT_RESOLVED, f"{where}: reaches across the line"
    return ClaimVerdict.REPLICATED, where


def _size(band: Band, ours: Estimate) -> tuple[ClaimVerdict, str]:
    """Inside the band replicates, wholly outside contradicts, across its edge is not resolved."""
    text = f"the study's band {band.low:.4g} to {band.high:.4g}"
    if ours.high < band.low or ours.low > band.high:
        return ClaimVerdict.CONTRADICTED, f"misses {text}"
    if ours.low < band.low or ours.high > band.high:
        return ClaimVerdict.NOT_RESOLVED, f"reaches across the edge of {text}"
    return ClaimVerdict.REPLICATED, f"inside {text}"


def judge(
    claim: Claim,
    ours: Estimate | None,
    scale: Scale | None = None,
    missing: Iterable[str] = (),
    runs: Iterable = (),
) -> Judgement:
    """The verdict on `claim` from our figure `ours` (from `estimate` or `fitted`) measured at `scale`;
    `missing` names the runs it needs that are not there, `runs` those it rests on. Sign first, then
    size where the claim has a band and its kind is scale-free or the runs are at the study's scale."""
    study = study_estimate(claim)
    at_scale = same_scale(claim.scale, scale)
    described = scale.describe() if scale is not None else "—"
    band = band_of(claim)
    on_size = band is not None and (claim.kind in SCALE_FREE_KINDS or at_scale)
    judged = ON_SIZE if on_size else SIGN_ONLY

    def out(verdict: ClaimVerdict, reason: str, what: str = judged) -> Judgement:
        return Judgement(claim, verdict, ours, study, at_scale, described, reason, tuple(runs), band, what)

    needs = "needs " + (", ".join(missing) or "runs that measure it")
    if line_of(claim) is None:  # no run could resolve it: said with or without runs
        why = "not judgeable: the study states no margin within which values count as alike"
        if ours is None or not math.isfinite(ours.value):
            return out(ClaimVerdict.NOT_RUN, f"{needs}; {why}", NOT_JUDGEABLE)
        return out(ClaimVerdict.NOT_RESOLVED, why, NOT_JUDGEABLE)
    if ours is None or not math.isfinite(ours.value):
        return out(ClaimVerdict.NOT_RUN, needs, "")
    if not ours.defined:
        return out(ClaimVerdict.NOT_RESOLVED, f"no interval ({ours.method})")
    verdict, where = _sign(claim, ours)
    if verdict != ClaimVerdict.REPLICATED:
        return out(verdict, where)
    if not on_size:
        return out(verdict, f"{where}: on the claimed side{_unsized(claim, band)}")
    verdict, size = _size(band, ours)
    return out(verdict, f"{where}: on the claimed side; {size}")


def _unsized(claim: Claim, band: Band | None) -> str:
    """Why a magnitude claim's size was not judged ("" for a shape claim): the runs are at another scale
    than the one the study prints, or the study prints none for it."""
    if claim.no_band:
        return f"; size not judgeable: {claim.no_band}"
    if band is None:
        return ""
    if claim.scale.stated:
        return f"; size not judged: the study's figure is for {claim.scale.describe()}"
    return "; size not judged: the study prints no parameter or token count for it"


def judge_points(
    claim: Claim, points: pd.DataFrame, scale: Scale | None = None, runs: Iterable = ()
) -> Judgement:
    """`judge` on runs' values (columns series, x, seed, value): the missing (series, x) are named."""
    have = set(zip(points["series"], points["x"], strict=True)) if not points.empty else set()
    missing = [f"{s} at {x}" for s, x in needed(claim) if (s, x) not in have]
    ours = estimate(claim, points) if not missing else None
    judged = judge(claim, ours, scale, missing, runs)
    unmet = premise(claim, points) if not missing else ""
    if unmet and judged.verdict in (ClaimVerdict.REPLICATED, ClaimVerdict.CONTRADICTED):
        return replace(
            judged, verdict=ClaimVerdict.NOT_RESOLVED, reason=f"premise not met: {unmet}", premise=unmet
        )
    return replace(judged, premise=unmet)


def premise(claim: Claim, points: pd.DataFrame) -> str:
    """What a claim takes for granted that our runs do not show, with the figure ("" when it holds):
    a share of a gain needs the gain, in the study's direction and beyond the study's noise margin for
    a loss (a share of +0.0003 of loss is a share of noise)."""
    if claim.kind != Comparison.SHARE or points.empty:
        return ""
    series, start, _, end = claim.terms
    values = points[points["series"] == series].groupby("x")["value"].mean()
    if start not in values or end not in values:
        return ""
    ours = float(values[start] - values[end])
    study = study_points(claim)
    sign = 1.0
    theirs = study[study["series"] == series].groupby("x")["value"].mean() if not study.empty else {}
    if start in theirs and end in theirs:  # the gain's direction is the study's (a fall of loss, a rise)
        sign = math.copysign(1.0, float(theirs[start] - theirs[end]))
    least = (margin_of(claim) or 0.0) if "loss" in claim.metric.column else 0.0
    if sign * ours > least:
        return ""
    return (
        f"the gain from {start} to {end} ({series}) is {ours:+.4g} in these runs"
        + (f", inside the study's noise margin {least:g}" if sign * ours > 0 else "")
        + ": no gain to take a share of"
    )


# ---------------------------------------------------------------- the study against itself


def _key(key: tuple) -> str:
    return f"{key[0]}@{key[1]}"


def derivation(claim: Claim) -> str:
    """How the study's figure of `claim` is computed from the values it prints ("" where the figure is
    one printed value): every such figure is shown marked "derived", with this computation."""
    k, t = claim.kind, claim.terms
    if not claim.points:
        return ""
    if k == Comparison.SHARE:
        a, b, c = (_key((t[0], x)) for x in t[1:4])
        how = f"({a} − {b}) / ({a} − {c})"
    elif k == Comparison.LOCATION:
        how = f"smallest excess of {t[0]} at {', '.join(str(x) for x in t[2])} over {_key((t[0], t[1]))}"
    elif k == Comparison.TREND:
        how = f"smallest step of {t[0]} over {' → '.join(str(x) for x in t[1])}"
    elif k == Comparison.EXPONENT:
        how = f"{t[2]} ** {_key((t[0], t[1]))}" if t[2] is not None else ""
    elif k == Comparison.RANK:
        how = f"Spearman's ρ of {t[0]} and {t[1]} over {t[2]}"
    else:
        op = " / " if k == Comparison.RATIO else " − "
        pairs = _pairs(claim)
        parts = [_key(a) + (op + _key(b) if b is not None else "") for a, b in pairs]
        how = parts[0] if len(parts) == 1 else "the least favourable of " + ", ".join(parts)
        if len(pairs) == 1 and pairs[0][1] is None:  # one printed value is the figure (its mean, per seed)
            how = parts[0] if len({p.seed for p in claim.points}) > 1 else ""
        if k == Comparison.EQUIVALENT and len(parts) > 1:
            how = "the largest |" + "|, |".join(parts) + "|"
    seeds = {p.seed for p in claim.points if p.seed is not None}
    if how and len(seeds) > 1:
        how += f", mean over seeds {', '.join(str(s) for s in sorted(seeds))}"
    return f"derived: {how}" if how else ""


def study_figure(j: Judgement) -> str:
    """The study's figure as the scorecard shows it: with its interval, and marked derived with its
    computation where it is not a value the study prints."""
    if j.study is None:
        return "no values printed"
    how = derivation(j.claim)
    return j.study.describe() + (f"; {how}" if how else "")


def self_check(claim: Claim) -> dict:
    """The study's figure computed from its own values beside what it states (`stated`, as printed):
    {"computed", "stated", "agrees"}; agrees is None where either is missing. A stated figure agrees
    when the computed one lies within half a printed digit of it (of the range, for two quotes)."""
    study = study_estimate(claim)
    if study is None or not claim.stated or not math.isfinite(study.value):
        return {"computed": study.value if study else math.nan, "stated": "", "agrees": None}
    values = [claim.stated_sign * q.value for q in claim.stated]
    slack = max(printed_step(q.text) for q in claim.stated)
    low, high = min(values) - slack, max(values) + slack
    stated = " to ".join(q.text for q in claim.stated)
    return {"computed": study.value, "stated": stated, "agrees": bool(low <= study.value <= high)}


# ---------------------------------------------------------------- the scorecard

SCORECARD_COLUMNS = [
    "claim",
    "study",
    "statement",
    "kind",
    "verdict",
    "study_figure",
    "study_scale",
    "band",
    "judged",
    "ours",
    "value",
    "low",
    "high",
    "n_seeds",
    "our_scale",
    "scale_note",
    "runs",
    "reason",
    "premise",
    "stated",
    "contradiction",
]


def _stated(claim: Claim) -> str:
    """The study's own summary of the figure as printed, beside what its values compute to."""
    check = self_check(claim)
    if not check["stated"]:
        return ""
    if check["agrees"] is None:
        return f"{check['stated']} (printed)"
    verb = "agrees with" if check["agrees"] else "disagrees with"
    return f"{check['stated']} (printed; {verb} the {check['computed']:.4g} its values compute to)"


def scorecard(judgements: Iterable[Judgement]) -> pd.DataFrame:
    """One row per judgement (SCORECARD_COLUMNS): the claim, its verdict, the study's figure, scale and
    band, whether it was judged on size and sign or on sign only, ours (as text, and as value, low, high
    over n_seeds) with our scale, the runs it rests on, why the verdict is what it is, and the study's
    stated figure and any contradiction within the study."""
    rows = []
    for j in judgements:
        c = j.claim
        rows.append(
            dict(
                claim=c.id,
                study=c.study,
                statement=c.statement,
                kind=str(c.kind),
                verdict=str(j.verdict),
                study_figure=study_figure(j),
                study_scale=c.scale.describe(),
                band=j.band.describe() if j.band else "",
                judged=j.judged,
                ours=j.ours.describe() if j.ours else "—",
                value=j.ours.value if j.ours else math.nan,
                low=j.ours.low if j.ours else math.nan,
                high=j.ours.high if j.ours else math.nan,
                n_seeds=j.ours.n if j.ours else 0,
                our_scale=j.our_scale,
                scale_note=j.scale_note if j.ours else "",
                runs=", ".join(str(r) for r in j.runs),
                reason=j.reason,
                premise=j.premise,
                stated=_stated(c),
                contradiction=c.contradiction,
            )
        )
    return pd.DataFrame(rows, columns=SCORECARD_COLUMNS)
