"""Task accuracy against inference loops: pure pandas behind the Tasks page.

Input: the rows of `orchestrator.frames.task_scores` (one per eval job, task, subset and loop count, with
the trained model's variant). Seeds of a variant are pooled: the items each seed's eval got right add
up (`correct = acc * n`), and the accuracy is correct / n over all of them, with a Wilson score
interval for that binomial proportion (it stays inside [0, 1] and is honest at 0 or n correct, where
the normal interval collapses to a point). Chance level and the trained loop count come with each
curve so a page can mark them.

Tasks are grouped as knowledge or reasoning by the category the eval job stored (NULL: "other").
Subsets sort by the number in their name (`depth=2` before `depth=10`), the whole task ("all") first.
"""

from __future__ import annotations

import math
import re

import pandas as pd

Z_95 = 1.959963984540054  # two-sided 95 % normal quantile
ALL = "all"
GROUP_ORDER = ("reasoning", "knowledge", "other")
CURVE_KEYS = ["variant_id", "variant_label", "task", "category", "subset", "loops"]
CURVE_COLUMNS = [*CURVE_KEYS, "acc", "ci_low", "ci_high", "acc_norm", "n", "n_seeds", "chance", "train_loops"]


def wilson(correct: float, n: float, z: float = Z_95) -> tuple[float, float]:
    """The Wilson score interval (low, high) of a binomial proportion correct / n; (nan, nan) for n=0."""
    if n <= 0:
        return math.nan, math.nan
    p = correct / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def _number_in(subset: str) -> float:
    found = re.search(r"-?\d+(\.\d+)?", subset)
    return float(found.group()) if found else math.inf


def subset_order(subsets) -> list[str]:
    """ "all" first, then by the number in the name (depth=2 < depth=10), then by name."""
    unique = list(dict.fromkeys(str(s) for s in subsets))
    return sorted(unique, key=lambda s: (s != ALL, _number_in(s), s))


def task_groups(scores: pd.DataFrame) -> dict[str, list[str]]:
    """{group: its tasks, sorted}: reasoning, knowledge, other (a task with no stored category)."""
    if scores.empty:
        return {}
    categories = scores[["task", "category"]].drop_duplicates("task")
    out: dict[str, list[str]] = {}
    for group in GROUP_ORDER:
        in_group = categories["category"].fillna("other").map(lambda c: c if c in GROUP_ORDER else "other")
        tasks = sorted(categories.loc[in_group == group, "task"])
        if tasks:
            out[group] = tasks
    return out


def accuracy_curves(scores: pd.DataFrame) -> pd.DataFrame:
    """Per variant, task, subset and loop count: pooled accuracy over seeds with its 95 % Wilson
    interval (`ci_low`, `ci_high`), pooled acc_norm, items `n`, `n_seeds`, the chance level and the
    trained loop count; ordered by task, variant, subset (see `subset_order`) and loops."""
    if scores.empty:
        return pd.DataFrame(columns=CURVE_COLUMNS)
    df = scores.copy()
    df["variant_id"] = df["variant_id"].fillna("")
    df["variant_label"] = df["variant_label"].fillna("(no train job)")
    df["category"] = df["category"].fillna("other")
    df["correct"] = df["acc"] * df["n"]
    df["correct_norm"] = df["acc_norm"] * df["n"]
    df["seed_key"] = df["train_job_id"].fillna(df["eval_job_id"])
    grouped = df.groupby(CURVE_KEYS, sort=False, dropna=False)
    out = grouped.agg(
        correct=("correct", "sum"),
        correct_norm=("correct_norm", lambda s: s.sum(min_count=len(s))),
        n=("n", "sum"),
        n_seeds=("seed_key", "nunique"),
        chance=("chance", "mean"),
        train_loops=("train_loops", "first"),
    ).reset_index()
    out["acc"] = out["correct"] / out["n"]
    out["acc_norm"] = out["correct_norm"] / out["n"]
    intervals = [wilson(c, n) for c, n in zip(out["correct"], out["n"])]
    out["ci_low"] = [low for low, _ in intervals]
    out["ci_high"] = [high for _, high in intervals]
    order = {s: i for i, s in enumerate(subset_order(out["subset"]))}
    out["_subset_rank"] = out["subset"].map(order)
    out = out.sort_values(["task", "variant_label", "_subset_rank", "loops"], kind="stable")
    return out[CURVE_COLUMNS].reset_index(drop=True)


def accuracy_wide(curves: pd.DataFrame, subset: str = ALL) -> pd.DataFrame:
    """One row per (task, variant), one column per loop count (`acc@N`) for one subset: the table a
    paper shows, best loop count `best_loops` and the trained one beside it."""
    part = curves[curves["subset"] == subset]
    if part.empty:
        return pd.DataFrame(columns=["task", "variant_label", "train_loops", "best_loops"])
    wide = part.pivot_table(index=["task", "variant_label"], columns="loops", values="acc", aggfunc="first")
    best = wide.idxmax(axis=1)
    wide.columns = [f"acc@{int(c)}" for c in wide.columns]
    wide = wide.reset_index()
    trained = part.groupby(["task", "variant_label"])["train_loops"].first().reset_index()
    wide = wide.merge(trained, on=["task", "variant_label"], how="left")
    wide["best_loops"] = best.to_numpy()
    return wide
