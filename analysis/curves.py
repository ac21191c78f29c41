"""Curves and their tables: loss against loop count (depth sweeps), the loop geometry per round,
training curves (downsampled, banded over seeds, labelled), validation loss at several loop counts
during training, and loss against training wall time. Pure pandas behind the Runs, Depth and Compare
pages; input frames as `orchestrator.frames` produces them (depth, deltas: train_job_id, recipe,
size, seed, loops[, round], value columns; curves: job_id, key, step, tokens, wall_s, value).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import numpy as np
import pandas as pd

from looplab.analysis.variants import MISSING, group_aggregate, present, with_variants

DEPTH_METRIC = re.compile(r"^val_loss@(\d+)$")  # validation loss at N loops, recorded during training


def wall_time_curves(
    curves: pd.DataFrame, runs: pd.DataFrame, finished: Iterable[int], key: str = "val_loss"
) -> pd.DataFrame:
    """Loss against training seconds for runs of different lengths.

    Each run's LR schedule decays over its own budget, so a point in the middle of a longer run is
    *not decayed* and sits above where a run of that length would end; only the last point of a
    finished run (`finished`: their job ids; the caller knows the job states) is a decayed result.
    `point` says which; `step` is kept for what is placed by step (health markers).
    """
    cols = ["job_id", "series", "variant_label", "recipe", "size", "seed", "step", "wall_s", "value", "point"]
    c = curves[(curves["key"] == key) & curves["wall_s"].notna()] if not curves.empty else curves
    if c.empty:
        return pd.DataFrame(columns=cols)
    info = with_variants(runs)[["job_id", "variant_label", "recipe", "size", "seed"]]
    c = c.merge(info, on="job_id", how="inner").sort_values(["job_id", "wall_s"])
    c["series"] = [
        f"{v} · {s} · seed {int(sd) if present(sd) else '?'} · #{j}"
        for v, s, sd, j in zip(c["variant_label"], c["size"], c["seed"], c["job_id"])
    ]
    last = c.groupby("job_id")["wall_s"].transform("max") == c["wall_s"]
    done = c["job_id"].isin(list(finished))
    c["point"] = np.where(last & done, "final (decayed)", "not decayed")
    return c[cols].reset_index(drop=True)


# ---------------------------------------------------------------- depth


def _per_variant(df: pd.DataFrame, value: str, by: list[str], name: str = "recipe") -> pd.DataFrame:
    """`variants.group_aggregate`: over the seeds of each variant at one size and budget, and `by`."""
    return group_aggregate(df, value, by, name)


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
    index = [c for c in ("variant_label", "size", "budget") if c in curves.columns]
    wide = curves.pivot_table(index=index, columns="loops", values="mean").reset_index()
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


# ---------------------------------------------------------------- curves


# The downsampling rule, shared by this module (pandas), orchestrator.frames (the SQL read) and
# orchestrator.writer (which stores each point's level as it arrives, so that the read touches only
# the points it keeps): a curve of n points shown at most m points keeps every 2^L-th point, the first
# and the last, L the smallest level with 2^L * (m - 1) >= n - 1. A power-of-two stride is what a
# level stored per point can select as one index range (`curve_level >= L`); an even stride of any
# length (ceil((n-1)/(m-1)), the rule before revision 0015) would need every point looked at.
CURVE_LEVEL_TOP = 40  # the first point's level; strides are exact for curves of up to 2^40 points


def curve_level(position: int) -> int:
    """The level of the point at `position` (0-based, in step order) of its curve: how many trailing zero
    bits `position` has, at most CURVE_LEVEL_TOP (the first point's), so the points of level >= L are
    exactly every 2^L-th point, the first among them."""
    if position == 0:
        return CURVE_LEVEL_TOP
    return min((position & -position).bit_length() - 1, CURVE_LEVEL_TOP)


def stride_level(n: int, max_points: int) -> int:
    """The level L whose points (every 2^L-th, and the last) show a curve of `n` points in at most
    `max_points` (>= 2): the smallest L with 2^L * (max_points - 1) >= n - 1; 0 (every point) when
    n <= max_points. Kept: floor((n-1) / 2^L) + 1 points, plus the last when it is not among them."""
    m = max(2, int(max_points))
    level = 0
    while (m - 1) << level < n - 1 and level < CURVE_LEVEL_TOP:
        level += 1
    return level


def downsample(
    df: pd.DataFrame, max_points: int = 500, by: tuple[str, ...] = ("job_id", "key"), order: str = "step"
) -> pd.DataFrame:
    """Keep at most `max_points` points per series: every 2^L-th, the first and the last (`stride_level`
    gives L), the rule `orchestrator.frames.curves` reads from the database."""
    if df.empty or max_points < 2:
        return df
    df = df.sort_values([*by, order])
    g = df.groupby(list(by), sort=False)
    rn = g.cumcount().to_numpy()
    n = g[order].transform("size").to_numpy()
    strides = {k: 1 << stride_level(int(k), max_points) for k in np.unique(n)}
    stride = pd.Series(n).map(strides).to_numpy(dtype=np.int64)
    keep = (rn % stride == 0) | (rn == n - 1)
    return df[keep].reset_index(drop=True)


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
