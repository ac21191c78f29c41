"""Does the test split agree with validation? The sign of every variant difference on both.

A depth sweep asked for the test split (workers/heldout.py: the validation stream's next `VAL_TOKENS`
tokens) stores `test_loss` beside `val_loss` at each loop count. For each loop count and each pair of
variants that both have rows with both losses there, the difference a − b of their mean losses over
seeds is taken on validation and on test; the pair *agrees* when the two differences have the same sign
(a tie, a difference of exactly 0, agrees only with a tie). The agreement share is the fraction of pairs
that agree: the study's claim "the test set agrees with validation" reads 1.0 where every recipe
comparison comes out the same way on both.

Input: the rows of `orchestrator.frames.depth` (variant_label or recipe, seed, loops, val_loss,
test_loss). Pure pandas/numpy.
"""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pandas as pd

from analysis.variants import with_variants

COLUMNS = ["loops", "variant", "reference", "val_diff", "test_diff", "agree"]


def with_test(depth: pd.DataFrame) -> pd.DataFrame:
    """The rows of `depth` that have both a validation and a test loss."""
    if depth.empty or "test_loss" not in depth:
        return depth.iloc[0:0]
    return with_variants(depth[depth["test_loss"].notna() & depth["val_loss"].notna()])


def sign_agreement(depth: pd.DataFrame) -> pd.DataFrame:
    """One row per loop count and pair of variants (`variant` − `reference`, in label order) with both
    losses: the differences of their means over seeds on validation and on test, and whether their signs
    agree. Empty (with the columns) where fewer than two variants have both at any loop count."""
    rows = with_test(depth)
    if rows.empty:
        return pd.DataFrame(columns=COLUMNS)
    means = rows.groupby(["loops", "variant_label"])[["val_loss", "test_loss"]].mean()
    out = []
    for n, part in means.groupby(level="loops"):
        part = part.droplevel("loops")
        for ref, var in combinations(sorted(part.index), 2):
            val = float(part.loc[var, "val_loss"] - part.loc[ref, "val_loss"])
            test = float(part.loc[var, "test_loss"] - part.loc[ref, "test_loss"])
            out.append([int(n), var, ref, val, test, bool(np.sign(val) == np.sign(test))])
    return pd.DataFrame(out, columns=COLUMNS)


def agreement_share(pairs: pd.DataFrame) -> float | None:
    """The share of `sign_agreement`'s pairs whose signs agree (None without pairs)."""
    return None if pairs.empty else float(pairs["agree"].mean())


def summary(pairs: pd.DataFrame) -> str:
    """The figure in a sentence: `3 of 4 variant pairs (75 %) ...`."""
    share = agreement_share(pairs)
    if share is None:
        return "no two variants have both a validation and a test loss at one loop count"
    agree, total = int(pairs["agree"].sum()), len(pairs)
    return (
        f"{agree} of {total} variant pairs ({share:.0%}) differ in the same direction on the test split as "
        f"on validation, over {pairs['loops'].nunique()} loop counts"
    )
