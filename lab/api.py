"""The Python API: `Grid` (what to run) and `Queue` (submit, watch, cancel, retry, read results).

    from looplab import Grid, Queue
    grid = Grid("lean-vs-parcae", base={"size": "small", "tokens": 2_000_000},
                sweep={"recipe": ["parcae", "lean"], "seed": [0, 1]},
                then=["depth_sweep", "decode_bench"])
    q = Queue()                       # $LOOPLAB_DB or sqlite:///looplab.db
    print(q.plan(grid).text())        # estimated time, FLOPs, memory per job; the finish time
    ids = q.submit(grid)              # validated as a whole, one transaction, idempotent
    q.run(until_empty=True)           # or `looplab run` in another terminal
    q.status(); q.results("runs")     # DataFrames

`Queue` only talks to the database; `run()` starts the Ray driver in this process (ray is imported
only then). `kinds` replaces the job registry (workers.jobs) — tests use trivial fake jobs.
Every change of a job's state is made by `orchestrator.jobqueue`; this class only forwards to it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import sqlalchemy as sa

from looplab.lab.display import status_frame
from looplab.model.errors import ConfigError
from looplab.orchestrator import jobqueue, owners
from looplab.orchestrator.grid import Grid
from looplab.orchestrator.states import JobStatus

if TYPE_CHECKING:
    from looplab.lab.planner import Forecast
    from looplab.workers.jobs import JobRegistry

__all__ = ["Grid", "Queue"]


class Queue:
    """A handle on the persistent queue in the results database."""

    def __init__(
        self, db: str | None = None, artifacts: str | Path | None = None, kinds: JobRegistry | None = None
    ) -> None:
        from looplab.orchestrator.db import resolve_url

        self.url = resolve_url(db)
        self.eng = jobqueue.open_engine(self.url)
        self.artifacts = Path(artifacts or "looplab_artifacts")
        self._kinds = kinds
        self.last_added: list[int] = []  # ids the last submit() inserted (the rest already existed)

    @property
    def kinds(self) -> JobRegistry:
        if self._kinds is None:
            from looplab.orchestrator.jobkinds import registry

            self._kinds = registry()
        return self._kinds

    def submit(self, grids: Grid | list[Grid]) -> list[int]:
        """Validate every grid, then insert all their jobs in one transaction. Returns the job ids
        (existing ids for jobs already in the database; see `last_added` for the new ones). Each new
        job stores the planner's cheap estimate of its wall time (see `plan`)."""
        from looplab.lab.planner import submission_estimates

        grids = [grids] if isinstance(grids, Grid) else list(grids)
        ids, self.last_added = jobqueue.submit(self.eng, grids, self.kinds, estimate=submission_estimates)
        return ids

    def plan(
        self,
        grids: Grid | list[Grid],
        *,
        num_cpus: float | None = None,
        num_gpus: float | None = None,
        calibration: Any = "auto",
        device_memory_bytes: float | None = None,
        elsewhere: bool = False,
    ) -> Forecast:
        """What submitting `grids` would add and how long it would take behind the current queue: every
        job with its estimated wall time, FLOPs, peak memory and source, totals per device and the
        finish time (`.text()`, `.frame()`; see lab/planner/). Validates like `submit`
        and writes nothing. `num_cpus`/`num_gpus`: the parallelism (default: this machine's);
        `calibration`: "auto" (cached, else measured now), "cached", "fresh", a planner.Calibration or None;
        `elsewhere`: the Calibration is another machine's (`workers.calibrate.read_file`, `for_device`),
        and the grids are priced alone on it (see planner.plan_grids)."""
        from looplab.lab.planner import plan_grids

        grids = [grids] if isinstance(grids, Grid) else list(grids)
        return plan_grids(
            self.eng,
            grids,
            self.kinds,
            num_cpus=num_cpus,
            num_gpus=num_gpus,
            calibration=calibration,
            device_memory_bytes=device_memory_bytes,
            elsewhere=elsewhere,
        )

    def status(self, grid: str | int | None = None, all: bool = True) -> pd.DataFrame:
        return status_frame(self.eng, grid=grid, all_jobs=all)

    def cancel(self, job_ids: int | list[int]) -> list[int]:
        """Cancel queued or running jobs; another member's are refused (orchestrator/owners.py)."""
        return owners.cancel(self.eng, job_ids)

    def retry(self, job_ids: int | list[int]) -> list[int]:
        """Re-queue failed or cancelled jobs; another member's are refused."""
        return owners.retry(self.eng, job_ids)

    def set_priority(self, job_ids: int | list[int], priority: int) -> list[int]:
        """Give queued or running jobs a new priority; another member's are refused."""
        return owners.set_priority(self.eng, job_ids, priority)

    def audit(self, job_ids: list[int] | None = None, limit: int = 1000) -> pd.DataFrame:
        """Who submitted, cancelled, retried, re-prioritised or preempted what (newest `limit`)."""
        return owners.audit_frame(self.eng, job_ids=job_ids, limit=limit)

    def results(self, name: str = "runs") -> pd.DataFrame:
        """A whole view or table (runs, curves, depth, decode, train_results, ...) as a DataFrame."""
        insp = sa.inspect(self.eng)
        names = set(insp.get_view_names()) | set(insp.get_table_names())
        if name not in names:
            raise ConfigError(
                f"results: unknown view or table {name!r}; accepted: {', '.join(sorted(names))}"
            )
        with self.eng.connect() as conn:
            return pd.read_sql_query(sa.text(f'SELECT * FROM "{name}"'), conn)

    def rewinds(self, job_id: int) -> pd.DataFrame:
        """The loss spikes job `job_id` rewound: n, attempt, the checkpoint step it went back to, the step
        that spiked and the data rows skipped (a list), ts."""
        from looplab.orchestrator import frames

        return frames.rewinds(self.url, [job_id])

    def logs(self, job_id: int) -> pd.DataFrame:
        with self.eng.connect() as conn:
            return pd.read_sql_query(
                sa.text("SELECT ts, attempt, level, message FROM job_logs WHERE job_id = :j ORDER BY ts, id"),
                conn,
                params={"j": job_id},
            )

    def run(self, until_empty: bool = True, **kwargs: Any) -> int:
        """Run the scheduler in this process (Ray is started, or the running one used)."""
        from looplab.lab.display import print_progress
        from looplab.orchestrator.scheduler import Scheduler

        kwargs.setdefault("live_view", print_progress)
        return Scheduler(self.eng, self.artifacts, self._kinds, until_empty=until_empty, **kwargs).run()

    def wait(
        self, job_ids: list[int], timeout: float | None = None, poll_s: float = 1.0
    ) -> dict[int, JobStatus]:
        """Block until the jobs are finished (another process runs the queue); returns their statuses."""
        end = None if timeout is None else time.time() + timeout
        while True:
            st = jobqueue.statuses(self.eng, job_ids)
            if all(s.finished for s in st.values()):
                return st
            if end is not None and time.time() > end:
                raise TimeoutError(f"jobs still pending after {timeout} s: {st}")
            time.sleep(poll_s)
