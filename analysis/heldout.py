"""Does the test split agree with validation? The sign of every variant difference on both.

A depth sweep asked for the test split (workers/evaluate/heldout.py: the validation stream's next `VAL_TOKENS`
tokens) stores `test_loss` beside `val_loss` at each loop count. For each loop count and each pair of
variants that both have rows with both losses there, the difference a − b of their mean losses over
seeds is taken on validation and on test; the pair *agrees* when the two differences have the same sign
(a tie, a difference of exactly 0, agrees only with a tie). The agreement share is the fraction of pairs
that agree: the study's claim "the test set agrees with validation" reads 1.0 where every recipe
comparison comes out the same way on both.

Each difference carries its interval over seeds (`analysis.stats.difference_interval`: paired by seed,
Welch, or the bootstrap with two seeds; undefined with one seed). A pair is *resolved* when both
intervals exclude 0: only there does a sign, and so an agreement, mean more than seed noise, and the
summary counts those apart.

Input: the rows of `orchestrator.frames.depth` (variant_label or recipe, seed, loops, val_loss,
test_loss). Pure pandas/numpy.
"""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pandas as pd

from looplab.analysis.stats import difference_interval
from looplab.analysis.variants import labelled_by_group

LOSSES = {"val": "val_loss", "test": "test_loss"}
COLUMNS = [
    "loops", "variant", "reference", "val_diff", "val_low", "val_high",
    "test_diff", "test_low", "test_high", "agree", "resolved",
]  # fmt: skip


def with_test(depth: pd.DataFrame) -> pd.DataFrame:
    """The rows of `depth` that have both a validation and a test loss."""
    if depth.empty or "test_loss" not in depth:
        return depth.iloc[0:0]
    return labelled_by_group(depth[depth["test_loss"].notna() & depth["val_loss"].notna()])


def sign_agreement(depth: pd.DataFrame) -> pd.DataFrame:
    """One row per loop count and pair of variants (`variant` − `reference`, in label order) with both
    losses: the differences of their means over seeds on validation and on test with their intervals,
    whether their signs agree, and whether both intervals exclude 0 (`resolved`). Empty (with the columns) where fewer than two variants have both at any loop count."""
    rows = with_test(depth)
    if rows.empty:
        return pd.DataFrame(columns=COLUMNS)
    by_seed = rows.groupby(["loops", "variant_label", "seed"])[list(LOSSES.values())].mean()
    out = []
    for n, part in by_seed.groupby(level="loops"):
        part = part.droplevel("loops")
        for ref, var in combinations(sorted(part.index.unique("variant_label")), 2):
            row = {"loops": int(n), "variant": var, "reference": ref}
            for name, column in LOSSES.items():
                iv = difference_interval(part.loc[var, column], part.loc[ref, column])
                row |= {f"{name}_diff": iv.diff, f"{name}_low": iv.low, f"{name}_high": iv.high}
            row["agree"] = bool(np.sign(row["val_diff"]) == np.sign(row["test_diff"]))
            row["resolved"] = all(_excludes_zero(row[f"{k}_low"], row[f"{k}_high"]) for k in LOSSES)
            out.append(row)
    return pd.DataFrame(out, columns=COLUMNS)


def _excludes_zero(low: float, high: float) -> bool:
    """An interval that is defined and lies wholly on one side of 0."""
    return bool(np.isfinite(low) and np.isfinite(high) and (low > 0 or high < 0))


def agreement_share(pairs: pd.DataFrame) -> float | None:
    """The share of `sign_agreement`'s pairs whose signs agree (None without pairs)."""
    return None if pairs.empty else float(pairs["agree"].mean())


def summary(pairs: pd.DataFrame) -> str:
    """The figure in a sentence: `3 of 4 variant pairs (75 %) ...`."""
    share = agreement_share(pairs)
    if share is None:
        return "no two variants have both a validation and a test loss at one loop count"
    agree, total = int(pairs["agree"].sum()), len(pairs)
    resolved = pairs[pairs["resolved"]]
    return (
        f"{agree} of {total} variant pairs ({share:.0%}) differ in the same direction on the test split as "
        f"on validation, over {pairs['loops'].nunique()} loop counts; of the {len(resolved)} whose "
        f"difference is resolved on both (the interval over seeds excludes 0), {int(resolved['agree'].sum())} "
        "agree"
    )
