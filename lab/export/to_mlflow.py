"""Runs to an MLflow tracking store: `DIR/mlflow.db` (SQLite; MLflow's file store is in maintenance mode),
one experiment per grid, one MLflow run per training job.

- params: the resolved configuration, flattened (`lr`, `model.loops`, `data.corpus`, ...) and the variant
  columns (`variant.variant_label`, `variant.n_rec`, ...), values cut to MLflow's 6,000 characters;
- metrics: every curve point with its step (`train_loss`, `val_loss`, `val_loss_at_4` for `val_loss@4`:
  MLflow refuses "@" in a name), its timestamp the run's start plus its training seconds; the depth
  sweep as `depth/val_loss` with the inference loop count as step; the results of a finished run as
  `result.final_val_loss`, ... at its last step;
- tags: `looplab.job_id`, `looplab.grid`, `looplab.seed`, `looplab.variant_id`, `looplab.variant_label`,
  `looplab.recipe`, `looplab.size`, `looplab.status`; the run's status follows the job's.
Read it with `MlflowClient(tracking_uri="sqlite:///DIR/mlflow.db")` or `mlflow ui --backend-store-uri ...`.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pandas as pd

from looplab.lab.export import runs
from looplab.lab.export.manifest import JobEntry, Manifest
from looplab.lab.export.source import Run
from looplab.orchestrator.states import JobStatus

STORE = "mlflow.db"
MAX_PARAM = 6000  # MLflow's limit on a param value
BATCH = 1000  # MLflow's limit on metrics per log_batch (params: 100)
STATUS = {JobStatus.SUCCEEDED: "FINISHED", JobStatus.FAILED: "FAILED", JobStatus.CANCELLED: "KILLED"}
INVALID = re.compile(r"[^\w./\- :]")


def metric_name(key: str) -> str:
    """A looplab metric key as an MLflow name: `val_loss@4` -> `val_loss_at_4`."""
    return INVALID.sub("_", key.replace("@", "_at_"))


def tracking_uri(out: Path) -> str:
    return f"sqlite:///{(out / STORE).absolute()}"


class Writer:
    def __init__(self, out: Path) -> None:
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=tracking_uri(out))
        self.artifacts = (out / "artifacts").absolute().as_uri()
        self.experiments: dict[str, str] = {}

    def _experiment(self, grid: str) -> str:
        name = grid or "looplab"
        if name not in self.experiments:
            found = self.client.get_experiment_by_name(name)
            self.experiments[name] = (
                found.experiment_id
                if found is not None
                else self.client.create_experiment(name, artifact_location=f"{self.artifacts}/{name}")
            )
        return self.experiments[name]

    def _create(self, run: Run) -> str:
        from mlflow.entities import Param

        tags = {
            "looplab.job_id": str(run.job_id),
            "looplab.grid": run.grid,
            "looplab.seed": str(run.seed),
            "looplab.variant_id": str(run.variant_id),
            "looplab.variant_label": str(run.variant_label),
            "looplab.recipe": str(run.recipe),
            "looplab.size": str(run.size),
        }
        start = int(1000 * run.started_at) if run.started_at else None
        created = self.client.create_run(
            self._experiment(run.grid), start_time=start, tags=tags, run_name=run.name
        )
        run_id = created.info.run_id
        params = [Param(k, v[:MAX_PARAM]) for k, v in sorted(run.params.items())]
        for i in range(0, len(params), 100):
            self.client.log_batch(run_id, params=params[i : i + 100])
        return run_id

    def write(self, run: Run, points: pd.DataFrame, entry: JobEntry) -> pd.DataFrame:
        from mlflow.entities import Metric

        if entry.run is None:
            entry.run = self._create(run)
        start = run.started_at or time.time()
        now = int(1000 * time.time())
        metrics = [
            Metric(metric_name(k), float(v), int(1000 * (start + w)) if pd.notna(w) else now, int(s))
            for k, s, w, v in zip(
                points["key"], points["step"], points["wall_s"], points["value"], strict=True
            )
        ]
        if run.finished and not entry.results:
            last = int(points["step"].max()) if not points.empty else max(entry.keys.values(), default=0)
            metrics += [Metric(f"result.{k}", v, now, last) for k, v in sorted(run.results.items())]
            entry.results = True
        for i in range(0, len(metrics), BATCH):
            self.client.log_batch(entry.run, metrics=metrics[i : i + BATCH])
        if entry.status != run.status:
            self.client.set_tag(entry.run, "looplab.status", run.status)
            if run.status in STATUS:
                end = int(1000 * run.finished_at) if run.finished_at else None
                self.client.set_terminated(entry.run, STATUS[run.status], end_time=end)
            else:
                self.client.update_run(entry.run, status="RUNNING")
        return points


def export(url: str, out: Path, job_ids: list[int] | None, manifest: Manifest) -> dict[str, int]:
    """One MLflow run per started training job, with what is new since the last export."""
    return runs.export(url, Writer(out), job_ids, manifest)


def how_to_read(out: Path) -> str | None:
    return f"read it: MlflowClient(tracking_uri={tracking_uri(out)!r})"
