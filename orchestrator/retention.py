"""What stays on disk once a job has succeeded (the retention rule), `looplab gc`, and the disk a study's
artifacts take (the Queue page) or will take (`looplab plan`).

The rule, a grid's `retention` (stored with each of its jobs, `jobs.retention`; how a run is kept, not
what it is, so it is no part of the job's identity):
- "final" (the default for new grids): once a job has succeeded, its artifact dir drops what only a
  resume reads (`workers.artifacts.resume_only`: its checkpoints, the optimizer, RNG and trainer state,
  ~2.6 x the weights with AdamW, and temp files of killed writes) and keeps the final weights. Nothing a
  queued or running job needs goes: every checkpoint follow-up reads final.pt (`workers.checkpoint.find`
  takes it first), a dir without final.pt keeps its checkpoint (its only weights), and a succeeded job is
  never resumed (retry re-queues only failed or cancelled jobs, whose checkpoints are never touched);
- "all": everything stays;
- none (jobs submitted before the rule existed): left as they are; `looplab gc` applies "final" to them
  when asked.

When: the scheduler applies it to a job right after `jobqueue.finish` committed its success, so a crash
before leaves the checkpoint (which `looplab gc` removes later) and a crash after has removed it; applying
it again removes nothing more (idempotent). `looplab gc` reads the database only (job states, retention,
artifact dirs) and deletes files of succeeded jobs only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy import Engine

from looplab.orchestrator.schema import GridRow
from looplab.orchestrator.schema import Job as JobRow
from looplab.orchestrator.states import JobStatus
from looplab.workers.artifacts import KEEP_CHECKPOINTS, promote, resume_only

FINAL, ALL = "final", "all"
RETENTIONS = (FINAL, ALL)
DEFAULT_RETENTION = FINAL
JOBS = JobRow.__table__


def removes(retention: str | None) -> bool:
    """Whether `retention` drops the resume state of a succeeded job when it succeeds (none: older jobs,
    left as they are)."""
    return retention == FINAL


def apply(artifact_dir: str | Path | None, dry_run: bool = False) -> int:
    """Drop what only a resume reads from a succeeded job's dir; the bytes freed (would be, `dry_run`).
    Call it only once the job's success is recorded. A file that vanished meanwhile counts nothing."""
    freed = 0
    for path in resume_only(artifact_dir) if artifact_dir else []:
        try:
            size = path.stat().st_size
            if not dry_run:
                path.unlink()
        except FileNotFoundError:
            continue
        freed += size
    return freed


@dataclass
class Collected:
    """What `gc` did (or would do): the bytes per job it freed, and the jobs it left alone."""

    freed: dict[int, int] = field(default_factory=dict)  # job id -> bytes
    kept_all: list[int] = field(default_factory=list)  # succeeded jobs whose grid keeps everything

    @property
    def total(self) -> int:
        return sum(self.freed.values())


def gc(eng: Engine, grid: str | int | None = None, dry_run: bool = False) -> Collected:
    """Apply the "final" rule to every succeeded job (of grid `grid`, a name or id) whose retention is
    "final" or unset (jobs from before the rule); jobs of an "all" grid are left alone. Writes nothing
    to the database."""
    query = sa.select(JOBS.c.id, JOBS.c.retention, JOBS.c.artifact_dir).where(
        JOBS.c.status == JobStatus.SUCCEEDED, JOBS.c.artifact_dir.is_not(None)
    )
    if grid is not None:
        grids = sa.select(GridRow.id).where(
            GridRow.name == str(grid) if not str(grid).isdigit() else GridRow.id == int(grid)
        )
        query = query.where(JOBS.c.grid_id.in_(grids))
    with eng.connect() as conn:
        rows = conn.execute(query.order_by(JOBS.c.id)).all()
    out = Collected()
    for row in rows:
        if row.retention == ALL:
            out.kept_all.append(row.id)
            continue
        freed = apply(row.artifact_dir, dry_run=dry_run)
        if freed:
            out.freed[row.id] = freed
    return out


# ------------------------------------------------------------------------------------- disk in use


def fmt_bytes(n: float) -> str:
    """`n` bytes for people: GB, MB or KB of 2^30, 2^20, 2^10 bytes."""
    for unit, size in (("GB", 2**30), ("MB", 2**20), ("KB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def dir_bytes(path: str | Path) -> int:
    """Bytes of the files under `path` (0 when it does not exist); links are not followed."""
    total = 0
    stack = [str(path)]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_size
            except FileNotFoundError:  # deleted while we looked
                continue
    return total


@dataclass(frozen=True)
class DiskInUse:
    """The artifact dirs of some jobs: their bytes, and what `looplab gc` would free of them."""

    total: int
    reclaimable: int
    dirs: int


def disk_in_use(eng: Engine, job_ids: list[int]) -> DiskInUse:
    """Bytes under the artifact dirs recorded for `job_ids` (jobs.artifact_dir) and the part `looplab
    gc` would free (resume state of succeeded jobs not kept by an "all" grid). Reads only."""
    ids = [int(i) for i in job_ids]
    if not ids:
        return DiskInUse(0, 0, 0)
    with eng.connect() as conn:
        rows = conn.execute(
            sa.select(JOBS.c.status, JOBS.c.retention, JOBS.c.artifact_dir).where(
                JOBS.c.id.in_(ids), JOBS.c.artifact_dir.is_not(None)
            )
        ).all()
    dirs = {r.artifact_dir for r in rows}
    reclaimable = sum(
        apply(r.artifact_dir, dry_run=True)
        for r in rows
        if r.status == JobStatus.SUCCEEDED and r.retention != ALL
    )
    return DiskInUse(sum(dir_bytes(d) for d in dirs), reclaimable, len(dirs))


# ------------------------------------------------------------------------------------ disk planned


@dataclass(frozen=True)
class PlannedDisk:
    """A train job's artifact files as planned (`looplab plan`), in bytes: one checkpoint (weights and
    optimizer state) of the `keep` the job keeps (workers/artifacts.py), final.pt (weights), the metric
    spool (every point until the job succeeded); `saves`: the checkpoints the run writes (None: not
    known, a time budget), so a short run that saves once is not charged `keep` of them."""

    checkpoint: float
    final: float
    spool: float
    saves: int | None = None
    keep: int = KEEP_CHECKPOINTS

    @property
    def _held(self) -> int:
        return self.keep if self.saves is None else max(1, min(self.keep, self.saves))

    @property
    def peak(self) -> float:
        """While it runs: the last save writes a checkpoint beside the ones kept before it, then final.pt,
        before the oldest goes; the spool grows to every point."""
        before = self.keep if self.saves is None else min(self.keep, max(0, self.saves - 1))
        return (before + 1) * self.checkpoint + self.final + self.spool

    def kept(self, retention: str | None) -> float:
        """After success (the spool is removed then): final.pt alone under "final", with the kept
        checkpoints under "all"."""
        return self.final if removes(retention) else self._held * self.checkpoint + self.final


def promote_final(artifact_dir: str | None, n: int) -> str | None:
    """Attempt `n`'s final weights become the job's final.pt (workers/artifacts.py `promote`): called by
    `jobqueue.finish` in the transaction that holds the job's row for attempt `n`, so no takeover
    commits meanwhile and a replaced attempt never gets here; the one step that makes weights what the
    follow-ups read. None when done or nothing to do (a kind that writes no weights, a dir this driver
    cannot see: its follow-ups then read the last checkpoint, as before); else why the file system
    refused, and the attempt fails (and is retried) rather than record a success with another
    attempt's weights."""
    if not artifact_dir:
        return None
    try:
        promote(artifact_dir, n)
    except OSError as e:
        return f"could not make attempt {n}'s final weights the job's final.pt: {e}"
    return None
