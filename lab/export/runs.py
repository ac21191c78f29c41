"""The run targets' loop (MLflow, TensorBoard, W&B): per started training job what the target does not
hold yet, handed to the target's `Writer.write(run, points, entry)`, which returns the points it wrote.

A run is written again only when it has new points, a new status or results not yet written; the
manifest is saved after each run, so an interrupted export repeats at most one run.
"""

from __future__ import annotations

from typing import Protocol

import pandas as pd

from looplab.lab.export import source
from looplab.lab.export.manifest import JobEntry, Manifest


class Writer(Protocol):
    def write(self, run: source.Run, points: pd.DataFrame, entry: JobEntry) -> pd.DataFrame: ...


def export(url: str, writer: Writer, job_ids: list[int] | None, manifest: Manifest) -> dict[str, int]:
    """Write what is new of the selected jobs' runs; counts `runs` (runs written to) and `points`."""
    runs = [r for r in source.runs(url, job_ids) if r.started]
    latest = source.latest_steps(url, [r.job_id for r in runs])
    depth = source.depth_points(url, [r.job_id for r in runs])
    counts = {"runs": 0, "points": 0}
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
    url: str,
    writer: Writer,
    run: source.Run,
    entry: JobEntry,
    latest: dict[str, int],
    sweep: pd.DataFrame | None,
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
