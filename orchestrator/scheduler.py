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
The rule below is written once, in orchestrator/admission.py (the planner replays the same function).
A job asking for several workers at once (`resources: {"workers": N}`, train jobs only) is admitted whole
or not at all and runs as one data-parallel run on Ray Train (orchestrator/task.py `launch`: its task
holds nothing, Ray Train's placement group holds the N bundles the admission booked).

Which job starts (priorities without starvation). Every ready job is considered, in the order of its
*effective priority*, highest first, then the oldest: effective priority = priority + one for each
`aging_s` seconds it has waited (since submission, or since its retry backoff ended or a user retried
it; $LOOPLAB_AGING_S, default 300 s). A job that does not fit into what is free reserves what it asks
for against the jobs of lower effective priority: they start only in what is left beside it (on each
resource: a CPU-only job may pass a job waiting for GPUs), so they never delay it; jobs of its own
effective priority may still fill gaps it cannot use. Without aging that would let a stream of
small jobs of one priority overtake a big one for ever; with it the big one's effective priority
rises past theirs within `aging_s` seconds, and from then on its reservation holds them back until
it starts. A low-priority job is overtaken by a stream of higher ones for at most (difference of
priorities + 1) * aging_s seconds, for the same reason.

Retry backoff: a failed attempt that is retried (fewer failures than max_attempts) waits
base * 2^(failures - 1) seconds before it can be claimed again, at most a cap
($LOOPLAB_RETRY_BACKOFF_S, default 5 s; $LOOPLAB_RETRY_BACKOFF_MAX_S, default 300 s).

Many drivers may run on one queue, on one host or several: claims are conditional (one winner),
every write on behalf of an attempt is fenced by its attempt number (see orchestrator/jobqueue.py),
and each driver records its host, pid and process start time on the jobs it claims. A driver that
starts (and every second after) re-queues at once the jobs of a dead driver of its own host (see
orchestrator/drivers.py); the jobs of a driver on another host come back when their heartbeat is
older than the grace period.

Exclusive jobs (decode benchmarks and the train jobs of an iso-time pair by default; see
`jobkinds.job_resources`) have the node to themselves: one starts only when nothing of this driver
runs, and nothing starts beside it while it runs. While it waits, jobs of lower priority do not
start (the node drains for it); jobs of its effective priority or higher still do, so a grid's exclusive jobs
fill the gaps and the end of the queue instead of idling the node each time (a higher priority
makes one go first). The driver books the whole cluster as one node, so on a cluster of several nodes this is stricter
than needed, never weaker. Every job's contention is recorded the same way: the number of other jobs
this driver had running at any time during it goes into `concurrent_jobs` of its train_results and
decode_benches rows (0: the device to itself). Jobs of another driver on the same machine are not
seen.

A database outage (the server unreachable, the disk or quota full, the SQLite file locked past its
busy timeout: `orchestrator.db.outage`) is a state, not a crash: the driver stops claiming and writing,
while the running jobs keep training and their events keep arriving; it holds them (`held`, with the
attempt each was reported under; of heartbeats and progress only the last) and the finished
attempts' outcomes (`outcomes`), in memory (a few hundred bytes a point), retries after
1, 2, 4, ... s (at most 30 s: `db_retry_s`, `db_retry_max_s`; orchestrator/held.py), each try a real round trip first
(`db.ping`: an idle driver holds no write that would tell), and logs "paused" and "back" once per outage
(each failed try at INFO). When a write goes through it writes a WARNING line in the log of every job it held
(`looplab logs`: when and why its progress stood still), then the held events and the outcomes, in
order, and claims again. Every point is stored once: a failed transaction writes nothing and is given
again whole (points are upserts), and a batch written job by job keeps exactly its unwritten rest
(`writer.Unwritten`). A job claimed but not launched when the database went away goes back to the
queue. After the pause the driver sends its own heartbeats first and waits a grace period before
re-queueing stale jobs of other drivers, which were paused too; a driver of another host that resumes
first may still re-queue this one's jobs after a pause longer than the grace period (fencing then
keeps their points once, and they resume from their checkpoints). A stop (Ctrl-C, SIGTERM) during a
pause stops at once, its tasks killed (nothing could be recorded before the database returns); what was
held is left to a takeover or the next `looplab run`, which re-queue those jobs.
"""

from __future__ import annotations

import dataclasses
import logging
import signal
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ray

from looplab.orchestrator import (
    alerts,
    drivers,
    faults,
    gang_watch,
    health_stops,
    jobkinds,
    jobqueue,
    owners,
    preemption,
    ray_watch,
    recovery,
    retention,
)
from looplab.orchestrator.admission import Admission, Candidate, Node, Preempt, Refuse, Request, Running
from looplab.orchestrator.db import outage, outage_phrase, ping
from looplab.orchestrator.health import STOP, Finding, HealthWatch, StepClock
from looplab.orchestrator.held import Held
from looplab.orchestrator.preemption import Preemptions
from looplab.orchestrator.release import Release
from looplab.orchestrator.settings import DriverSettings, health_settings
from looplab.orchestrator.states import AttemptOutcome, JobStatus
from looplab.orchestrator.task import QueueReporter, TaskResult, launch, sink_on_this_node
from looplab.orchestrator.writer import Unwritten, record_concurrency, record_findings
from looplab.workers import artifacts
from looplab.workers.reporter import Event, EventKind

if TYPE_CHECKING:
    from looplab.workers.jobs import JobRegistry

log = logging.getLogger("looplab.scheduler")


def _record_claim(art: Path, n: int) -> None:
    """Attempt `n` claimed its job: record in its artifact dir which checkpoints exist now, before its task
    starts (workers/artifacts.py `start_attempt`; the trainer keeps this record). Any checkpoint a replaced
    attempt writes after this moment is then never resumed from, even if attempt `n` is lost before its
    trainer starts. The driver already reads artifact dirs (retention); one it cannot write is left to the
    trainer, which records the attempt itself."""
    try:
        artifacts.start_attempt(art, n)
    except OSError as e:
        log.warning("could not record attempt %s in %s (%s): its trainer will", n, art, e)


class Scheduler:
    """The driver loop. `run()` returns 0 when the queue is empty (until_empty), 130 after Ctrl-C.

    It runs under one frozen `DriverSettings` (orchestrator/settings.py): `settings=`, or its fields as
    keywords (`Scheduler(eng, art, until_empty=True, poll_s=0.2)`), which replace those of `settings`."""

    def __init__(
        self,
        eng,
        artifacts: str | Path = "looplab_artifacts",
        kinds: JobRegistry | None = None,
        settings: DriverSettings | None = None,
        *,
        live_view: Callable[[Any, list[int]], None] | None = None,
        **fields: Any,
    ) -> None:
        self.eng, self.artifacts = eng, Path(artifacts).absolute()
        self.kinds = kinds if kinds is not None else jobkinds.registry()
        self.settings = s = DriverSettings.of(settings, **fields)
        self.until_empty, self.grace_s, self.poll_s, self.progress = (
            s.until_empty,
            s.grace_s,
            s.poll_s,
            s.progress,
        )
        # the lab's terminal view of the running jobs (lab/display.py), every progress_every_s
        self.live_view = live_view
        self.running: dict[Any, tuple[int, int, Running]] = {}  # ref -> (job, attempt, what it holds)
        self.art_dirs: dict[int, tuple[Path, str | None]] = {}  # job -> (artifact dir, its retention)
        # job -> the other jobs that ran at some time while it ran (the contention of its timings)
        self.overlaps: dict[int, set[int]] = {}
        self.stopping = 0  # 1: graceful stop asked, 2: forced
        # what waits for the database (the module's "A database outage"; orchestrator/held.py)
        self.held = Held(s.db_retry_s, s.db_retry_max_s)
        self.driver = drivers.this_driver()
        self.worker = f"driver@{self.driver.host}:{self.driver.pid}"
        # the health rules (orchestrator/health.py): the curves' in the writer, the stall clock here
        # alerts (orchestrator/alerts.py): a bad channel configuration is refused before anything runs
        self.alerts = alerts.load()
        on_finding = alerts.finding_alert(self.alerts) if self.alerts.channels else None
        self.health = HealthWatch(health_settings(), on_finding)
        self.deliverer: alerts.Deliverer | None = None
        self.clocks: dict[int, StepClock] = {}  # running job -> its step clock
        self.findings: list[tuple[int, int, Any]] = []  # the driver's own, waiting for the database
        self.stalled: dict[int, Any] = {}  # job -> the stall finding its attempt was killed for
        self.health_stopped: dict[int, Finding] = {}  # job -> the finding whose action stopped its run
        self.finished_here: dict[int, str] = {}  # job -> how it finished, for this run's "queue empty"
        self.preemptions = Preemptions(s.preempt_cooldown_s)  # orchestrator/preemption.py
        self.admins = owners.Admins(self.eng)
        self.release = Release(self, s.release_on)  # a batch system's time limit (orchestrator/release.py)

    # ------------------------------------------------------------ setup
    def _connect(self) -> None:
        if ray.is_initialized():
            return
        if self.settings.address:
            ray.init(address=self.settings.address, log_to_driver=False, configure_logging=False)
        else:
            ray.init(  # a Ray of its own: not whatever cluster /tmp/ray/ray_current_cluster names (a
                # `ray start` of the user's, or one a killed session left behind), which refused the CPU count
                address="local",
                num_cpus=self.settings.num_cpus,
                num_gpus=self.settings.num_gpus,
                include_dashboard=False,
                log_to_driver=False,
                configure_logging=False,
            )

    def _on_signal(self, signum, _frame) -> None:
        self.stopping += 1
        if self.stopping == 1:
            print(
                f"\nstopping: asking {len(self.running)} running job(s) to checkpoint "
                "(press Ctrl-C again to stop at once)",
                flush=True,
            )
            self.sink.request_stop.remote(None)

    def _request(self, job: Any) -> Request:
        return Request.of(
            jobkinds.job_resources(job.kind, job.resources, self.total["GPU"] > 0, kinds=self.kinds)
        )

    # ------------------------------------------------------------ main loop
    def run(self) -> int:
        self._connect()
        self.ray_watch = ray_watch.RayWatch(self.settings.ray_lost_s).start()  # its head lost: `_loop` stops
        cluster = ray.cluster_resources()
        self.total = {"CPU": float(cluster.get("CPU", 0)), "GPU": float(cluster.get("GPU", 0))}
        self.sink = sink_on_this_node()
        back = recovery.recover_dead(self.eng, self.driver) + recovery.recover_stale(self.eng, self.grace_s)
        if back:
            print(f"recovered {len(back)} interrupted job(s) {back}: they resume from their checkpoints")
        old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        if threading.current_thread() is threading.main_thread():
            for s in old:
                signal.signal(s, self._on_signal)
            self.release.install()
        if self.alerts.channels:
            alerts.ensure_identity(self.eng)  # before any alert's transaction needs it
            self.deliverer = alerts.Deliverer(self.eng, self.alerts).start()
        try:
            self._loop()
            self._queue_done()
        finally:
            flush_s = 0.0 if self.stopping >= 2 else self.alerts.flush_s  # a second Ctrl-C waits for nothing
            for line in self.deliverer.stop(flush_s) if self.deliverer is not None else ():
                self._say(line)
            if threading.current_thread() is threading.main_thread():
                for s, h in old.items():
                    signal.signal(s, h)
                self.release.restore()
            if not self.ray_watch.stop().gone:  # killing an actor needs the head
                ray.kill(self.sink)
        if self.ray_watch.gone:
            return ray_watch.EXIT_RAY_LOST
        return 130 if self.stopping and self.release.why is None else 0

    def _loop(self) -> None:
        self.last_touch = self.last_progress = self.last_recover = time.time()
        while not ray_watch.released(self):  # the Ray head lost: its jobs released (ray_watch.py)
            if self.stopping >= 2 or (self.stopping and self.held.paused is not None):  # nothing to wait for
                self._force_stop()
                return
            if self.held.paused is None or time.time() >= self.held.paused.retry_at:
                try:
                    if self._step():
                        return
                except Exception as e:
                    if not self._pause(e):
                        raise
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
            self._check_stalls(time.time())
            for ref in done:
                self._collect(ref)

    def _step(self) -> bool:
        """Everything of a pass that uses the database: write what is held, launch, heartbeats and
        recovery, progress. True when the driver is done. An outage raises (the loop pauses)."""
        now = time.time()
        if self.held.paused is not None:  # a real round trip first: an idle driver may have nothing to write
            ping(self.eng)
        self._write_held(
            self.held.notes(self._attempts())
        )  # what waited first (raises while an outage lasts)
        if self.held.paused is not None:
            self._resume()
            self.last_touch = 0.0  # our heartbeats now; other drivers' jobs went without theirs too,
            self.last_recover = now + self.grace_s / 2  # so they get a grace period to send them
        if not self.stopping:
            self._launch_ready()
        if not self.running and (self.stopping or (self.until_empty and jobqueue.nothing_left(self.eng))):
            return True
        if now - self.last_touch > 1.0:
            self._heartbeat_and_cancels()
            back = recovery.recover_dead(self.eng, self.driver)
            if back and self.progress:
                print(f"recovered {len(back)} job(s) {back} of a dead driver on this host", flush=True)
            self.last_touch = now
        if now - self.last_recover > max(1.0, self.grace_s / 2):
            recovery.recover_stale(self.eng, self.grace_s, exclude={j for j, *_ in self.running.values()})
            jobqueue.cascade(self.eng)
            self.last_recover = now
        if (
            self.progress
            and self.live_view
            and now - self.last_progress > self.settings.progress_every_s
            and self.running
        ):
            self.live_view(self.eng, [j for j, *_ in self.running.values()])
            self.last_progress = now
        return False

    def _launch_ready(self) -> None:
        """Start what the admission rule (orchestrator/admission.py) admits, confirming each start: a
        claim lost to another driver or a launch that fails books nothing for the rest of the pass."""
        ready = (  # an admin's job may preempt one that did not opt in (owners.Admins)
            Candidate(job, job.effective_priority, self._request(job), self.admins(job.owner))
            for job in jobqueue.ready_jobs(self.eng, self.settings.aging_s)
        )
        # the whole cluster as one node (the module's docstring): what Ray reports, less what this driver runs
        cluster = [Node.with_gpus(self.total["CPU"], self.total["GPU"])]
        running = self.preemptions.running_now(r for *_, r in self.running.values())
        admission = Admission(ready, cluster, running, self.settings.max_concurrent)
        for decision in admission:
            job = decision.job
            if isinstance(decision, Preempt):
                self._preempt(decision)
                continue
            if isinstance(decision, Refuse):
                jobqueue.refuse(self.eng, job.id, self.worker, f"job {job.id} {decision.reason}", self.driver)
                continue
            art = self.artifacts / f"{job.id}-{job.kind}-{job.config_hash[:8]}"
            n = jobqueue.claim(self.eng, job.id, self.worker, str(art), self.driver)
            if n is None:
                admission.not_started(decision)  # another driver won it
                continue
            ray.get(self.sink.allow.remote(job.id))  # before the task can ask for its stop flag
            if jobkinds.trains(job.kind, self.kinds):
                _record_claim(art, n)
            try:
                spec = jobqueue.launch_spec(self.eng, job, self.kinds)
                placed = ray_watch.relaunch_strategy(self.ray_watch.no_starts.get(job.id, 0))
                ref = launch(
                    job.id, job.kind, spec, str(art), self.sink, self.kinds, decision.request, n, placed
                )
            except Exception as e:
                admission.not_started(decision)
                if outage(e):  # claimed, not launched: it goes back to the queue with the database
                    self.held.outcomes.append((job.id, n, TaskResult(AttemptOutcome.INTERRUPTED)))
                    raise
                self.held.outcomes.append(
                    (job.id, n, TaskResult(AttemptOutcome.FAILED, traceback.format_exc()))
                )
                self._write_held()
                continue
            admission.started(decision)
            others = {j for j, *_ in self.running.values()}
            self.overlaps[job.id] = self.overlaps.get(job.id, set()) | others
            for other in others:
                self.overlaps[other].add(job.id)
            self.running[ref] = (job.id, n, dataclasses.replace(decision.running, job=job.id))
            self.ray_watch.launched(job.id)  # until its task says it started (ray_watch.unstarted)
            with self.eng.connect() as conn:
                self.clocks[job.id] = StepClock(self.health.settings(conn, job.id))
                self.preemptions.started(job.id, jobqueue.last_preempted(conn, job.id))
            self.art_dirs[job.id] = (art, job.retention)
            if self.progress:
                print(
                    f"{time.strftime('%H:%M:%S')} job {job.id} ({job.kind}) started, attempt {n}", flush=True
                )

    def _attempts(self) -> dict[int, int]:
        """The attempt each running job of this driver is under."""
        return {j: n for j, n, _ in self.running.values()}

    def _preempt(self, decision: Preempt) -> None:
        """Ask the admission's victims to stop at their next step boundary (they checkpoint first, then end
        as preempted, `_collect`, which records a health event at the step they stopped at, and their jobs
        go back to the queue)."""
        for victim, why in self.preemptions.ask(decision):
            self.sink.request_stop.remote(victim)
            if self.progress:
                print(
                    f"{time.strftime('%H:%M:%S')} job {victim}: {why}: asked to stop at its next step",
                    flush=True,
                )

    def _drain(self) -> None:
        """Take what the sink holds into `held`, each batch with the attempt it was reported under."""
        batches = ray.get(self.sink.drain.remote())
        if not batches:
            return
        attempt = self._attempts() | {j: n for j, n, _ in self.held.outcomes}
        for job_id, events in batches:
            self._advance(job_id, events)
            self.held.add(job_id, attempt.get(job_id, 0), events)

    def _collect(self, ref: Any, dropped: TaskResult | None = None) -> None:
        """A finished task (or one `dropped` with that result: ray_watch.unstarted): its outcome waits in
        `outcomes` until it is recorded (`_write_held`)."""
        job_id, n, _ = self.running.pop(ref)
        self.clocks.pop(job_id, None)
        preempted = self.preemptions.ended(job_id)
        stall = self.stalled.pop(job_id, None)
        stopped = self.health_stopped.pop(job_id, None)
        try:
            out = dropped or ray.get(ref)
            if stall is not None and out.outcome != AttemptOutcome.SUCCEEDED:
                out = TaskResult(AttemptOutcome.FAILED, stall.message)
        except ray.exceptions.NodeDiedError as e:  # the machine went away: not the job's fault
            out = TaskResult(AttemptOutcome.INTERRUPTED, f"Ray node lost: {e}")
        except Exception as e:  # the worker process died (OOM-killed, a crash in native code, ...)
            out = TaskResult(
                AttemptOutcome.FAILED, f"Ray task failed: {type(e).__name__}: {e}", fault=faults.Fault.MACHINE
            )
            if stall is not None:  # killed by the stall rule: a failed attempt, retried from its checkpoint
                out = TaskResult(AttemptOutcome.FAILED, stall.message)
        if preempted is not None and out.outcome == AttemptOutcome.INTERRUPTED:  # it stopped as asked
            why, step = preempted
            out = TaskResult(AttemptOutcome.PREEMPTED, why)
            self.findings.append((job_id, n, preemption.stopped(why, step)))
        if stopped is not None:  # a health rule asked it to stop: its failure, if that is what ended it
            out, late = health_stops.ending(stopped, out, job_id)
            if late is not None:  # it ended on its own first: said in its log, before its outcome
                self.held.add(job_id, n, [late])
                self._say(f"job {job_id}: {late.payload['message']}")
        self.held.outcomes.append((job_id, n, out))

    def _write_held(self, notes: list[tuple[int, int, list[Event]]] = ()) -> None:
        """Write `notes` and the held events (one transaction), then record the held outcomes, in order;
        each leaves `held` / `outcomes` once written, so an outage half-way keeps exactly what is not
        written yet (the notes of a failed try are dropped: the next try writes its own)."""
        self.held.write(self.eng, list(notes), self.health)
        if self.findings:
            record_findings(self.eng, self.health, self.findings)
            self.findings = []
        self._health_stops()
        while self.held.outcomes:
            self._record(*self.held.outcomes[0])
            self.held.outcomes.pop(0)

    def _record(self, job_id: int, n: int, out: TaskResult) -> None:
        # every event of the job is written (`_write_held` writes the events first), its result rows
        # among them; a resumed job's count covers all its attempts under this driver
        record_concurrency(self.eng, job_id, n, len(self.overlaps.get(job_id, ())))
        if out.finding is not None:  # stored once: a finding the writer stored already is not again
            record_findings(self.eng, self.health, [(job_id, n, out.finding)])
        with self.eng.connect() as conn:  # a deterministic run would replay its NaN, spikes or error
            retry = faults.retried(out.finding, out.fault, self.health.settings(conn, job_id))
        status = self._finish(job_id, n, out.outcome, out.error, retry)
        if status.finished:
            self.health.forget(job_id)
            self.finished_here[job_id] = status
        if status == JobStatus.FAILED and out.finding is None:  # a finding's own alert is the incident's
            first = (out.error or "").strip().splitlines()[:1]
            alerts.notify(
                self.eng,
                self.alerts,
                alerts.Topic.JOB_FAILED,
                f"job {job_id} failed",
                first[0] if first else "no error recorded",
                group=f"job_failed:{job_id}:{n}",
                level="error",
                job_id=job_id,
            )
        if status.finished:
            self.overlaps.pop(job_id, None)
        art, keep = self.art_dirs.pop(job_id, (None, None))
        if status == JobStatus.SUCCEEDED and art is not None:  # every point is in the database now
            (art / QueueReporter.SPOOL).unlink(missing_ok=True)
            if retention.removes(keep):  # its success is committed: the resume state is no longer needed
                retention.apply(art)
        if self.progress:
            print(
                f"{time.strftime('%H:%M:%S')} job {job_id} attempt {n} {out.outcome} -> {status}",
                flush=True,
            )

    def _finish(
        self, job_id: int, n: int, outcome: AttemptOutcome, error: str | None, retry: bool = True
    ) -> JobStatus:
        return jobqueue.finish(
            self.eng,
            job_id,
            n,
            outcome,
            error,
            backoff_s=self.settings.retry_backoff_s,
            backoff_max_s=self.settings.retry_backoff_max_s,
            retry=retry,
        )

    # ------------------------------------------------------------ the stall rule
    def _advance(self, job_id: int, events: list[Event]) -> None:
        """A job's step clock sees the steps its progress reports say are done; it starts again when the
        attempt starts (after the spool's replay) or resumes from a checkpoint."""
        clock = self.clocks.get(job_id)
        if clock is None:
            return
        now = time.time()
        for e in events:
            if e.kind == EventKind.CHECKPOINT and isinstance(e.payload, dict):
                self.preemptions.checkpoint(job_id, e.payload.get("step"))
            if e.kind in (EventKind.STARTED, EventKind.RESUMED):
                clock.restart()
                self.ray_watch.started(job_id)
            elif e.kind == EventKind.PROGRESS and isinstance(e.payload, dict):
                done = e.payload.get("done")
                if isinstance(done, int | float) and not isinstance(done, bool):
                    total = e.payload.get("total")
                    clock.advance(int(done), now, e.ts, total if isinstance(total, int | float) else None)

    def _check_stalls(self, now: float) -> None:
        """The stall rule on every running attempt: a warning at its limit, then a kill (recorded as a
        failed attempt, retried from its checkpoint like any failure)."""
        for ref, (job_id, n, _) in list(self.running.items()):
            clock = self.clocks.get(job_id)
            if clock is None or job_id in self.stalled:
                continue
            finding, kill = clock.check(now)
            if finding is None:
                continue
            self.findings.append((job_id, n, finding))
            if self.progress:
                print(f"{time.strftime('%H:%M:%S')} job {job_id}: {finding.message}", flush=True)
            if kill:
                self.stalled[job_id] = finding
                gang_watch.kill(self, ref, job_id, self.running[ref][2].request.workers)  # a gang's group too

    def _health_stops(self) -> None:
        """Act on the findings whose rule's action stops the run (orchestrator/health.py: at chance, a
        plateau set to stop): `stop` kills the attempt at once, `hold` asks it to stop at its next step
        with a checkpoint; either way its job fails with the finding, not retried (`_collect`), unless the run
        ended on its own before the stop reached it (orchestrator/health_stops.py)."""
        refs = {(j, n): ref for ref, (j, n, _) in self.running.items()}
        for job_id, n, finding in self.health.take_stops():
            ref = refs.get((job_id, n))
            if ref is None or job_id in self.health_stopped:
                continue  # it ended already, or was stopped for another finding
            self.health_stopped[job_id] = finding
            if finding.action == STOP:
                ray.cancel(ref, force=True)
            else:
                self.sink.request_stop.remote(job_id)
            if self.progress:
                print(f"{time.strftime('%H:%M:%S')} job {job_id}: {finding.message}", flush=True)

    def _heartbeat_and_cancels(self) -> None:
        """Heartbeats; a user's cancel asks its job to stop; an attempt replaced (its job taken over while
        this driver was paused or cut off) is killed at once: its task cancelled, its process ended,
        so it writes nothing more (its outcome, collected as any, is refused by the fence). A gang is
        asked to stop instead (at its next step, after a checkpoint that promise 10 never resumes from)."""
        mine = [j for j, *_ in self.running.values()]
        lost = recovery.touch(self.eng, self._attempts())
        for ref, (j, n, held) in list(self.running.items()):
            if j in lost:
                self._say(f"job {j}: attempt {n} was replaced (its job taken over): stopping it")
                if held.request.workers > 1:  # a gang: Ray Train's controller outlives a killed task and
                    self.sink.request_stop.remote(j)  # keeps its bundles; asked, the gang stops whole
                else:
                    ray.cancel(ref, force=True)
        for j, s in jobqueue.statuses(self.eng, mine).items():
            if s == JobStatus.CANCELLED:
                self.sink.request_stop.remote(j)

    def _force_stop(self) -> None:
        """Second Ctrl-C: kill the tasks; their jobs resume from their last checkpoint next time."""
        for ref in self.running:
            ray.cancel(ref, force=True)
        self._drain()
        for job_id, n, _ in self.running.values():
            forced = TaskResult(AttemptOutcome.INTERRUPTED, "stopped by a second Ctrl-C (forced)")
            self.held.outcomes.append((job_id, n, forced))
        self.running.clear()
        try:
            self._write_held()
        except Exception as e:
            what = outage(e.__cause__ if isinstance(e, Unwritten) else e)
            if what is None:
                raise
            print(
                f"stopped without writing {self.held.count()} event(s) and {len(self.held.outcomes)} "
                f"outcome(s): the database {outage_phrase(what)}; the next `looplab run` "
                "re-queues those jobs, which resume from their checkpoints",
                flush=True,
            )

    # ------------------------------------------------------------ a database outage
    def _pause(self, error: BaseException) -> bool:
        """`error` is an outage: pause (or stay paused) and say so; False when it is no outage."""
        url = self.eng.url.render_as_string(hide_password=True)
        return self.held.pause(error, len(self.running), url, self._say)

    def _queue_done(self) -> None:
        """The end of the loop: the queue emptied, or stopped; a message says how this run's jobs ended."""
        if self.alerts.channels and self.held.paused is None:
            alerts.queue_done(self.eng, self.alerts, self.finished_here, bool(self.stopping), self.worker)

    def _resume(self) -> None:
        p = self.held.resumed()
        self._say(
            f"database back after {time.time() - p.since:.0f} s: every held event and outcome is written; "
            "claiming again"
        )
        start = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(p.since))
        alerts.notify(
            self.eng,
            self.alerts,
            alerts.Topic.PAUSED,
            "the queue paused: the database was away",
            f"the database {outage_phrase(p.outage)} from {start} for {time.time() - p.since:.0f} s; "
            "the driver held the running jobs' events and wrote them once it was back",
            group=f"paused:{self.worker}:{p.since}",
            level="error",
        )

    def _say(self, message: str, level: int = logging.WARNING) -> None:
        log.log(level, message)
        if self.progress:
            print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)
