"""The scheduler driver (`looplab run`): claims ready jobs from the database and runs them on Ray.

One driver process is the only database writer; every change of a job's state goes through
`orchestrator.jobqueue` (claim, finish, refuse, recover, cascade), so this module issues no SQL of
its own. Each job runs as a Ray task (`execute_job`) with its resources; its `QueueReporter` batches
the job's events and pushes them every half second to an `EventSink` actor owned by the driver,
together with a heartbeat; the reply carries the stop flag that `reporter.should_stop()` returns
(Ctrl-C on the driver, `looplab cancel`). The driver drains the sink, writes the events in one
transaction (orchestrator/writer.py), and records outcomes.

Why a sink actor rather than task return values: curves must reach the database while a training
job runs (live dashboard), and events from remote nodes must not need database access.
Resources are booked by the driver itself (cluster totals minus what it launched), so a job is only
marked running when it can actually start; a job asking for more than the cluster has fails clearly.

Exclusive jobs (decode benchmarks and the train jobs of an iso-time pair by default; see
`jobqueue.job_resources`) have the node to themselves: one starts only when nothing of this driver
runs, and nothing starts beside it while it runs. While it waits, jobs of lower priority do not
start (the node drains for it); jobs of its priority or higher still do, so a grid's exclusive jobs
fill the gaps and the end of the queue instead of idling the node each time (a higher priority
makes one go first). The driver books the whole cluster as one node, so on a cluster of several nodes this is stricter
than needed, never weaker. Every job's contention is recorded the same way: the number of other jobs
this driver had running at any time during it goes into `concurrent_jobs` of its train_results and
decode_benches rows (0: the device to itself). Jobs of another driver on the same machine are not
seen.
"""

from __future__ import annotations

import importlib
import os
import signal
import threading
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ray

from orchestrator import jobqueue
from orchestrator.display import print_progress
from orchestrator.states import AttemptOutcome, JobStatus
from orchestrator.task import EventSink, QueueReporter, execute_job, kinds_ref
from orchestrator.writer import record_concurrency, write_events

if TYPE_CHECKING:
    from workers.jobs import JobRegistry


def grace_seconds() -> float:
    """Heartbeat grace period for recovery ($LOOPLAB_HEARTBEAT_GRACE_S, default 60 s)."""
    return float(os.environ.get("LOOPLAB_HEARTBEAT_GRACE_S", jobqueue.DEFAULT_GRACE_S))


def default_kinds() -> JobRegistry:
    """The job registry: workers.jobs, or a module named by $LOOPLAB_JOB_KINDS (test/plugin hook)."""
    return importlib.import_module(os.environ.get("LOOPLAB_JOB_KINDS", "workers.jobs"))


class Scheduler:
    """The driver loop. `run()` returns 0 when the queue is empty (until_empty), 130 after Ctrl-C."""

    def __init__(self, eng, artifacts: str | Path = "looplab_artifacts", kinds: JobRegistry | None = None, *,
                 address: str | None = None, num_cpus: int | None = None, num_gpus: float | None = None,
                 until_empty: bool = False, max_concurrent: int | None = None, grace_s: float | None = None,
                 poll_s: float = 0.5, progress: bool = True, progress_every_s: float = 5.0) -> None:  # fmt: skip
        self.eng, self.artifacts = eng, Path(artifacts).absolute()
        self.kinds = kinds if kinds is not None else default_kinds()
        self.address, self.num_cpus, self.num_gpus = address, num_cpus, num_gpus
        self.until_empty, self.max_concurrent = until_empty, max_concurrent
        self.grace_s = grace_seconds() if grace_s is None else grace_s
        self.poll_s, self.progress, self.progress_every_s = poll_s, progress, progress_every_s
        self.running: dict[Any, tuple[int, int, dict[str, Any]]] = {}  # ref -> (job, attempt, res)
        self.art_dirs: dict[int, Path] = {}
        # job -> the other jobs that ran at some time while it ran (the contention of its timings)
        self.overlaps: dict[int, set[int]] = {}
        self.stopping = 0  # 1: graceful stop asked, 2: forced
        self.worker = f"driver@{os.uname().nodename}:{os.getpid()}"

    # ------------------------------------------------------------ setup
    def _connect(self) -> None:
        if ray.is_initialized():
            return
        if self.address:
            ray.init(address=self.address, log_to_driver=False, configure_logging=False)
        else:
            ray.init(num_cpus=self.num_cpus, num_gpus=self.num_gpus, include_dashboard=False,
                     log_to_driver=False, configure_logging=False)  # fmt: skip

    def _on_signal(self, signum, _frame) -> None:
        self.stopping += 1
        if self.stopping == 1:
            print(f"\nstopping: asking {len(self.running)} running job(s) to checkpoint "
                  "(press Ctrl-C again to stop at once)", flush=True)  # fmt: skip
            self.sink.request_stop.remote(None)

    def _resources(self, job: Any) -> dict[str, Any]:
        return jobqueue.job_resources(job.kind, job.resources, self.total["GPU"] > 0)

    def _fits(self, res: dict[str, Any]) -> bool:
        used_cpu = sum(r["num_cpus"] for *_, r in self.running.values())
        used_gpu = sum(r["num_gpus"] for *_, r in self.running.values())
        return (used_cpu + res["num_cpus"] <= self.total["CPU"] + 1e-9
                and used_gpu + res["num_gpus"] <= self.total["GPU"] + 1e-9)  # fmt: skip

    # ------------------------------------------------------------ main loop
    def run(self) -> int:
        self._connect()
        cluster = ray.cluster_resources()
        self.total = {"CPU": float(cluster.get("CPU", 0)), "GPU": float(cluster.get("GPU", 0))}
        self.sink = EventSink.remote()
        back = jobqueue.recover_stale(self.eng, self.grace_s)
        if back:
            print(f"recovered {len(back)} interrupted job(s) {back}: they resume from their checkpoints")
        old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        if threading.current_thread() is threading.main_thread():
            for s in old:
                signal.signal(s, self._on_signal)
        try:
            self._loop()
        finally:
            if threading.current_thread() is threading.main_thread():
                for s, h in old.items():
                    signal.signal(s, h)
            ray.kill(self.sink)
        return 130 if self.stopping else 0

    def _loop(self) -> None:
        last_touch = last_progress = last_recover = time.time()
        while True:
            if self.stopping >= 2:
                self._force_stop()
                return
            if not self.stopping:
                self._launch_ready()
            if not self.running:
                if self.stopping or (self.until_empty and jobqueue.nothing_left(self.eng)):
                    return
            refs = list(self.running)
            done: list[Any] = []
            if refs:
                # wake on the first finished job (throughput), then collect any others already done
                done, _ = ray.wait(refs, num_returns=1, timeout=self.poll_s, fetch_local=False)
                if done:
                    done, _ = ray.wait(refs, num_returns=len(refs), timeout=0, fetch_local=False)
            else:
                time.sleep(self.poll_s)
            self._drain()
            for ref in done:
                self._record(ref)
            now = time.time()
            if now - last_touch > 1.0:
                self._heartbeat_and_cancels()
                last_touch = now
            if now - last_recover > max(1.0, self.grace_s / 2):
                jobqueue.recover_stale(self.eng, self.grace_s, exclude={j for j, *_ in self.running.values()})
                jobqueue.cascade(self.eng)
                last_recover = now
            if self.progress and now - last_progress > self.progress_every_s and self.running:
                print_progress(self.eng, [j for j, *_ in self.running.values()])
                last_progress = now

    def _launch_ready(self) -> None:
        waiting: int | None = None  # priority of an exclusive job waiting for the node to empty
        for job in jobqueue.ready_jobs(self.eng):  # priority first (descending), then job id
            if self.max_concurrent is not None and len(self.running) >= self.max_concurrent:
                return
            if any(r["exclusive"] for *_, r in self.running.values()):
                return  # nothing starts beside an exclusive job
            if waiting is not None and job.priority < waiting:
                return  # the node drains for the exclusive job
            res = self._resources(job)
            if res["num_cpus"] > self.total["CPU"] or res["num_gpus"] > self.total["GPU"]:
                need = {k: v for k, v in res.items() if k != "exclusive"}
                msg = (f"job {job.id} needs {need} but the cluster has {self.total}: "
                       "change the grid's resources or add machines")  # fmt: skip
                jobqueue.refuse(self.eng, job.id, self.worker, msg)
                continue
            if res["exclusive"] and self.running:
                waiting = job.priority if waiting is None else waiting
                continue  # it waits for the node to empty
            if not self._fits(res):
                continue  # a smaller job further down may still fit
            art = self.artifacts / f"{job.id}-{job.kind}-{job.config_hash[:8]}"
            n = jobqueue.claim(self.eng, job.id, self.worker, str(art))
            if n is None:
                continue  # another driver won it
            try:
                spec = jobqueue.launch_spec(self.eng, job)
            except Exception:
                jobqueue.finish(self.eng, job.id, n, AttemptOutcome.FAILED, traceback.format_exc())
                continue
            ray.get(self.sink.allow.remote(job.id))  # before the task can ask for its stop flag
            ref = execute_job.options(num_cpus=res["num_cpus"], num_gpus=res["num_gpus"]).remote(
                job.id, job.kind, spec, str(art), self.sink, kinds_ref(self.kinds)
            )
            others = {j for j, *_ in self.running.values()}
            self.overlaps[job.id] = self.overlaps.get(job.id, set()) | others
            for other in others:
                self.overlaps[other].add(job.id)
            self.running[ref] = (job.id, n, res)
            self.art_dirs[job.id] = art
            if self.progress:
                print(
                    f"{time.strftime('%H:%M:%S')} job {job.id} ({job.kind}) started, attempt {n}", flush=True
                )
            if res["exclusive"]:
                return

    def _drain(self) -> None:
        batches = ray.get(self.sink.drain.remote())
        if not batches:
            return
        attempt = {j: n for j, n, _ in self.running.values()}
        write_events(self.eng, [(j, attempt.get(j, 0), evs) for j, evs in batches])

    def _record(self, ref: Any) -> None:
        job_id, n, _ = self.running.pop(ref)
        try:
            out = ray.get(ref)
        except Exception as e:  # the worker process died (OOM-killed, node lost, ...)
            out = {"outcome": AttemptOutcome.FAILED, "error": f"Ray task failed: {type(e).__name__}: {e}"}
        # every event of the job is written (drained before this), its result rows among them; a
        # resumed job's count covers all its attempts under this driver
        record_concurrency(self.eng, job_id, len(self.overlaps.get(job_id, ())))
        status = jobqueue.finish(self.eng, job_id, n, AttemptOutcome(out["outcome"]), out.get("error"))
        if status.finished:
            self.overlaps.pop(job_id, None)
        art = self.art_dirs.pop(job_id, None)
        if status == JobStatus.SUCCEEDED and art is not None:  # every point is in the database now
            (art / QueueReporter.SPOOL).unlink(missing_ok=True)
        if self.progress:
            print(
                f"{time.strftime('%H:%M:%S')} job {job_id} attempt {n} {out['outcome']} -> {status}",
                flush=True,
            )

    def _heartbeat_and_cancels(self) -> None:
        mine = [j for j, *_ in self.running.values()]
        jobqueue.touch(self.eng, mine)
        for j, s in jobqueue.statuses(self.eng, mine).items():
            if s == JobStatus.CANCELLED:
                self.sink.request_stop.remote(j)

    def _force_stop(self) -> None:
        """Second Ctrl-C: kill the tasks; their jobs resume from their last checkpoint next time."""
        for ref in self.running:
            ray.cancel(ref, force=True)
        self._drain()
        for job_id, n, _ in self.running.values():
            jobqueue.finish(
                self.eng, job_id, n, AttemptOutcome.INTERRUPTED, "stopped by a second Ctrl-C (forced)"
            )
        self.running.clear()
