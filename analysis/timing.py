"""Whether a timing can be trusted: the `contended` flag of timing rows.

A timing row (train_results, decode_benches) records `concurrent_jobs`, the number of other jobs that
ran on its node at any time during the measurement (orchestrator/scheduler.py). `contended` is True
when that number is above 0, False at 0, and missing (None) for rows stored before it was recorded:
unknown is not the same as uncontended.
"""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

WHERE = ["variant_id", "size", "context_len", "batch_size", "device", "dtype"]


def contended(counts: Iterable[object]) -> bool | None:
    """True if any count is above 0; False if all are 0; None if any is missing and none above 0."""
    counts = list(counts)
    seen = [c for c in counts if c is not None and not pd.isna(c)]
    if any(float(c) > 0 for c in seen):
        return True
    return None if len(seen) < len(counts) or not seen else False


def mark_pairs(pairs: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """Iso-time pairs with `contended`: either run of the pair trained beside another job."""
    if pairs.empty or "concurrent_jobs" not in runs.columns:
        return pairs.assign(contended=pd.Series(dtype=object))
    by_job = runs.set_index("job_id")["concurrent_jobs"].to_dict()
    flags = [contended([by_job.get(a), by_job.get(b)]) for a, b in zip(pairs["job_id"], pairs["ref_job_id"])]
    return pairs.assign(contended=pd.Series(flags, index=pairs.index, dtype=object))


def mark_decode(table: pd.DataFrame, rows: pd.DataFrame) -> pd.DataFrame:
    """A decode table (one row per variant x size x context x batch x device x dtype) with `contended`:
    any bench row of that cell was timed beside another job."""
    if table.empty or "concurrent_jobs" not in rows.columns:
        return table.assign(contended=pd.Series(dtype=object))
    flags = (
        rows.groupby(WHERE, dropna=False)["concurrent_jobs"]
        .agg(lambda s: contended(list(s)))
        .rename("contended")
        .reset_index()
    )
    return table.merge(flags, on=WHERE, how="left")
