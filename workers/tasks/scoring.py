"""Multiple-choice scoring, the harness's way, and the score rows the eval job reports.

Per item, every choice is scored as the continuation `" " + choice` of the context (the harness's
default target delimiter); then
- acc: 1 when the choice with the highest summed log-likelihood is the gold one;
- acc_norm: the same with each log-likelihood divided by the choice's length in characters (the
  harness's acc_norm; in bytes for ASCII text);
ties go to the first choice (numpy's argmax, as in the harness).

Rows: one per subset and one for the whole task (subset "all"), each with n, acc, acc_norm, the
standard error of acc (the sample standard deviation over items / sqrt(n), the harness's
`mean_stderr`; None for a single item) and the chance level (the mean of 1 / number of choices).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from looplab.workers.tasks.schema import ALL_SUBSETS, Item

TARGET_DELIMITER = " "


@dataclass(frozen=True)
class Outcome:
    """One item's result."""

    acc: float  # 1.0 or 0.0
    acc_norm: float
    n_choices: int
    subset: str | None


def _argmax(values: list[float]) -> int:
    return max(range(len(values)), key=lambda i: (values[i], -i))  # the first of equal maxima


def requests(items: list[Item]) -> list[tuple[str, str]]:
    """The (context, continuation) pairs of every choice of every item, item by item."""
    return [(item.context, TARGET_DELIMITER + choice) for item in items for choice in item.choices]


def outcomes(items: list[Item], loglikelihoods: list[float]) -> list[Outcome]:
    """Per item, acc and acc_norm from the log-likelihoods of `requests(items)` (in that order)."""
    out, at = [], 0
    for item in items:
        lls = loglikelihoods[at : at + len(item.choices)]
        at += len(item.choices)
        normed = [ll / len(choice) for ll, choice in zip(lls, item.choices)]
        out.append(
            Outcome(
                acc=float(_argmax(lls) == item.gold),
                acc_norm=float(_argmax(normed) == item.gold),
                n_choices=len(item.choices),
                subset=item.subset,
            )
        )
    if at != len(loglikelihoods):
        raise ValueError(f"{len(loglikelihoods)} log-likelihoods for {at} choices")
    return out


def score_items(
    items: list[Item],
    loglikelihood: Callable[[list[tuple[str, str]]], list[tuple[float, bool]]],
) -> list[Outcome]:
    """Score every item with `loglikelihood` (a scorer's, or a harness LM's on plain pairs)."""
    return outcomes(items, [ll for ll, _ in loglikelihood(requests(items))])


def stderr(values: list[float]) -> float | None:
    """Sample standard deviation / sqrt(n): the harness's standard error of a mean."""
    n = len(values)
    if n < 2:
        return None
    mean = sum(values) / n
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n)


def summarize(group: list[Outcome]) -> dict[str, Any]:
    accs = [o.acc for o in group]
    return {
        "n": len(group),
        "acc": sum(accs) / len(group),
        "acc_norm": sum(o.acc_norm for o in group) / len(group),
        "stderr": stderr(accs),
        "chance": sum(1 / o.n_choices for o in group) / len(group),
    }


def subset_rows(scored: list[Outcome]) -> list[dict[str, Any]]:
    """{"subset", "n", "acc", "acc_norm", "stderr", "chance"} for the whole task ("all") and for each
    subset, subsets in order of first appearance."""
    rows = [{"subset": ALL_SUBSETS, **summarize(scored)}]
    subsets = list(dict.fromkeys(o.subset for o in scored if o.subset is not None))
    for subset in subsets:
        rows.append({"subset": subset, **summarize([o for o in scored if o.subset == subset])})
    return rows
