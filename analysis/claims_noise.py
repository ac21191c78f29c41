"""Our documented default for the noise of one run's figure, where the claim's study states none
(`claims_base.DefaultNoise`; docs/claims.md, "Bands of single runs"): the interval a figure read from
one or two runs gets, so that the rule (`analysis.claims.estimate`) can judge it at all, and the band of
a study figure printed once without a spread (`analysis.claims.band_of`), marked as ours.

A default applied per value moves each value the figure θ reads within its half-width and takes the
least and greatest θ found; one applied to the figure widens θ itself. Pure numpy; the rule passes its
own θ in.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from itertools import product

import numpy as np
import pandas as pd

from looplab.analysis.claims_base import DefaultNoise

# θ of a trend, or of several pairs sharing a value, can turn inside the box of values: with up to
# GRID_VALUES values the box is searched on a grid of GRID_LEVELS per value; beyond that only its
# corners (the figures read from that many values are pairs of distinct values, monotone in each)
GRID_VALUES = 4
GRID_LEVELS = 5


def half_widths(
    default: DefaultNoise, y: Mapping[tuple, float], keys: Sequence[tuple], steps: Mapping[tuple, float]
) -> dict[tuple, float] | None:
    """Each value's half-width under `default`; None for a printed-digit default where a value has no
    printed text (a figure of our runs: a fit brings its own interval instead)."""
    if default.printed:
        return {k: steps[k] for k in keys} if all(k in steps for k in keys) else None
    if default.relative:
        return {k: default.half_width * abs(y[k]) for k in keys}
    return dict.fromkeys(keys, default.half_width)


def theta_range(
    theta: Callable[[Mapping[tuple, float]], float],
    y: Mapping[tuple, float],
    widths: Mapping[tuple, float],
) -> tuple[float, float]:
    """The least and greatest θ with each value of `widths` anywhere within ± its half-width."""
    keys = list(widths)
    levels = np.linspace(-1.0, 1.0, GRID_LEVELS if len(keys) <= GRID_VALUES else 2)
    found = []
    for signs in product(levels, repeat=len(keys)):
        moved = {**y, **{k: y[k] + s * widths[k] for k, s in zip(keys, signs, strict=True)}}
        value = theta(moved)
        if math.isfinite(value):
            found.append(value)
    return (min(found), max(found)) if found else (math.nan, math.nan)


def default_interval(
    default: DefaultNoise,
    theta: Callable[[Mapping[tuple, float]], float],
    keys: Sequence[tuple],
    points: pd.DataFrame,
    value: float,
) -> tuple[float, float]:
    """θ's interval over the seeds of `points` (columns series, x, seed, value, and for the study's own
    values `step`, half the last printed digit) under `default`: the mean `value` widened by the largest
    reach of any seed's range below and above its own θ. NaN where no seed has its values."""
    if not default.per_value:
        half = default.half_width * abs(value) if default.relative else default.half_width
        return (value - half, value + half) if not default.printed else (math.nan, math.nan)
    below = above = math.nan
    for _, group in points.groupby("seed", dropna=False, sort=True):
        seed_keys = list(zip(group["series"], group["x"], strict=True))
        y = {k: float(v) for k, v in zip(seed_keys, group["value"], strict=True)}
        if any(k not in y for k in keys):
            continue
        steps = dict(zip(seed_keys, group["step"], strict=True)) if "step" in group else {}
        widths = half_widths(default, y, keys, steps)
        if widths is None:
            continue
        own = theta(y)
        low, high = theta_range(theta, y, widths)
        below, above = np.nanmax([below, own - low]), np.nanmax([above, high - own])
    return float(value - below), float(value + above)
