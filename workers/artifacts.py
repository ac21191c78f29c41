"""The files of a train job's artifact dir by what reads them, without torch (the queue and the dashboard
read these names; workers/checkpoint.py writes and loads the files).

- `checkpoint-aAAAA-sSSSSSSSS.pt` (`checkpoint_name`): weights, optimizer state, RNG and trainer state at
  step S, written by attempt A (the job's attempt number, which is also its fencing token: see
  `jobqueue.claim`), each written atomically and never replaced. A job keeps its last `keep_checkpoints`
  (at least 2: a loss spike rewinds to one from before it, workers/train/trainer.py). What a resume reads, and
  nothing else once the run has finished;
- `attempts/aAAAA.json`: written when attempt A starts, before it reads any checkpoint: the names of the
  checkpoints it found. An attempt that was replaced (its job claimed again after a lost heartbeat) may
  still be running on a host cut off from the database and go on writing checkpoints; any it wrote after
  its successor started is missing from the successor's record, and `usable` leaves it out for ever.
  Why a record in the dir rather than asking the database: the trainer reads only its artifact dir (a
  gang's ranks, a run outside the queue), and the record is made by the attempt that replaces, the one
  process certain to know;
- `checkpoint.pt` (CHECKPOINT): the layout before checkpoints by attempt: one file replaced in place.
  A job written that way still resumes from it (`resume_from`); its first checkpoint in the new layout
  makes it removable;
- `final-aAAAA.pt` (`final_name`): the final weights, the run's identity and the attempt that wrote them,
  written by attempt A at its end. Under the queue it becomes the job's `final.pt` only when the driver
  records A's success (`jobqueue.finish`, in the transaction that holds the job's row for A: `promote`);
  a replaced attempt that trains on to its end (a paused host resumed) leaves only its own
  `final-aAAAA.pt`, which nothing reads and `looplab gc` deletes. Outside the queue (no driver to record
  a result) the trainer promotes its own at once. Promoting renames the file: one copy on disk;
- `final.pt` (FINAL): the job's final weights: what every checkpoint follow-up reads
  (`workers.checkpoint.find` takes it before any checkpoint). A job finished before attempt-named finals
  has its final.pt written in place, and it is read the same way;
- `.<name>.tmp<pid>`: a write in progress, left behind only by a process killed mid-write (the next
  attempt deletes them);
- `spec.json`, `tokenizer.json`: small, kept.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

CHECKPOINT = "checkpoint.pt"
FINAL = "final.pt"
ATTEMPTS = "attempts"
_FINAL_NAME = re.compile(r"^final-a(\d{4,})\.pt$")
KEEP_CHECKPOINTS = 2  # the least a job keeps: the newest, and one from before a spike it may rewind
_NAME = re.compile(r"^checkpoint-a(\d{4,})-s(\d{8,})\.pt$")


@dataclass(frozen=True, order=True)
class Checkpoint:
    """One checkpoint of the new layout; ordered by step, then attempt (the newest last)."""

    step: int
    attempt: int
    path: Path


def checkpoint_name(attempt: int, step: int) -> str:
    """The file name of attempt `attempt`'s checkpoint at step `step`."""
    if attempt < 0 or step < 0:
        raise ValueError(f"checkpoint_name: attempt and step must be >= 0, got {attempt}, {step}")
    return f"checkpoint-a{attempt:04d}-s{step:08d}.pt"


def final_name(attempt: int) -> str:
    """The file name of attempt `attempt`'s final weights (the job's only once promoted: `promote`)."""
    if attempt < 0:
        raise ValueError(f"final_name: attempt must be >= 0, got {attempt}")
    return f"final-a{attempt:04d}.pt"


def attempt_finals(artifact_dir: str | Path) -> list[Path]:
    """Every attempt's final weights in the dir (`final_name`), promoted or not, oldest attempt first."""
    d = Path(artifact_dir)
    if not d.is_dir():
        return []
    return sorted(p for p in d.iterdir() if _FINAL_NAME.match(p.name) and p.is_file())


def promote(artifact_dir: str | Path, attempt: int) -> bool:
    """Make attempt `attempt`'s final weights the job's `final.pt` (renamed into place: a reader sees the
    old file or the new one, never none, and no second copy takes the disk); False when the attempt
    left none (a kind that writes no weights, a dir this process cannot see, or a retry after a commit
    that failed: final.pt is already this attempt's). Called only by the holder of the attempt's fence."""
    d = Path(artifact_dir)
    src = d / final_name(attempt)
    if not src.is_file():
        return False
    os.replace(src, d / FINAL)
    fsync_dir(d)
    return True


def fsync_dir(d: Path) -> None:
    """The rename survives a power cut once the directory is synced (where the platform allows)."""
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def parse(path: str | Path) -> Checkpoint | None:
    """The checkpoint a file of the new layout is, by its name (None for any other file)."""
    m = _NAME.match(Path(path).name)
    return Checkpoint(int(m.group(2)), int(m.group(1)), Path(path)) if m else None


def checkpoints(artifact_dir: str | Path) -> list[Checkpoint]:
    """Every checkpoint of the new layout in the dir, fenced out or not, oldest first."""
    d = Path(artifact_dir)
    if not d.is_dir():
        return []
    return sorted(c for c in map(parse, d.iterdir()) if c is not None and c.path.is_file())


def records(artifact_dir: str | Path) -> dict[int, set[str]]:
    """attempt -> the checkpoint names it found when it started (`start_attempt`)."""
    d = Path(artifact_dir)
    out = {}
    for p in (d / ATTEMPTS).glob("a*.json") if (d / ATTEMPTS).is_dir() else ():
        try:
            rec = json.loads(p.read_text())
            out[int(rec["attempt"])] = set(rec["seen"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a torn record (a kill mid-write cannot make one: it is renamed into place)
    return out


def start_attempt(artifact_dir: str | Path, attempt: int) -> None:
    """Record that `attempt` starts here and which checkpoints exist now (call it before choosing one to
    resume from). Kept if already there: a rank or a rerun of the same attempt does not move the line."""
    d = Path(artifact_dir)
    path = d / ATTEMPTS / f"a{attempt:04d}.json"
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    seen = sorted(c.path.name for c in checkpoints(d))
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps({"attempt": attempt, "seen": seen}))
    os.replace(tmp, path)


def begin(artifact_dir: str | Path, attempt: int | None, writes: bool) -> tuple[int, Path | None]:
    """A trainer's start: its attempt number (the queue's, else `next_attempt`), recorded by the process
    that writes checkpoints before any is chosen, and the checkpoint to resume from (`resume_from`)."""
    attempt = (attempt or next_attempt(artifact_dir)) if writes else 0
    if writes:
        start_attempt(artifact_dir, attempt)
    return attempt, resume_from(artifact_dir)


def next_attempt(artifact_dir: str | Path) -> int:
    """The attempt number of a run started outside the queue: one past every attempt the dir knows."""
    d = Path(artifact_dir)
    known = [*records(d), *(c.attempt for c in checkpoints(d))]
    return max(known, default=0) + 1


def fenced(c: Checkpoint, recs: dict[int, set[str]]) -> bool:
    """Whether `c` was written after a later attempt started (its writer had been replaced): the first
    attempt after its writer that left a record did not find it."""
    later = [a for a in recs if a > c.attempt]
    return bool(later) and c.path.name not in recs[min(later)]


def usable(artifact_dir: str | Path) -> list[Checkpoint]:
    """The checkpoints a resume may take, oldest first (none written by a replaced attempt late)."""
    d = Path(artifact_dir)
    recs = records(d)
    return [c for c in checkpoints(d) if not fenced(c, recs)]


def resume_from(artifact_dir: str | Path, before_step: int | None = None) -> Path | None:
    """The checkpoint to resume from: the newest usable one (of a step below `before_step` when given,
    a rewind's), else the old layout's checkpoint.pt, else None."""
    d = Path(artifact_dir)
    ok = [c for c in usable(d) if before_step is None or c.step < before_step]
    if ok:
        return ok[-1].path
    legacy = d / CHECKPOINT
    return legacy if legacy.is_file() and before_step is None else None


def removable(artifact_dir: str | Path, keep: int) -> list[Path]:
    """What a running job may delete after writing a checkpoint: usable checkpoints older than its newest
    `keep`, every fenced-out one, and the old layout's checkpoint.pt once a new one exists."""
    d = Path(artifact_dir)
    recs = records(d)
    every = checkpoints(d)
    ok = [c for c in every if not fenced(c, recs)]
    out = [c.path for c in every if fenced(c, recs)] + [c.path for c in ok[: max(0, len(ok) - keep)]]
    if ok and (d / CHECKPOINT).is_file():
        out.append(d / CHECKPOINT)
    return sorted(out)


def temp_files(artifact_dir: str | Path) -> list[Path]:
    """Writes a killed process left (`.<name>.tmp<pid>`), of checkpoints and of final.pt."""
    d = Path(artifact_dir)
    if not d.is_dir():
        return []
    return sorted(p for p in d.glob(".*.pt.tmp*") if p.is_file())


def resume_only(artifact_dir: str | Path) -> list[Path]:
    """The files of a finished run's dir that only a resume would read: every checkpoint (both layouts)
    and every attempt's own final weights left (a replaced attempt's: the winner's was renamed to
    final.pt) when final.pt is there (without it the checkpoints hold the only weights and stay) and any
    temp file a killed write left. Empty when the dir does not exist."""
    d = Path(artifact_dir)
    if not d.is_dir():
        return []
    stale = temp_files(d)
    if (d / FINAL).is_file():
        legacy = [d / CHECKPOINT] if (d / CHECKPOINT).is_file() else []
        return sorted([*legacy, *(c.path for c in checkpoints(d)), *attempt_finals(d), *stale])
    return stale
