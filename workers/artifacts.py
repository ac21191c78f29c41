"""The files of a train job's artifact dir by what reads them, without torch (the queue and the dashboard
read these names; workers/checkpoint.py writes and loads the files).

- `checkpoint.pt` (CHECKPOINT): weights, optimizer state, RNG and trainer state, replaced atomically at
  every checkpoint: what a resume reads, and nothing else once the run has finished;
- `final.pt` (FINAL): the final weights and the run's identity, written once at the end: what every
  checkpoint follow-up reads (`workers.checkpoint.find` takes it before checkpoint.pt);
- `.checkpoint.pt.tmp<pid>` / `.final.pt.tmp<pid>`: a write in progress, left behind only by a process
  killed mid-write (the next attempt deletes its own);
- `spec.json`, `tokenizer.json`: small, kept.
"""

from __future__ import annotations

from pathlib import Path

CHECKPOINT = "checkpoint.pt"
FINAL = "final.pt"


def resume_only(artifact_dir: str | Path) -> list[Path]:
    """The files of a finished run's dir that only a resume would read: checkpoint.pt when final.pt is
    there (without it the checkpoint holds the only weights and stays) and any temp file a killed write
    left. Empty when the dir does not exist."""
    d = Path(artifact_dir)
    if not d.is_dir():
        return []
    stale = sorted(p for name in (CHECKPOINT, FINAL) for p in d.glob(f".{name}.tmp*") if p.is_file())
    if (d / FINAL).is_file() and (d / CHECKPOINT).is_file():
        return [d / CHECKPOINT, *stale]
    return stale
