"""Smoothing of curves for the eye: an exponential moving average or a trailing window, per run, in
step order. Only what a chart draws is smoothed: tables and every number a comparison uses read the raw
points (a smoothed final loss would lag the true one by about 1 / (1 - alpha) points).

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


def smooth(curves: pd.DataFrame, how: str, by: str = "job_id", order: str = "step") -> pd.DataFrame:
    """`curves` (rows of one metric: `by`, `order`, value) with `value` smoothed per `by` in `order`
    by the method labelled `how` (a key of SMOOTHING); the raw value is kept as `raw`. An EMA is
    debiased at its start (as TensorBoard's), so the first points are not pulled towards zero."""
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
        out["value"] = g.transform(lambda v: v.ewm(alpha=1 - p, adjust=True).mean())
    else:
        out["value"] = g.transform(lambda v: v.rolling(int(p), min_periods=1).mean())
    return out
