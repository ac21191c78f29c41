"""`looplab export TARGET -o DIR [--grid NAME ...] [--follow]`: runs out to the tools researchers already
use, with no network at all: an MLflow tracking store, TensorBoard event files, W&B offline runs, Parquet
files of every view. A grid (or several) or the whole database.

Exporting again adds only what is new: each target directory keeps a manifest (`manifest.py`) of what
it holds (per job the target's run, the last step of each metric key, whether the results were written),
so an MLflow run is never duplicated, a TensorBoard or W&B run gets only the new points and Parquet only
new curve parts. `--follow` repeats the export every few seconds until the selection has no queued or
running job: a separate process that only reads the database (read-only engine), so a mirror that fails
(a full disk, a broken target) is retried and reported, and never slows or stops the queue.

- source.py: what an export reads (runs with their resolved configuration, new points, views);
- to_mlflow.py, to_tensorboard.py, to_wandb.py: one run per training job, each with `Writer.write`;
- to_parquet.py: the views.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pandas as pd

from lab.export import source
from lab.export.manifest import JobEntry, Manifest
from model import fields
from model.errors import ConfigError
from orchestrator.states import ACTIVE

TARGETS = ("mlflow", "tensorboard", "wandb", "parquet")
FOLLOW_EVERY_S = 30.0
log = logging.getLogger(__name__)

__all__ = ["TARGETS", "cli_export", "export", "follow"]


def _writer(target: str, out: Path, url: str):
    if target == "mlflow":
        from lab.export.to_mlflow import Writer

        return Writer(out)
    if target == "tensorboard":
        from lab.export.to_tensorboard import Writer

        return Writer(out)
    from lab.export.to_wandb import Writer

    return Writer(out, url)


def export(url: str, target: str, out: str | Path, grids: list[str] | None = None) -> dict[str, int]:
    """Export what is new in `grids` (names or ids; None: the whole database) of the database at `url`
    to `target` in directory `out`. Returns counts: `runs` (runs written to), `points` (curve points), or
    for Parquet the rows written per view."""
    target = fields.choice("export: target", target, TARGETS)
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"export: -o {out}: not a directory")
    out.mkdir(parents=True, exist_ok=True)
    manifest = Manifest.open(out, url, target)
    job_ids = source.selected_job_ids(url, grids)
    if target == "parquet":
        from lab.export import to_parquet

        return to_parquet.export(url, out, job_ids, manifest)
    runs = [r for r in source.runs(url, job_ids) if r.started]
    latest = source.latest_steps(url, [r.job_id for r in runs])
    depth = source.depth_points(url, [r.job_id for r in runs])
    writer, counts = _writer(target, out, url), {"runs": 0, "points": 0}
    for run in runs:
        written = _export_run(
            url, writer, run, manifest.job(run.job_id), latest.get(run.job_id, {}), depth.get(run.job_id)
        )
        if written is not None:
            counts["runs"] += 1
            counts["points"] += written
            manifest.save()  # after each run: an interrupted export repeats at most one run
    return counts


def _export_run(
    url: str, writer, run: source.Run, entry: JobEntry, latest: dict[str, int], sweep: pd.DataFrame | None
) -> int | None:
    """Write what is new of one run; the points written, None when nothing changed for the target."""
    steps = dict(latest)
    if sweep is not None:
        steps[source.DEPTH_KEY] = int(sweep["step"].max())
    before = (entry.run, entry.status, entry.results)
    pending = run.finished and not entry.results
    if (
        entry.run is not None
        and not pending
        and entry.status == run.status
        and not source.has_new(steps, entry.keys)
    ):
        return None
    points = source.new_points(url, run.job_id, entry.keys)
    if sweep is not None:
        new_depth = sweep[sweep["step"] > entry.keys.get(source.DEPTH_KEY, -1)]
        points = pd.concat([p for p in (points, new_depth) if not p.empty] or [points], ignore_index=True)
    written = writer.write(run, points, entry)
    entry.keys.update({k: int(s) for k, s in written.groupby("key")["step"].max().items()})
    entry.status = run.status
    return len(written) if len(written) or before != (entry.run, entry.status, entry.results) else None


def active(url: str, grids: list[str] | None) -> int:
    """Queued or running jobs in the selection."""
    from sqlalchemy import text

    from orchestrator import frames

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
    from orchestrator.errors import USER_ERRORS

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
    from orchestrator.db import resolve_url

    url = resolve_url(args.db)
    every = fields.number("--every", args.every, lo=0.1)
    if args.follow:
        return follow(url, args.target, args.output, args.grid, every_s=every)
    counts = export(url, args.target, args.output, args.grid)
    print(f"export {args.target} to {Path(args.output).absolute()}: {_describe(counts)}")
    if args.target == "mlflow":
        from lab.export.to_mlflow import tracking_uri

        print(f"read it: MlflowClient(tracking_uri={tracking_uri(Path(args.output))!r})")
    return 0
