"""Convergence of the rounds against bf16: how much of the previous round's change each round still
makes, and the round from which the change is below what a bf16 state can hold.

Input: the depth sweeps' `orchestrator.frames.round_deltas` (rel_change, change_ratio and
bf16_resolution per round; the last two NULL for sweeps stored before they were measured, which are
left out). Definitions in model/geometry.py: change_ratio_t
= mean ‖Δ_t‖ / mean ‖Δ_{t−1}‖; bf16_round = the first round whose relative change falls below
‖bf16(h) − h‖ / ‖h‖ of the state it changes. Seeds of a variant are averaged. Pure pandas.
"""

from __future__ import annotations

import pandas as pd

from looplab.analysis.variants import labelled_by_group, seed_aggregate

ROUND_COLUMNS = ["variant_label", "loops", "round", "metric", "mean", "min", "max", "n_seeds"]
BF16_COLUMNS = ["variant_label", "loops", "bf16_round", "earliest", "latest", "n_seeds", "never"]
ROUND_METRICS = ("change_ratio", "rel_change", "bf16_resolution")


def round_curves(deltas: pd.DataFrame, loops: int) -> pd.DataFrame:
    """Per variant and round of the forward with `loops` rounds, long format: the change ratio, the
    relative change and the bf16 resolution (`metric`), mean and range over seeds."""
    if deltas.empty or "change_ratio" not in deltas:
        return pd.DataFrame(columns=ROUND_COLUMNS)
    d = labelled_by_group(deltas[(deltas["loops"] == loops) & deltas["bf16_resolution"].notna()])
    parts = []
    for metric in ROUND_METRICS:
        part = seed_aggregate(d.dropna(subset=[metric]), metric, by=["variant_label", "loops", "round"])
        parts.append(part.assign(metric=metric))
    out = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=ROUND_COLUMNS)
    return out[ROUND_COLUMNS].sort_values(["variant_label", "metric", "round"]).reset_index(drop=True)


def first_below(rounds: pd.DataFrame) -> float:
    """The first round (by `round`) whose rel_change is below its bf16_resolution; NaN when none is."""
    below = rounds[rounds["rel_change"] < rounds["bf16_resolution"]]
    return float(below["round"].min()) if not below.empty else float("nan")


def bf16_rounds(deltas: pd.DataFrame) -> pd.DataFrame:
    """Per variant and loop count: the mean first round below bf16 resolution over the seeds that reach
    it, the earliest and latest such round, the sweeps measured (`n_seeds`) and how many never reach it
    within the forward (`never`). Read from the rounds themselves (what the sweep stores as each depth
    row's `bf16_round`), so a sweep that measured no resolution is told apart from one never below it."""
    if deltas.empty or "bf16_resolution" not in deltas:
        return pd.DataFrame(columns=BF16_COLUMNS)
    d = labelled_by_group(deltas[deltas["bf16_resolution"].notna()])
    if d.empty:
        return pd.DataFrame(columns=BF16_COLUMNS)
    keys = ["variant_label", "sweep_job_id", "loops"]
    per_sweep = [(*key, first_below(rounds)) for key, rounds in d.groupby(keys)]
    firsts = pd.DataFrame(per_sweep, columns=[*keys, "bf16_round"])
    grouped = firsts.groupby(["variant_label", "loops"])["bf16_round"]
    out = grouped.agg(bf16_round="mean", earliest="min", latest="max", n_seeds="size").reset_index()
    out["never"] = grouped.apply(lambda s: int(s.isna().sum())).to_numpy()
    return out[BF16_COLUMNS]
