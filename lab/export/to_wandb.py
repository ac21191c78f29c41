"""Runs to Weights & Biases offline run directories (`wandb.init(mode="offline")`: nothing is sent), one
per training job, in `DIR/wandb/offline-run-*-<run id>/`; upload them later with `wandb sync DIR/wandb/offline-run-*`.

- project: the grid; name `<variant label> · seed <seed> · #<job id>`; group: the variant label (W&B
  groups the seeds of a variant); tags: the recipe and the grid; config: the resolved configuration with
  the variant columns under `looplab`;
- history: every curve point at its step, all keys of one step in one row (W&B wants one row per step,
  steps increasing), with `tokens` and `wall_s` of the step; the newest step of a job still running is
  held back to the next export (its other keys may not be in yet, and W&B cannot add to a past step);
- summary: a finished run's results and its depth sweep (`depth/val_loss@N`; a W&B history cannot go
  back to step N).
Exporting again writes another offline directory for the same run id (`resume="allow"`) with only the new
steps; `wandb sync` uploads the directories of one run in order of their start. Read one back offline
with `wandb leet inspect --json DIR/wandb/offline-run-.../run-<id>.wandb`.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import pandas as pd

from looplab.lab.export import runs
from looplab.lab.export.manifest import JobEntry, Manifest
from looplab.lab.export.source import DEPTH_KEY, Run
from looplab.orchestrator.states import JobStatus


def run_id(database: str, job_id: int) -> str:
    """A W&B run id stable for one job of one database (letters, digits and dashes)."""
    return f"looplab-{hashlib.sha256(database.encode()).hexdigest()[:8]}-{job_id}"


def project(grid: str) -> str:
    return re.sub(r"[/\\#?%:]+", "-", grid or "looplab")[:128]


class Writer:
    def __init__(self, out: Path, database: str) -> None:
        os.environ["WANDB_MODE"] = "offline"  # never a network call, whatever the user's settings say
        os.environ.setdefault("WANDB_SILENT", "true")
        self.out, self.database = out, database

    def write(self, run: Run, points: pd.DataFrame, entry: JobEntry) -> pd.DataFrame:
        import wandb

        depth = points[points["key"] == DEPTH_KEY]
        history = points[points["key"] != DEPTH_KEY]
        if not run.finished and not history.empty:
            history = history[history["step"] < history["step"].max()]  # the newest step may be incomplete
        with_summary = run.finished and not entry.results
        if history.empty and depth.empty and not with_summary:
            return points.iloc[:0]
        config = {
            **run.config,
            "looplab": {"job_id": run.job_id, "grid": run.grid, "seed": run.seed, **run.variant},
        }
        settings = wandb.Settings(
            silent=True,
            console="off",
            x_disable_stats=True,
            save_code=False,
            disable_git=True,
            x_disable_meta=True,
            x_disable_machine_info=True,
        )
        wb = wandb.init(
            mode="offline",
            dir=str(self.out),
            project=project(run.grid),
            name=run.name,
            id=entry.run or run_id(self.database, run.job_id),
            group=str(run.variant_label),
            job_type="train",
            tags=[t for t in (run.recipe, run.grid) if t],
            config=config,
            resume="allow",
            settings=settings,
        )
        entry.run = wb.id
        for step, rows in history.groupby("step", sort=True):
            row = dict(zip(rows["key"], rows["value"].astype(float), strict=True))
            row.update({c: float(rows[c].iloc[0]) for c in ("tokens", "wall_s") if pd.notna(rows[c].iloc[0])})
            wb.log(row, step=int(step))
        for loops, value in zip(depth["step"], depth["value"], strict=True):  # a sweep ends after training
            wb.summary[f"{DEPTH_KEY}@{int(loops)}"] = float(value)
        if with_summary:
            for name, value in run.results.items():
                wb.summary[name] = value
            wb.summary["looplab.status"] = run.status
            entry.results = True
        wb.finish(exit_code=1 if run.status == JobStatus.FAILED else 0)
        return pd.concat([history, depth])


def export(url: str, out: Path, job_ids: list[int] | None, manifest: Manifest) -> dict[str, int]:
    """One W&B offline run per started training job, with what is new since the last export."""
    return runs.export(url, Writer(out, url), job_ids, manifest)


def how_to_read(out: Path) -> str | None:
    return None  # the directory is what `wandb sync` uploads
