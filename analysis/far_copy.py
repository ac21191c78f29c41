"""Far-copy loss of two variants compared on the same tokens, with an interval over seeds.

A depth sweep splits the validation loss of every predicted token into far copies (the token's previous
occurrence lies more than `far_distance` tokens back and none lies within it, definition 2 of
workers/validation.py) and the rest (`near_loss`), and stores the far share. Every sweep of runs on one
corpus and tokenizer scores the same validation tokens in the same batches, so two variants' far-copy
losses are losses on the same tokens: per seed, the difference side − reference is paired, and the
interval over seeds is `analysis.stats.difference_interval`'s (a paired t interval from 3 seeds that
both sides share, a bootstrap at 2, none from 1 seed without a noise floor).

Only rows of the current definition at one distance are compared: a row measured with the old window
mask (definition 1, sweeps stored before it) or at another distance means something else.

Input: the rows of `orchestrator.frames.depth` (variant_label, seed, loops, far_copy_loss, near_loss,
val_loss, far_share, far_distance, far_definition). Pure pandas/numpy.
"""

from __future__ import annotations

import pandas as pd

from looplab.analysis import stats
from looplab.analysis.variants import labelled_by_group
from looplab.model.names import DEFAULT_FAR_DISTANCE as DEFAULT_DISTANCE
from looplab.model.names import FAR_DEFINITION

METRICS = ("far_copy_loss", "near_loss", "val_loss")
COLUMNS = [
    "loops",
    "metric",
    "side",
    "reference",
    "diff",
    "low",
    "high",
    "method",
    "n",
    "n_ref",
    "far_share",
    "far_distance",
    "per_seed",
]


def comparable(depth: pd.DataFrame, distance: int = DEFAULT_DISTANCE) -> pd.DataFrame:
    """The rows of `depth` whose far-copy split is of the current definition at `distance`."""
    if depth.empty or "far_definition" not in depth:
        return depth.iloc[0:0]
    keep = (depth["far_definition"] == FAR_DEFINITION) & (depth["far_distance"] == distance)
    return labelled_by_group(depth[keep & depth["far_copy_loss"].notna()])


def comparable_distances(depth: pd.DataFrame) -> set[int]:
    """The distances at which `depth` holds far-copy splits of the current definition."""
    if depth.empty or "far_definition" not in depth:
        return set()
    current = depth[(depth["far_definition"] == FAR_DEFINITION) & depth["far_copy_loss"].notna()]
    return {int(d) for d in current["far_distance"].dropna()}


def format_per_seed(per_seed: dict[int, float]) -> str:
    """`seed 0: +0.0200 · seed 1: +0.0300`: the per-seed differences as a table cell."""
    return " · ".join(f"seed {s}: {d:+.4f}" for s, d in sorted(per_seed.items()))


def far_share(depth: pd.DataFrame, distance: int = DEFAULT_DISTANCE) -> pd.DataFrame:
    """Per variant and loop count: the mean far share over its sweeps at `distance` and how many there
    are (the share depends on the tokens only, so it differs between variants only by their data)."""
    rows = comparable(depth, distance)
    if rows.empty:
        return pd.DataFrame(columns=["variant_label", "loops", "far_share", "sweeps"])
    out = rows.groupby(["variant_label", "loops"], as_index=False).agg(
        far_share=("far_share", "mean"), sweeps=("far_share", "size")
    )
    return out


def _by_seed(rows: pd.DataFrame, label: str, loops: int, metric: str) -> pd.Series:
    """One value per seed (the mean where a seed has several sweeps) of `label` at `loops`."""
    part = rows[(rows["variant_label"] == label) & (rows["loops"] == loops)]
    return part.groupby("seed")[metric].mean().dropna()


def paired_difference(
    depth: pd.DataFrame,
    side: str,
    reference: str,
    distance: int = DEFAULT_DISTANCE,
    loops: list[int] | None = None,
    noise: stats.NoiseFloor | None = None,
) -> pd.DataFrame:
    """side − reference of each of `METRICS` at every loop count both variants were swept at (or
    `loops`), paired by seed on the same tokens, with its 95 % interval over seeds (`low`, `high`,
    `method`), the seeds per side, the mean far share of the two sides and the per-seed differences
    (seeds both sides have). Empty when either variant has no row of the current definition."""
    rows = comparable(depth, distance)
    if rows.empty:
        return pd.DataFrame(columns=COLUMNS)
    both = sorted(
        set(rows.loc[rows["variant_label"] == side, "loops"])
        & set(rows.loc[rows["variant_label"] == reference, "loops"])
    )
    out = []
    for n in both if loops is None else [n for n in both if n in loops]:
        pair = rows[rows["variant_label"].isin([side, reference]) & (rows["loops"] == n)]
        share = float(pair["far_share"].mean())
        for metric in METRICS:
            a, b = _by_seed(rows, side, n, metric), _by_seed(rows, reference, n, metric)
            iv = stats.difference_interval(a, b, noise)
            shared = a.index.intersection(b.index)
            per_seed = {int(s): float(a[s] - b[s]) for s in shared}
            out.append(
                [n, metric, side, reference, iv.diff, iv.low, iv.high, iv.method, iv.n, iv.n_ref]
                + [share, distance, per_seed]
            )
    return pd.DataFrame(out, columns=COLUMNS)
