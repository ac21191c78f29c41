"""What people read in a terminal: the job table (`looplab status`, `Queue.status()`) and the
scheduler's live progress lines. Both show columns of the one job listing (`orchestrator.frames.job_listing`:
jobs joined with latest_metrics in one query, never one per job), so a listing of thousands of jobs stays
fast and reads like the dashboard's Queue page."""

from __future__ import annotations

import time

import pandas as pd
from sqlalchemy import Engine

from looplab.orchestrator.frames import job_listing
from looplab.orchestrator.health import shown_states
from looplab.orchestrator.states import JobStatus

COLUMNS = [
    "id",
    "grid",
    "kind",
    "recipe",
    "size",
    "seed",
    "status",
    "owner",
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


GRID_WIDTH = 14  # a longer grid name is cut with "…": the table stays within 120 columns
BAR_WIDTH = 10  # the progress bar's cells in the table (the bar with its percentage: BAR_WIDTH + 7)


def _cut(text: object, width: int) -> str:
    text = "" if text is None or (isinstance(text, float) and text != text) else str(text)
    return text if len(text) <= width else text[: width - 1] + "…"


def shown_status(df: pd.DataFrame) -> pd.Series:
    """Each job's state as a person reads it: a job a health rule held for a person is failed in the
    database, and its error says it is held (orchestrator/health.py `Finding.error`), so it reads `held`."""
    return pd.Series(shown_states(df["status"], df["error"]), index=df.index)


def table(df: pd.DataFrame, stale_s: float = STALE_S) -> str:
    """A compact text table with the job's grid, a progress bar and ETA per job, under 120 columns
    before the note; a running job silent for more than `stale_s` seconds is noted (its driver is
    paused or gone)."""
    if df.empty:
        return "no jobs"
    now = time.time()
    prog_w = BAR_WIDTH + 7
    lab = df["owner"].nunique() > 1 if "owner" in df else False
    lines = [
        f"{'id':>4} {'grid':<{GRID_WIDTH}} {'kind':<12} {'recipe':<8} {'size':<6} {'seed':>4} {'status':<9} "
        f"{'att':>3} {'progress':<{prog_w}} {'eta':>7} {'train':>7} {'val':>7}  note"
    ]
    shown = shown_status(df)
    for r, status in zip(df.itertuples(), shown):
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
            bar(r.progress_done, r.progress_total, BAR_WIDTH)
            if running
            else (bar(1, 1, BAR_WIDTH) if r.status == JobStatus.SUCCEEDED else " " * prog_w)
        )
        if lab:  # several people's jobs: whose each is
            note = f"by {r.owner} {note}".rstrip()
        lines.append(
            f"{r.id:>4} {_cut(r.grid, GRID_WIDTH):<{GRID_WIDTH}} {r.kind:<12} {_cut(r.recipe, 8):<8} "
            f"{_cut(r.size, 6):<6} {seed!s:>4} {status:<9} "
            f"{r.attempts:>3} {prog:<{prog_w}} {fmt_eta(r.eta_s) if running else '':>7} "
            f"{_num(r.train_loss):>7} {_num(r.val_loss):>7}  {note}"
        )
    counts = shown.value_counts().to_dict()
    lines.append("  ".join(f"{k}: {v}" for k, v in sorted(counts.items())))
    return "\n".join(lines)


def last_grids(eng: Engine, n: int = 3) -> str:
    """What `looplab status` says when no job is queued or running: the outcome of the last `n` grids
    (by id), each with its jobs per state and when its last job finished, so a finished queue is not
    read as an empty one."""
    listing = job_listing(eng)
    if listing.empty:
        return "no jobs: the database is empty (looplab submit FILE adds some)"
    lines = ["queue empty; the last grids:"]
    grids = listing.groupby(listing["grid_id"].fillna(-1), sort=True)
    for grid_id, jobs in list(grids)[-n:]:
        counts = ", ".join(f"{v} {k}" for k, v in sorted(shown_status(jobs).value_counts().items()))
        finished = jobs["finished_at"].max()
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(finished)) if pd.notna(finished) else "—"
        name = jobs["grid"].iloc[0] if grid_id != -1 else "(no grid)"
        lines.append(
            f"  grid {int(grid_id) if grid_id != -1 else '-'} {name}: {counts}; last finished {when}"
        )
    failed = listing[listing["status"] == JobStatus.FAILED]
    hint = f"; `looplab logs {int(failed['job_id'].iloc[-1])}` for the last failure" if len(failed) else ""
    lines.append(f"(`looplab status --all` lists every job, `--grid NAME` one grid's{hint})")
    return "\n".join(lines)


def looplab_command(db: str | None = None) -> str:
    """`looplab` as it can be typed here, for the lines a demo ends with: `looplab` when the one on PATH
    is this environment's, else this environment's script (`.venv/bin/looplab` from the clone after
    `make demo`, which does not activate the environment), else `python -m looplab`; with `--db DB`."""
    import shutil
    import sys
    from pathlib import Path

    script = Path(sys.prefix) / "bin" / "looplab"
    on_path = shutil.which("looplab")
    if on_path and script.exists() and Path(on_path).resolve() == script.resolve():
        cmd = "looplab"
    elif script.exists():
        cmd = str(script.relative_to(Path.cwd())) if script.is_relative_to(Path.cwd()) else str(script)
    else:
        cmd = f"{sys.executable} -m looplab"
    return cmd + (f" --db {db}" if db else "")


def _figure(train_loss: float | None, val_loss: float | None) -> str:
    """The live line's figure: the train loss so far, else (a depth sweep, an eval) the val loss so far."""
    if _num(train_loss) or not _num(val_loss):
        return f"loss {_num(train_loss)}"
    return f"val {_num(val_loss)}"


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
            f"eta {fmt_eta(r.eta_s):>6}  {_figure(r.train_loss, r.val_loss)}",
            flush=True,
        )
