"""Extrapolation in depth: pure pandas behind the Extrapolation page.

A looped model trained at one loop count can be run at others. The page asks how each variant behaves
beyond (and below) the depth it was trained at, measured in *effective depth* (layers a token passes:
n_prelude + n_recurrent · loops + n_coda), so a 2-layer block looped 4 times and a 4-layer block looped
2 times share an axis:

- the validation loss of the depth sweeps against the inference effective depth, mean over seeds with
  the min–max band, and the trained depth (`trained_depth`, the run's `effective_depth`) to mark;
- task accuracy (eval jobs' `task_scores`) against the same axis where there are any;
- the loop geometry per round (`model/geometry.py`: rel_change, angle, state_var) at one depth;
- the interaction matrix of one variant at one depth, mean over seeds.

Rows are grouped by variant, size and budget (`analysis.variants.GROUP_COLUMNS`, the rule of every
page): seeds of one variant at one budget are averaged, two variants or two budgets never are. Inputs are the frames of `orchestrator.frames` (depth, round_deltas, round_interactions,
task_scores).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from looplab.analysis import tasks, variants
from looplab.analysis.curves import depth_curves
from looplab.model import fields

GEOMETRY_METRICS = {
    "rel_change": "relative update ‖h_t − h_{t−1}‖ / ‖h_{t−1}‖",
    "angle": "angle between h_t and h_{t−1} (radians)",
    "state_var": "variance of h_t across channels",
}
SUMMARY_COLUMNS = [
    "variant_label",
    "size",
    "trained_depth",
    "loss_at_trained",
    "best_depth",
    "best_loss",
    "deepest",
    "loss_at_deepest",
    "gap_at_deepest",
    "n_seeds",
]
INTERACTION_COLUMNS = ["variant_id", "variant_label", "loops", "skipped", "round", "mean", "std", "n_seeds"]
SPREAD = ["mean", "std", "min", "max", "n_seeds"]


def _with_depths(df: pd.DataFrame, loops: str = "loops") -> pd.DataFrame:
    """`df` with `inference_depth` (at its `loops`) and `trained_depth` (the run's effective depth);
    NaN where the architecture columns are missing."""
    out = df.copy()
    if {"n_prelude", "n_recurrent", "n_coda"} <= set(out.columns):
        out["inference_depth"] = out["n_prelude"] + out["n_recurrent"] * out[loops] + out["n_coda"]
    else:
        out["inference_depth"] = np.nan
    out["trained_depth"] = out["effective_depth"] if "effective_depth" in out.columns else np.nan
    return out


def loss_curves(depth: pd.DataFrame, value: str = "val_loss") -> pd.DataFrame:
    """Per variant and evaluated loop count: `value` mean, std, min, max over seeds and `n_seeds`, with
    `inference_depth`, `trained_depth` and `at_trained` (the evaluated depth is the trained one)."""
    if depth.empty:
        return pd.DataFrame(
            columns=[
                "variant_id",
                "variant_label",
                "loops",
                *SPREAD,
                "inference_depth",
                "trained_depth",
                "at_trained",
            ]
        )
    out = _with_depths(depth_curves(depth, value))
    out["at_trained"] = out["inference_depth"] == out["trained_depth"]
    return out.sort_values(["variant_label", "inference_depth"]).reset_index(drop=True)


def trained_marks(curves: pd.DataFrame) -> pd.DataFrame:
    """One row per variant with a known trained depth: variant_label, trained_depth (where the page
    draws its vertical rule)."""
    if curves.empty:
        return pd.DataFrame(columns=["variant_label", "trained_depth"])
    marks = curves.dropna(subset=["trained_depth"]).drop_duplicates("variant_label")
    return marks[["variant_label", "trained_depth"]].reset_index(drop=True)


def summary(curves: pd.DataFrame) -> pd.DataFrame:
    """Per variant: the mean loss at the trained depth (NaN when the sweep skipped it), the best
    evaluated depth and its loss, the deepest evaluated depth, its loss and `gap_at_deepest` = loss at
    the deepest − loss at the trained depth (> 0: running deeper than trained hurts)."""
    if curves.empty:
        return pd.DataFrame(columns=SUMMARY_COLUMNS)
    rows = []
    for label, part in curves.groupby("variant_label", sort=True):
        part = part.sort_values("inference_depth")
        trained = part[part["at_trained"]]
        at_trained = float(trained["mean"].iloc[0]) if not trained.empty else np.nan
        best = part.loc[part["mean"].idxmin()]
        deepest = part.iloc[-1]
        rows.append(
            {
                "variant_label": label,
                "size": part["size"].iloc[0] if "size" in part else None,
                "trained_depth": part["trained_depth"].iloc[0],
                "loss_at_trained": at_trained,
                "best_depth": best["inference_depth"],
                "best_loss": best["mean"],
                "deepest": deepest["inference_depth"],
                "loss_at_deepest": deepest["mean"],
                "gap_at_deepest": deepest["mean"] - at_trained,
                "n_seeds": int(part["n_seeds"].max()),
            }
        )
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


def accuracy_curves(scores: pd.DataFrame, subset: str = tasks.ALL) -> pd.DataFrame:
    """Task accuracy per variant, task and loop count for one subset (`analysis.tasks.accuracy_curves`:
    seeds pooled, Wilson interval), with `inference_depth` and `trained_depth` of the variant."""
    curves = tasks.accuracy_curves(scores)
    if curves.empty:
        return curves.assign(inference_depth=pd.Series(dtype=float), trained_depth=pd.Series(dtype=float))
    info = variants.variant_info(scores).reset_index()
    arch = [c for c in ("variant_id", "n_prelude", "n_recurrent", "n_coda", "effective_depth") if c in info]
    curves = curves[curves["subset"] == subset].merge(info[arch], on="variant_id", how="left")
    out = _with_depths(curves)
    return out.sort_values(["task", "variant_label", "inference_depth"]).reset_index(drop=True)


def geometry_depths(deltas: pd.DataFrame, metric: str) -> list[int]:
    """The forward loop counts at which `metric` was measured (rows where it is missing left out)."""
    check_metric(metric)
    if deltas.empty:
        return []
    return sorted(int(n) for n in deltas.dropna(subset=[metric])["loops"].unique())


def check_metric(metric: str) -> str:
    return fields.choice("metric", metric, GEOMETRY_METRICS)


def geometry_curves(deltas: pd.DataFrame, metric: str, loops: int) -> pd.DataFrame:
    """`metric` per variant and round of the forward with `loops` rounds: mean, std, min, max over seeds
    and n_seeds; sweeps that did not measure it (NULL) are left out."""
    check_metric(metric)
    part = deltas[deltas["loops"] == loops].dropna(subset=[metric]) if not deltas.empty else deltas
    if part.empty:
        return pd.DataFrame(columns=["variant_id", "variant_label", "loops", "round", *SPREAD])
    out = variants.group_aggregate(part, metric, by=["loops", "round"])
    return out.sort_values(["variant_label", "round"]).reset_index(drop=True)


def interaction_options(interactions: pd.DataFrame) -> pd.DataFrame:
    """The (variant_label, loops) pairs with an interaction matrix, sorted."""
    if interactions.empty:
        return pd.DataFrame(columns=["variant_label", "loops"])
    labelled = variants.labelled_by_group(interactions)
    pairs = labelled[["variant_label", "loops"]].drop_duplicates()
    return pairs.sort_values(["variant_label", "loops"]).reset_index(drop=True)


def interaction_matrix(interactions: pd.DataFrame, variant_label: str, loops: int) -> pd.DataFrame:
    """The interaction matrix of one variant at `loops` rounds in long form: one row per (skipped,
    round) pair with the mean, std and n_seeds over the variant's seeds."""
    if interactions.empty:
        return pd.DataFrame(columns=INTERACTION_COLUMNS)
    labelled = variants.labelled_by_group(interactions)
    part = labelled[(labelled["variant_label"] == variant_label) & (labelled["loops"] == loops)]
    if part.empty:
        return pd.DataFrame(columns=INTERACTION_COLUMNS)
    agg = variants.seed_aggregate(
        part, "interaction", by=["variant_id", "variant_label", "loops", "skipped", "round"]
    )
    return agg[INTERACTION_COLUMNS].sort_values(["skipped", "round"]).reset_index(drop=True)
