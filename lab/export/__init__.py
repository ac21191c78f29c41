"""`looplab export TARGET -o DIR [--grid NAME ...] [--follow]`: runs out to the tools researchers already
use, with no network at all: an MLflow tracking store, TensorBoard event files, W&B offline runs, Parquet
files of every view. A grid (or several) or the whole database.

Exporting again adds only what is new: each target directory keeps a manifest (`manifest.py`) of what
it holds (per job the target's run, the last step of each metric key, whether the results were written),
so an MLflow run is never duplicated, a TensorBoard or W&B run gets only the new points and Parquet only
new curve parts. `--follow` repeats the export every few seconds until the selection has no queued or
running job: a separate process that only reads the database (read-only engine), so a mirror that fails
(a full disk, a broken target) is retried and reported, and never slows or stops the queue.

- `Target`: the targets, each written by its module `to_<target>.py`, which has
  `export(url, out, job_ids, manifest)` (what is new, written; returns counts) and `how_to_read(out)` (the
  line printed after an export, or None). A new target is a member here and such a module;
- source.py: what an export reads (runs with their resolved configuration, new points, views);
- runs.py: the loop of the run targets (MLflow, TensorBoard, W&B: one run per training job, each written
  with the target's `Writer.write`); to_parquet.py: the views.

Only `Target` is imported when this package is: the command line reads its choices from it while
`looplab --help` stays fast; the rest is imported on use.
"""

from __future__ import annotations

import importlib
import logging
import time
from enum import StrEnum
from pathlib import Path
from types import ModuleType

from looplab.model import fields
from looplab.model.errors import ConfigError
from looplab.orchestrator.states import ACTIVE

FOLLOW_EVERY_S = 30.0
log = logging.getLogger(__name__)

__all__ = ["Target", "cli_export", "export", "follow"]


class Target(StrEnum):
    """Where `looplab export` writes: the only place the targets are named (the command line's choices,
    the check of the argument, the module that writes each)."""

    MLFLOW = "mlflow"
    TENSORBOARD = "tensorboard"
    WANDB = "wandb"
    PARQUET = "parquet"

    def writer(self) -> ModuleType:
        """`lab/export/to_<target>.py`, imported now: each pulls in its tool's library."""
        return importlib.import_module(f"looplab.lab.export.to_{self.value}")


def export(url: str, target: str, out: str | Path, grids: list[str] | None = None) -> dict[str, int]:
    """Export what is new in `grids` (names or ids; None: the whole database) of the database at `url`
    to `target` in directory `out`. Returns counts: `runs` (runs written to), `points` (curve points), or
    for Parquet the rows written per view."""
    from looplab.lab.export import source
    from looplab.lab.export.manifest import Manifest

    chosen = Target(fields.choice("export: target", target, tuple(Target)))
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"export: -o {out}: not a directory")
    out.mkdir(parents=True, exist_ok=True)
    manifest = Manifest.open(out, url, chosen.value)
    return chosen.writer().export(url, out, source.selected_job_ids(url, grids), manifest)


def active(url: str, grids: list[str] | None) -> int:
    """Queued or running jobs in the selection."""
    from sqlalchemy import text

    from looplab.lab.export import source
    from looplab.orchestrator import frames

    ids = source.selected_job_ids(url, grids)
    chosen = None if ids is None else set(ids)
    with frames.engine(url).connect() as conn:
        rows = conn.execute(text("SELECT id, status FROM jobs")).all()
    return sum(1 for job_id, status in rows if status in ACTIVE and (chosen is None or job_id in chosen))


def follow(
    url: str,
    target: str,
    out: str | Path,
    grids: list[str] | None = None,
    every_s: float = FOLLOW_EVERY_S,
    max_failures: int = 5,
) -> int:
    """Export every `every_s` seconds while the selection has queued or running jobs, then once more.
    A failing export is logged and retried (the queue never waits for this process); returns 0 after a
    last export that succeeded with nothing active, 1 after `max_failures` failures in a row."""
    from looplab.orchestrator.errors import USER_ERRORS

    failures = 0
    while True:
        waiting = active(url, grids)
        try:
            counts = export(url, target, out, grids)
        except USER_ERRORS:
            raise  # a bad argument or directory: no retry makes it good
        except Exception as e:  # the mirror reports and retries; the queue is another process
            failures += 1
            log.warning("export to %s failed (%d in a row): %s: %s", target, failures, type(e).__name__, e)
            if failures >= max_failures:
                return 1
        else:
            failures = 0
            print(
                f"{time.strftime('%H:%M:%S')} export {target}: {_describe(counts)}; {waiting} job(s) active",
                flush=True,
            )
            if waiting == 0:
                return 0
        time.sleep(every_s)


def _describe(counts: dict[str, int]) -> str:
    return ", ".join(f"{v} {k}" for k, v in counts.items()) if any(counts.values()) else "nothing new"


def cli_export(args) -> int:
    from looplab.orchestrator.db import resolve_url

    url = resolve_url(args.db)
    every = fields.number("--every", args.every, lo=0.1)
    if args.follow:
        return follow(url, args.target, args.output, args.grid, every_s=every)
    counts = export(url, args.target, args.output, args.grid)
    print(f"export {args.target} to {Path(args.output).absolute()}: {_describe(counts)}")
    hint = Target(args.target).writer().how_to_read(Path(args.output))
    if hint is not None:
        print(hint)
    return 0
