"""Task accuracy against inference loops: pure pandas behind the Tasks page.

Input: the rows of `orchestrator.frames.task_scores` (one per eval job, task, subset and loop count, with
the trained model's variant). Seeds of a variant are pooled: the items each seed's eval got right add
up (`correct = acc * n`), and the accuracy is correct / n over all of them, with a Wilson score
interval for that binomial proportion (it stays inside [0, 1] and is honest at 0 or n correct, where
the normal interval collapses to a point). Chance level and the trained loop count come with each
curve so a page can mark them.

Tasks are grouped as knowledge or reasoning by the category the eval job stored (NULL: "other").
Subsets sort by the number in their name (`depth=2` before `depth=10`), the whole task ("all") first.

By category (`category_scores`): the mean over a category's tasks of each task's accuracy, and the same
over every task as the `total`; each task counts once. Loss as a proxy (`loss_proxy`): across the runs of
a selection, the rank correlation between validation loss and each category's accuracy, with a
bootstrap interval over runs.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
from scipy.stats import rankdata

from looplab.analysis import variants

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
    """Per variant (and budget: `analysis.variants.GROUP_COLUMNS`), task, subset and loop count: pooled accuracy over seeds with its 95 % Wilson
    interval (`ci_low`, `ci_high`), pooled acc_norm, items `n`, `n_seeds`, the chance level and the
    trained loop count; ordered by task, variant, subset (see `subset_order`) and loops."""
    if scores.empty:
        return pd.DataFrame(columns=CURVE_COLUMNS)
    df = scores.copy()
    df["variant_id"] = df["variant_id"].fillna("")
    df["variant_label"] = df["variant_label"].fillna("(no train job)")
    df = variants.labelled_by_group(df)  # one series per variant and budget, as on every page
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


# ---------------------------------------------------------------- categories and loss as their proxy

TOTAL = "total"
CATEGORY_COLUMNS = ["variant_id", "variant_label", "category", "loops", "acc", "n_tasks", "tasks"]
PROXY_COLUMNS = ["category", "loops", "rho", "ci_low", "ci_high", "n_runs"]
BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED = 2000, 0


def _per_category(whole: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Mean accuracy over the tasks of each category and over all of them (`TOTAL`), per `keys`."""
    both = pd.concat([whole, whole.assign(category=TOTAL)], ignore_index=True)
    out = both.groupby([*keys, "category"], sort=False, dropna=False).agg(
        acc=("acc", "mean"), n_tasks=("task", "nunique"), tasks=("task", lambda t: ", ".join(sorted(set(t))))
    )
    return out.reset_index()


def category_scores(scores: pd.DataFrame) -> pd.DataFrame:
    """Per variant, category (reasoning, knowledge, other, and `total`) and loop count: the mean over
    tasks of each task's accuracy on its whole item set (subset "all", seeds pooled as in
    `accuracy_curves`). Each task counts once whatever its number of items, as a report's average over
    benchmarks does, so a large generated task does not outweigh a small harness one."""
    curves = accuracy_curves(scores)
    whole = curves[curves["subset"] == ALL]
    if whole.empty:
        return pd.DataFrame(columns=CATEGORY_COLUMNS)
    out = _per_category(whole, ["variant_id", "variant_label", "loops"])
    out["_rank"] = out["category"].map({c: i for i, c in enumerate((*GROUP_ORDER, TOTAL))})
    out = out.sort_values(["variant_label", "_rank", "loops"], kind="stable")
    return out[CATEGORY_COLUMNS].reset_index(drop=True)


def run_category_scores(scores: pd.DataFrame, loops: int | None = None) -> pd.DataFrame:
    """Per trained run (`train_job_id`) and category (and `TOTAL`): the mean accuracy over its tasks
    (subset "all") at `loops`, or at the loop count the run was trained at when None."""
    whole = scores[(scores["subset"] == ALL) & scores["train_job_id"].notna()]
    at = whole["train_loops"] if loops is None else loops
    whole = whole[whole["loops"] == at].assign(category=lambda d: d["category"].fillna("other"))
    if whole.empty:
        return pd.DataFrame(columns=["train_job_id", "category", "loops", "acc", "n_tasks", "tasks"])
    return _per_category(whole, ["train_job_id", "loops"])


def spearman(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Rank correlation of each row of x with the same row of y (…, n) -> (…,): Pearson's r of the
    ranks (ties share their mean rank); NaN where a row's ranks do not vary."""
    rx, ry = rankdata(x, axis=-1), rankdata(y, axis=-1)
    rx, ry = rx - rx.mean(axis=-1, keepdims=True), ry - ry.mean(axis=-1, keepdims=True)
    denominator = np.sqrt((rx * rx).sum(axis=-1) * (ry * ry).sum(axis=-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denominator > 0, (rx * ry).sum(axis=-1) / denominator, np.nan)


def loss_proxy(
    scores: pd.DataFrame,
    runs: pd.DataFrame,
    loss: str = "final_val_loss",
    loops: int | None = None,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> pd.DataFrame:
    """Across the runs of a selection: per category (and `TOTAL`), the rank correlation (Spearman's ρ)
    between each run's validation loss (`runs[loss]`, keyed by `job_id`) and its mean accuracy over the
    category's tasks (`run_category_scores` at `loops`), with a 95 % percentile bootstrap interval over
    runs (runs redrawn with replacement, from a generator seeded with `seed`). A good proxy is
    strongly negative: lower loss, higher accuracy. Fewer than 3 runs: no ρ (NaN)."""
    per_run = run_category_scores(scores, loops)
    if per_run.empty or runs.empty:
        return pd.DataFrame(columns=PROXY_COLUMNS)
    losses = runs[["job_id", loss]].rename(columns={"job_id": "train_job_id", loss: "loss"})
    joined = per_run.merge(losses, on="train_job_id").dropna(subset=["loss", "acc"])
    rng = np.random.default_rng(seed)
    rows = []
    for category, part in joined.groupby("category", sort=False):
        x, y, n = part["loss"].to_numpy(), part["acc"].to_numpy(), len(part)
        rho, low, high = (math.nan,) * 3
        if n >= 3:
            rho = float(spearman(x, y))
            picks = rng.integers(0, n, size=(resamples, n))
            low, high = np.nanpercentile(spearman(x[picks], y[picks]), [2.5, 97.5])
        loops_at = "trained" if loops is None else loops
        rows.append([category, loops_at, rho, float(low), float(high), n])
    return pd.DataFrame(rows, columns=PROXY_COLUMNS)
