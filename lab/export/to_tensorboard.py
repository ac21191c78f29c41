"""Runs to TensorBoard event files, written by TensorBoard's own `EventFileWriter` (no TensorFlow, no
torch): one run directory per training job, `DIR/<grid>/<job id>-<variant label>-seed<seed>/`.

Each curve point is a scalar with its step and wall time (the run's start plus its training seconds), under
its looplab key (`train_loss`, `val_loss@4`); the depth sweep is the scalar `depth/val_loss` with the
inference loop count as step; a finished run's results are scalars `result/<name>` at its last step.
The resolved configuration is a text summary `config` (TensorBoard's hparams plugin needs TensorFlow to
write). TensorBoard stores scalars as 32-bit floats. Exporting again adds an event file with only the new
points to the same directory, which TensorBoard reads as one run: `tensorboard --logdir DIR`. TensorBoard
reads a directory's event files in the order of their names, which begin with the second they were
opened, so a new file is opened only in a later second than the newest one there (`_wait_past_newest`).
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pandas as pd

from looplab.lab.export import runs
from looplab.lab.export.manifest import JobEntry, Manifest
from looplab.lab.export.source import Run


def slug(text: str) -> str:
    return re.sub(r"[^\w.=-]+", "_", text).strip("_")[:80] or "run"


def run_dir(run: Run) -> str:
    return f"{slug(run.grid or 'looplab')}/{run.job_id}-{slug(str(run.variant_label or run.recipe))}-seed{run.seed}"


def _wait_past_newest(directory: Path) -> None:
    """Sleep (at most about a second) until the clock has passed the second in the newest event file's
    name. Within one second the names order by host, process id and a per-process counter as text, so an
    export again within the second (in-process, as `--follow` does, or a process of a lower pid) could
    sort before the file it follows, and TensorBoard would read its steps first and drop the older ones
    as out of order."""
    stamps = [p.name.split(".")[3] for p in directory.glob("events.out.tfevents.*")]
    newest = max((int(s) for s in stamps if s.isdigit()), default=None)
    while newest is not None and int(time.time()) <= newest:
        time.sleep(max(0.01, newest + 1 - time.time()))


class Writer:
    def __init__(self, out: Path) -> None:
        self.out = out

    def write(self, run: Run, points: pd.DataFrame, entry: JobEntry) -> pd.DataFrame:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.plugins.text.metadata import create_summary_metadata
        from tensorboard.summary.writer.event_file_writer import EventFileWriter
        from tensorboard.util.tensor_util import make_tensor_proto

        new = entry.run is None
        with_results = run.finished and not entry.results
        if not new and points.empty and not with_results:
            return points  # only the job's status changed: nothing TensorBoard shows
        entry.run = entry.run or run_dir(run)
        _wait_past_newest(self.out / entry.run)
        writer = EventFileWriter(str(self.out / entry.run), filename_suffix=f".looplab{run.job_id}")
        start, now = run.started_at or time.time(), time.time()

        def scalar(tag: str, step: int, value: float, wall: float) -> None:
            value_pb = Summary.Value(tag=tag, simple_value=float(value))
            writer.add_event(Event(wall_time=wall, step=int(step), summary=Summary(value=[value_pb])))

        def text(tag: str, body: str) -> None:
            meta = create_summary_metadata(display_name=tag, description="")
            value_pb = Summary.Value(tag=tag, metadata=meta, tensor=make_tensor_proto([body]))
            writer.add_event(Event(wall_time=now, step=0, summary=Summary(value=[value_pb])))

        if new:
            text("config", "```\n" + json.dumps(run.params, indent=1, sort_keys=True) + "\n```")
        for key, step, wall, value in zip(
            points["key"], points["step"], points["wall_s"], points["value"], strict=True
        ):
            scalar(key, step, value, start + wall if pd.notna(wall) else now)
        if with_results:
            last = int(points["step"].max()) if not points.empty else max(entry.keys.values(), default=0)
            for name, value in sorted(run.results.items()):
                scalar(f"result/{name}", last, value, now)
            entry.results = True
        writer.close()
        return points


def export(url: str, out: Path, job_ids: list[int] | None, manifest: Manifest) -> dict[str, int]:
    """One TensorBoard run directory per started training job, with what is new since the last export."""
    return runs.export(url, Writer(out), job_ids, manifest)


def how_to_read(out: Path) -> str | None:
    return None  # the directory is what `tensorboard --logdir` reads
