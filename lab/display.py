"""What people read in a terminal: the job table (`looplab status`, `Queue.status()`) and the
scheduler's live progress lines. Both show columns of the one job listing (`orchestrator.frames.job_listing`:
jobs joined with latest_metrics in one query, never one per job), so a listing of thousands of jobs stays
fast and reads like the dashboard's Queue page."""

from __future__ import annotations

import time

import pandas as pd
from sqlalchemy import Engine

from looplab.orchestrator.frames import job_listing
from looplab.orchestrator.states import JobStatus

COLUMNS = [
    "id",
    "grid",
    "kind",
    "recipe",
    "size",
    "seed",
    "status",
    "attempts",
    "progress_done",
    "progress_total",
    "eta_s",
    "train_loss",
    "val_loss",
    "gpu_ids",
    "heartbeat_at",
    "waiting_for",
    "error",
]
# a driver touches its running jobs every second: this much silence is a paused (the database full or
# unreachable) or lost driver, which `table` notes beside the job
STALE_S = 30.0


def status_frame(
    eng: Engine, grid: str | int | None = None, all_jobs: bool = True, job_ids: list[int] | None = None
) -> pd.DataFrame:
    """One row per job with its latest train/val loss. `all_jobs=False` hides finished jobs."""
    listing = job_listing(eng, grid=grid, active_only=not all_jobs, job_ids=job_ids)
    df = listing.rename(columns={"job_id": "id"})[COLUMNS].copy()
    df["seed"] = df["seed"].astype("Int64")
    df["error"] = df["error"].map(
        lambda e: e.strip().splitlines()[-1][:100] if isinstance(e, str) and e else ""
    )
    return df


def bar(done: float | None, total: float | None, width: int = 20) -> str:
    # NULL progress arrives from pandas as NaN, which is truthy: test for it, or a job that has not
    # reported yet shows as 100 % done
    if done is None or total is None or pd.isna(done) or pd.isna(total) or total <= 0:
        return " " * (width + 7)
    frac = max(0.0, min(1.0, done / total))
    full = int(frac * width)
    return "[" + "#" * full + "-" * (width - full) + f"] {frac * 100:3.0f}%"


def fmt_eta(eta_s: float | None) -> str:
    if eta_s is None or eta_s != eta_s:  # None or NaN
        return ""
    eta_s = int(eta_s)
    return (
        f"{eta_s // 3600}h{eta_s % 3600 // 60:02d}m" if eta_s >= 3600 else f"{eta_s // 60}m{eta_s % 60:02d}s"
    )


def _num(v: object, fmt: str = ".3f") -> str:
    return "" if v is None or v != v else format(v, fmt)


def table(df: pd.DataFrame, stale_s: float = STALE_S) -> str:
    """A compact text table with a progress bar and ETA per job; a running job silent for more than
    `stale_s` seconds is noted (its driver is paused or gone)."""
    if df.empty:
        return "no jobs"
    now = time.time()
    lines = [
        f"{'id':>4} {'kind':<12} {'recipe':<8} {'size':<6} {'seed':>4} {'status':<9} {'att':>3} "
        f"{'progress':<27} {'eta':>7} {'train':>7} {'val':>7}  note"
    ]
    for r in df.itertuples():
        seed = "" if pd.isna(r.seed) else int(r.seed)
        running = r.status == JobStatus.RUNNING
        note = r.error if r.error else (f"gpu {r.gpu_ids}" if r.gpu_ids and running else "")
        silent = now - r.heartbeat_at if running and pd.notna(r.heartbeat_at) else 0.0
        if silent > stale_s:
            note = (
                f"no heartbeat for {fmt_eta(silent)}: its driver is paused (the database full or "
                f"unreachable: see its output) or gone {note}"
            ).rstrip()
        if r.status == JobStatus.QUEUED and isinstance(r.waiting_for, str):  # missing is NaN, not None
            note = f"waiting for {r.waiting_for}"
        prog = (
            bar(r.progress_done, r.progress_total)
            if running
            else (bar(1, 1) if r.status == JobStatus.SUCCEEDED else " " * 27)
        )
        lines.append(
            f"{r.id:>4} {r.kind:<12} {str(r.recipe or ''):<8} {str(r.size or ''):<6} {seed!s:>4} {r.status:<9} "
            f"{r.attempts:>3} {prog:<27} {fmt_eta(r.eta_s) if running else '':>7} "
            f"{_num(r.train_loss):>7} {_num(r.val_loss):>7}  {note}"
        )
    counts = df["status"].value_counts().to_dict()
    lines.append("  ".join(f"{k}: {v}" for k, v in sorted(counts.items())))
    return "\n".join(lines)


def print_progress(eng: Engine, job_ids: list[int]) -> None:
    """The scheduler's live view: one line per running job."""
    df = status_frame(eng, job_ids=job_ids)
    stamp = time.strftime("%H:%M:%S")
    for r in df.itertuples():
        what = " ".join(
            str(x) for x in (r.kind, r.recipe or "", "" if pd.isna(r.seed) else f"s{r.seed}") if x
        )
        print(
            f"{stamp} job {r.id:>3} {what:<28} {bar(r.progress_done, r.progress_total)} "
            f"eta {fmt_eta(r.eta_s):>6}  loss {_num(r.train_loss)}",
            flush=True,
        )
