"""The Queue page's numbers: jobs per state, the running jobs with progress, tokens/s, ETA and heartbeat
age, and the recent failures, from the job listing (`orchestrator.frames.jobs`) and the latest metrics.

They compare job states, whose one home is `orchestrator/states.py`, so they live with the pages
(analysis/ imports no orchestrator). Pure pandas; tested in tests/dashboard/test_listing.py.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd

from looplab.analysis.variants import MISSING, present
from looplab.orchestrator.health import HELD, shown_states
from looplab.orchestrator.states import JobStatus

# in the order a job moves through them; `held` (a failed job a health rule stopped for a person, which
# `looplab retry` resumes from its checkpoint) beside failed, as `looplab status` counts it
JOB_STATES = tuple(
    state
    for status in JobStatus
    for state in ((status.value, HELD) if status == JobStatus.FAILED else (status.value,))
)


def shown_status(jobs: pd.DataFrame) -> pd.Series:
    """Each job's state as a person reads it: `held` for a job a hold stopped (orchestrator/health.py)."""
    errors = jobs["error"] if "error" in jobs else pd.Series(None, index=jobs.index, dtype=object)
    return pd.Series(shown_states(jobs["status"], errors), index=jobs.index)


def status_counts(jobs: pd.DataFrame) -> pd.DataFrame:
    """Number of jobs per state, every state listed (a real zero here means no job in that state)."""
    counts = shown_status(jobs).value_counts() if not jobs.empty else pd.Series(dtype=int)
    states = list(JOB_STATES) + sorted(set(counts.index) - set(JOB_STATES))
    return pd.DataFrame({"status": states, "jobs": [int(counts.get(s, 0)) for s in states]})


def format_duration(seconds) -> str:
    """'1h 02m', '3m 05s', '42s'; '—' when unknown."""
    if not present(seconds) or seconds < 0:
        return MISSING
    s = int(round(seconds))
    if s >= 3600:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m {s % 60:02d}s"
    return f"{s}s"


def running_jobs(jobs: pd.DataFrame, latest: pd.DataFrame, now: float | None = None) -> pd.DataFrame:
    """Running jobs with progress (fraction), tokens/s (last reported), ETA and heartbeat age."""
    cols = [
        "job_id",
        "kind",
        "recipe",
        "size",
        "seed",
        "progress",
        "progress_done",
        "progress_total",
        "tokens_per_s",
        "eta",
        "heartbeat_age_s",
    ]
    r = jobs[jobs["status"] == JobStatus.RUNNING].copy() if not jobs.empty else jobs
    if r.empty:
        return pd.DataFrame(columns=cols)
    now = time.time() if now is None else now
    total = r["progress_total"].where(r["progress_total"] > 0)
    r["progress"] = (r["progress_done"] / total).clip(0, 1)
    tps = latest[latest["key"] == "tokens_per_s"].set_index("job_id")["value"] if not latest.empty else {}
    r["tokens_per_s"] = r["job_id"].map(tps) if len(tps) else np.nan
    r["eta"] = r["eta_s"].map(format_duration)
    r["heartbeat_age_s"] = now - r["heartbeat_at"]
    return r[cols].sort_values("job_id").reset_index(drop=True)


def recent_failures(jobs: pd.DataFrame, n: int = 10) -> pd.DataFrame:
    """The last `n` failed jobs with their error (the traceback's last line first, then all of it)."""
    cols = ["job_id", "kind", "recipe", "size", "seed", "finished_at", "error_summary", "error"]
    f = jobs[jobs["status"] == JobStatus.FAILED].copy() if not jobs.empty else jobs
    if f.empty:
        return pd.DataFrame(columns=cols)
    f["error_summary"] = f["error"].map(_last_line)
    f = f.sort_values(["finished_at", "job_id"], ascending=False, na_position="last").head(n)
    return f[cols].reset_index(drop=True)


def _last_line(text) -> str:
    if not isinstance(text, str) or not text.strip():
        return MISSING
    return text.strip().splitlines()[-1]
