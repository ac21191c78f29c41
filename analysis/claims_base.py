"""The record types of the claims registry (`analysis/claims.py`): a study file, a number as the study
prints it, the scale a claim was measured at, where looplab measures it, and the claim itself.

A number is kept as the text the study prints ("3.5005", "−0.008", "94%", "1.44 亿", "三分之一") and
its value is parsed from that text, so no figure is typed twice; a figure that is arithmetic on the
study's numbers (a share, 4^0.46) is computed from them by the comparison kind (`analysis.claims`),
never stored. tests/analysis/test_claims.py finds every text in the study file, on the lines the
claim cites.

Pure Python: no pandas, no torch, so the dashboard and the CLI read the registry cheaply.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from enum import StrEnum

SEEDS_DIR = "seeds"  # the studies' folder inside the shared/ folder beside the repository


class Comparison(StrEnum):
    """What kind of figure a claim is about; each kind computes its figure θ from one seed's values the
    same way for the study's numbers and for our runs, and has its own line (the value where the claim
    turns), `analysis.claims.line_of`."""

    DIFFERENCE = "difference"  # θ = a − b (a pair, or the least favourable of several); line 0
    NO_WORSE = "no worse"  # θ = a − b, a claimed no worse than b; line: the study's noise margin
    EQUIVALENT = "within noise"  # θ = the largest |a − b|; line: the study's noise margin
    SHARE = "share of a gain"  # θ = (y_from − y_mid) / (y_from − y_to); line 0.5 (most of the gain)
    LOCATION = "best loop count"  # θ = the smallest excess of another count over the claimed best; line 0
    TREND = "trend over a sweep"  # θ = the smallest step in the claimed direction; line 0
    EXPONENT = "fitted exponent"  # θ = a fitted exponent (or base^exponent); line: the claim's reference
    RANK = "rank correlation"  # θ = Spearman's ρ between two series over the same x; line 0
    RATIO = "ratio"  # θ = a / b (or the least favourable of several); line 1 unless the claim names one


class Side(StrEnum):
    """Which side of its line a claim puts θ."""

    ABOVE = "above"
    BELOW = "below"


class Unit(StrEnum):
    """What θ is measured in. The study's noise statement is about the loss of separately trained
    models, so it is a half-width only for `LOSS` figures of claims across models."""

    LOSS = "loss"
    FRACTION = "fraction"
    ACCURACY = "accuracy points"
    RATIO = "ratio"
    EXACT = "exact"  # a deterministic quantity (a cache size, a count): its value has no noise
    EXPONENT = "exponent"
    UPDATE = "relative update"
    FIT = "from a fit"  # a figure a fitted law gives, with the fit's own interval


_CHINESE = {"一半": 0.5, "三分之一": 1 / 3, "三分之二": 2 / 3, "十分之一": 0.1}
_UNITS = {"万": 1e4, "亿": 1e8, "M": 1e6, "B": 1e9}
_NUMBER = re.compile(r"^([+\-−]?)(\d+(?:\.\d+)?)\s*(%|万|亿|M|B)?$")
_POWER = re.compile(r"^(\d+(?:\.\d+)?)\s*\\times\s*10\^\{(\d+)\}$")
_LAYOUT = re.compile(r"^(\d+)×(\d+)$")  # P×L: P layers looped L times


def parse_number(text: str) -> float:
    """The value of a number as a study prints it: "3.5005", "−0.008" (U+2212 minus), "+0.029", "94%",
    "8650 万", "1.44 亿", "410M", "4.64 \\times 10^{17}", a layout "2×10" (its depth, 20), or a Chinese fraction ("一半", "三分之一")."""
    text = text.strip()
    if text in _CHINESE:
        return _CHINESE[text]
    layout = _LAYOUT.match(text)
    if layout:  # its effective depth
        return float(int(layout.group(1)) * int(layout.group(2)))
    power = _POWER.match(text)
    if power:
        return float(power.group(1)) * 10 ** int(power.group(2))
    m = _NUMBER.match(text)
    if not m:
        raise ValueError(f"quote: {text!r} is not a number as printed (e.g. 3.5005, −0.008, 94%, 1.44 亿)")
    value = float(m.group(2)) * (-1 if m.group(1) in "-−" and m.group(1) else 1)
    suffix = m.group(3)
    return value / 100 if suffix == "%" else value * _UNITS.get(suffix or "", 1.0)


def printed_step(text: str) -> float:
    """Half the last printed digit of `text` in its value's units ("0.016" → 0.0005, "94%" → 0.005):
    how far a figure may lie from the printed one and still print the same."""
    if text.strip() in _CHINESE:
        return 0.0
    digits = re.search(r"\d+(?:\.(\d+))?", text)
    decimals = len(digits.group(1) or "") if digits else 0
    unit = 0.01 if text.strip().endswith("%") else 1.0
    unit *= next((v for k, v in _UNITS.items() if k in text), 1.0)
    return 0.5 * 10.0**-decimals * unit


@dataclass(frozen=True)
class Quote:
    """A number exactly as the study prints it; `value` is parsed from the text."""

    text: str

    @property
    def value(self) -> float:
        return parse_number(self.text)


@dataclass(frozen=True)
class Point:
    """One value the study gives: `series` (a recipe, a variant, a layout) at `x` (a loop count, a round,
    a setting), for `seed` (None: one measurement or the study does not say which seed)."""

    series: str
    x: int | float | str
    quote: Quote
    seed: int | None = None


@dataclass(frozen=True)
class DefaultNoise:
    """Our documented default for the noise of one run's figure, for the `units` of a study that states
    none for them (docs/claims.md, "Bands of single runs"): never the study's, and every interval and band
    it widens says so. `half_width` is absolute, or a share of the value when `relative`; `per_value`
    applies it to each value the figure reads (the figure's range over them, `analysis.claims_noise`),
    otherwise to the figure itself; `printed` takes each printed value to half its last digit instead
    (a fitted figure printed without an interval). `why` is the reason, with the seed's lines it rests on."""

    units: tuple[Unit, ...]
    half_width: float
    why: str
    relative: bool = False
    per_value: bool = False
    printed: bool = False

    def describe(self) -> str:
        if self.printed:
            return "each printed value to half its last digit"
        size = f"{self.half_width:.0%}" if self.relative else f"{self.half_width:g}"
        return f"±{size} " + ("per value" if self.per_value else "on the figure")


# the reason of our relative default (`DefaultNoise`, relative and per value) for the kinds of figure no
# study here repeats over seeds (a relative update, a cross-round interaction); docs/claims.md
RELATIVE_WHY = (
    "no study here repeats this kind of figure, so nothing measures its noise; ±10 % of each value is our "
    "default, between the spread over seeds of the lean note's equal-time gaps, figures far beyond its "
    "noise line (±2 % and ±5 % of their means, 000 lines 83-87, derived), and the ±25 % of an 'about'"
)


@dataclass(frozen=True)
class Study:
    """One study file of ../shared/seeds/ with the sha256 of the text read, and its own noise statement
    (the loss difference it counts as seed noise), where it makes one; `defaults`: our documented noise
    of one run's figure for the units it states none for (`DefaultNoise`)."""

    key: str
    file: str
    title: str
    sha256: str
    noise: Quote | None = None
    noise_lines: tuple[int, int] | None = None
    defaults: tuple[DefaultNoise, ...] = ()


@dataclass(frozen=True)
class Scale:
    """What a claim was measured at, each part as printed (empty where the study does not say)."""

    size: str = ""  # e.g. "1.44 亿参数", "410M"
    tokens: str = ""  # e.g. "10 亿 token"
    seeds: tuple[int, ...] = ()
    device: str = ""
    note: str = ""  # anything else: the budgets, the layer configuration; where neither size nor
    # tokens is printed for the claim, what the study does say (its "not stated")
    lines: tuple[int, ...] = ()  # the seed's lines that print `size` and `tokens` ([first, last])

    @property
    def stated(self) -> bool:
        """Whether the study prints a parameter or a token count for the claim."""
        return math.isfinite(self.params) or math.isfinite(self.n_tokens)

    @property
    def params(self) -> float:
        """The parameter count parsed from `size` (NaN when not stated)."""
        return _leading_number(self.size)

    @property
    def n_tokens(self) -> float:
        return _leading_number(self.tokens)

    def describe(self) -> str:
        parts = [self.size, self.tokens]
        if self.seeds:
            parts.append("seeds " + ", ".join(str(s) for s in self.seeds))
        parts += [self.device, self.note]
        if self.lines:
            first, last = self.lines
            parts.append(f"line {first}" if first == last else f"lines {first}-{last}")
        return " · ".join(p for p in parts if p) or "not stated"


def _leading_number(text: str) -> float:
    """The number `text` starts with: "1.44 亿参数" → 1.44e8, "410M" → 4.1e8, "1048576 token" → 1048576."""
    m = re.match(r"\s*(\d+(?:\.\d+)?)\s*([MB])(?![A-Za-z])", text)
    if m:
        return float(m.group(1)) * (1e6 if m.group(2) == "M" else 1e9)
    m = re.match(r"\s*(\d+(?:\.\d+)?\s*(?:万|亿)?)", text)
    if m:
        return parse_number(m.group(1))
    return math.nan


@dataclass(frozen=True)
class Metric:
    """Where looplab measures a claim: the `orchestrator.frames` frame (or the SQL view) and column, the
    variant each series of the claim is, and the loop counts (or rounds, or r) it reads. `frame` empty:
    nothing in looplab measures it yet (`note` says what would)."""

    frame: str
    column: str
    series: tuple[tuple[str, str], ...] = ()  # (the claim's series name, the variant in looplab)
    at: str = ""  # which loop counts / rounds / settings
    note: str = ""

    def describe(self) -> str:
        if not self.frame:
            return f"not measured in looplab: {self.note}"
        series = ", ".join(f"{name} = {variant}" for name, variant in self.series)
        parts = [f"{self.frame}.{self.column}", series, self.at, self.note]
        return "; ".join(p for p in parts if p)


@dataclass(frozen=True)
class Claim:
    """One quantitative or directional claim of a study.

    `terms` are the kind's operands (`analysis.claims.theta`): for DIFFERENCE, NO_WORSE, EQUIVALENT
    and RATIO pairs ((series, x), (series, x)) or a single (series, x) whose value already is the
    figure; SHARE (series, x_from, x_mid, x_to); LOCATION (series, best x, (other xs)); TREND
    (series, (xs in order)) with `side` ABOVE for a rise and BELOW for a fall; EXPONENT (series, x,
    base or None); RANK (series a, series b, (xs)). `stated` is the study's own summary of θ as
    printed (one quote, or two for a range), `stated_sign` maps it onto θ (−1: "lower by 0.025" is
    θ = −0.025). `contradiction` says where the study contradicts itself about this claim;
    `own_evidence` says why the study's own numbers do not replicate it under the rule (empty: they
    do; tests/analysis/test_claims_rule.py checks both ways). `no_band` says why a magnitude claim has no
    honest band of its size (the figure depends on what no scale states): it is judged on sign only.
    """

    id: str
    study: str
    where: str
    lines: tuple[int, int]
    statement: str
    kind: Comparison
    side: Side
    unit: Unit
    scale: Scale
    metric: Metric
    terms: tuple = ()
    points: tuple[Point, ...] = ()
    stated: tuple[Quote, ...] = ()
    stated_sign: int = 1
    across_models: bool = True  # θ compares separately trained models (seed noise applies)
    higher_better: bool = False  # for LOCATION and NO_WORSE: the study's figure is an accuracy
    line: float | None = None  # EXPONENT and RATIO only: the reference value, when not the kind's
    quotes: tuple[Quote, ...] = ()  # further numbers the claim rests on (scale, context), as printed
    contradiction: str = ""
    own_evidence: str = ""
    no_band: str = ""  # why no honest band of the figure's size exists (judged on sign only, everywhere)

    @property
    def numbers(self) -> tuple[Quote, ...]:
        """Every number of the record as printed: points, stated figures, further quotes, and the scale."""
        scale = tuple(Quote(t) for t in (self.scale.size, self.scale.tokens) if t and _has_digit(t))
        return (*(p.quote for p in self.points), *self.stated, *self.quotes, *scale)


def _has_digit(text: str) -> bool:
    return any(c.isdigit() for c in text)
