"""Smoothing of curves for the eye: an exponential moving average or a trailing window, per run, in
step order. Only what a chart draws is smoothed: tables and every number a comparison uses read the raw
points (a smoothed final loss would lag the true one by about 1 / (1 - alpha) points).

Raw by default: the pages start with "none", draw the raw curve as the bold line and a smoothed one,
when asked for, light over it with its setting named. A curve shorter than `MIN_POINTS` is never
smoothed (an EMA 0.6 over 6 evaluations ends well above the last one: plain's line ended near 2.07 when
its final loss was 1.91).

Pure pandas; the pages choose the method (`SMOOTHING`, by the label a person picks)."""

from __future__ import annotations

import pandas as pd

# label -> (method, parameter): "ema" with its weight of the past, "window" with its number of points
SMOOTHING = {
    "none": ("none", 0),
    "EMA 0.6": ("ema", 0.6),
    "EMA 0.9": ("ema", 0.9),
    "EMA 0.99": ("ema", 0.99),
    "window 5": ("window", 5),
    "window 25": ("window", 25),
}

SMOOTHED_OPACITY = 0.45  # the smoothed line is drawn light over the bold raw one
MIN_POINTS = 20  # a run's curve with fewer points is drawn raw whatever the smoothing chosen


def smooth(
    curves: pd.DataFrame, how: str, by: str = "job_id", order: str = "step", min_points: int = MIN_POINTS
) -> pd.DataFrame:
    """`curves` (rows of one metric: `by`, `order`, value) with `value` smoothed per `by` in `order`
    by the method labelled `how` (a key of SMOOTHING); the raw value is kept as `raw`. An EMA is
    debiased at its start (as TensorBoard's), so the first points are not pulled towards zero. A run
    with fewer than `min_points` points keeps its raw values."""
    if how not in SMOOTHING:
        raise ValueError(f"smoothing: unknown {how!r}; accepted: {', '.join(SMOOTHING)}")
    method, p = SMOOTHING[how]
    out = curves.sort_values([by, order]).copy()
    out["raw"] = out["value"]
    if method == "none" or out.empty:
        return out
    g = out.groupby(by, sort=False)["value"]
    if method == "ema":
        # pandas' ewm with adjust=True is the debiased EMA: sum w^k x_{t-k} / sum w^k
        smoothed = g.transform(lambda v: v.ewm(alpha=1 - p, adjust=True).mean())
    else:
        smoothed = g.transform(lambda v: v.rolling(int(p), min_periods=1).mean())
    long_enough = g.transform("size") >= min_points
    out["value"] = smoothed.where(long_enough, out["raw"])
    return out


def short_runs(curves: pd.DataFrame, by: str = "job_id") -> int:
    """How many runs of `curves` have fewer than `MIN_POINTS` points (drawn raw)."""
    return int((curves.groupby(by).size() < MIN_POINTS).sum()) if not curves.empty else 0


def describe(how: str, curves: pd.DataFrame, by: str = "job_id") -> str:
    """What a chart's caption says of its smoothing: the bold line is raw, the light one its setting."""
    if SMOOTHING[how][0] == "none":
        return "Raw values; smoothing is off (choose one to draw a light smoothed line over them)."
    short = short_runs(curves, by)
    left = f"; {short} run(s) with fewer than {MIN_POINTS} points are not smoothed" if short else ""
    return f"Bold: the raw values. Light: smoothed ({how}){left}. Every table and final value is raw."
