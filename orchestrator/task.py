"""What runs on the Ray side of the queue: the job task, its reporter and the driver's mailbox.

`launch` starts a job with what the admission booked for it: `execute_job` for a job of one worker, or
`execute_gang` for a train job of N workers (`resources: {"workers": N}`), which runs it data-parallel
on Ray Train (workers/train/distributed.py). Where the resources are held, for a gang: the task that hosts
Ray Train's driver (`TorchTrainer.fit`, its controller actor beside it) holds none (num_cpus=0, no
GPU) and runs on the driver's node (so it is lost only with the driver, and Ray's placement group
with it); the N training workers run in the one placement group Ray Train reserves for them, N bundles of
the job's per-worker `num_cpus` / `num_gpus`: exactly what the admission booked (all bundles at once, or
the job waits whole), so the driver's booking and Ray's placement group agree and a gang never holds a
partial set of workers. Rank 0 reports through its own `QueueReporter` (metrics, checkpoints, the
result row, the stop flag), as a one-worker job's task does. Both tasks end in `run_attempt`, which
turns how the run ended into the `TaskResult` the driver records, with the same advice for an
out-of-memory or full-disk error whether one worker or a gang ran the job.

`execute_job` runs one job on a Ray worker (any node). Its `QueueReporter` batches the job's events and
pushes them every half second, with a heartbeat, to the `EventSink` actor that the driver owns; the
reply carries the stop flag `reporter.should_stop()` returns (Ctrl-C on the driver, `looplab cancel`).
Workers never open the database: the driver drains the sink and is the one writer. Metric points
also go to a `MetricSpool` file first, so that a kill between a point's report and its commit loses
nothing (see QueueReporter).
"""

from __future__ import annotations

import errno
import functools
import importlib
import json
import logging
import os
import sys
import threading
import time
import traceback
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ray

from looplab.orchestrator.faults import Fault, classify, program_note
from looplab.orchestrator.health import TRAIN_LOSS, Finding, Level, Rule, non_finite
from looplab.orchestrator.jobkinds import check_workers
from looplab.orchestrator.joblog import ProgressLines, captured
from looplab.orchestrator.states import AttemptOutcome
from looplab.workers.reporter import BaseReporter, Event, EventKind, JobInterrupted
from looplab.workers.train.rewind import SpikeError

if TYPE_CHECKING:
    from looplab.orchestrator.admission import Request
    from looplab.workers.jobs import JobRegistry

log = logging.getLogger("looplab.task")
OOM_ADVICE = (
    "CUDA out of memory: the job did not fit on its GPU. Lower micro_batch_size (sequences per "
    "forward: the same run, its gradient accumulated over more forwards), or give it a whole GPU "
    "(resources num_gpus=1); batch_size, seq_len or the model size change the run. "
    "Traceback follows.\n"
)
DISK_FULL_ADVICE = (
    "No space left on device: the job stopped. Its last complete checkpoint is kept (a checkpoint "
    "is written to a temporary file and renamed, so a partial one is never read) and a retry "
    "resumes from it: free space on the artifact directory's volume, then `looplab retry {job}` "
    "if its attempts are used up. Traceback follows.\n"
)


@dataclass(frozen=True)
class TaskResult:
    """What a job's task hands the driver, which records it (`jobqueue.finish`): how the attempt ended,
    the error to record (a failure's advice and traceback, why an attempt was interrupted, or None),
    a succeeded job's summary (what its kind's `run` returned), and the health finding that ended the
    attempt (a non-finite figure: the driver stores it and fails the job without a retry unless its
    grid asks for one)."""

    outcome: AttemptOutcome
    error: str | None = None
    summary: dict[str, Any] | None = None
    finding: Finding | None = None
    fault: str | None = None  # a failure's orchestrator.faults.Fault: whether a retry can help


@ray.remote(num_cpus=0)
class EventSink:
    """Mailbox between running jobs and the driver. push() returns the job's stop flag."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, list[Event]]] = []
        self.stop: set[int] = set()
        self.stop_all = False
        self.groups: dict[int, str] = {}  # job -> its running gang's placement group

    def push(self, job_id: int, events: list[Event]) -> bool:
        if events:
            self.batches.append((job_id, events))
        return self.stop_all or job_id in self.stop

    def drain(self) -> list[tuple[int, list[Event]]]:
        out, self.batches = self.batches, []
        return out

    def request_stop(self, job_id: int | None = None) -> None:
        if job_id is None:
            self.stop_all = True
        else:
            self.stop.add(job_id)

    def allow(self, job_id: int) -> None:
        """A new attempt starts: forget a stop asked of an earlier one (a cancel, then a retry), and the
        placement group of an earlier gang."""
        self.stop.discard(job_id)
        self.groups.pop(job_id, None)

    def placement(self, job_id: int, group: str) -> None:
        """Rank 0 of a gang names the placement group Ray Train made for it (hex id): the driver removes
        it when it stops the gang itself (orchestrator/gang_watch.py)."""
        self.groups[job_id] = group

    def placement_of(self, job_id: int) -> str | None:
        return self.groups.get(job_id)


class MetricSpool:
    """An append-only file of a job's metric points (and rewinds), one JSON line each, in its artifact dir.

    Why: a kill -9 (or power cut) can land after a checkpoint was written but before the points that
    preceded it reached the database; the resumed attempt starts after that checkpoint and would
    never report them again. So every point is written here before it is shipped, and a resuming attempt
    replays the file once it has chosen its checkpoint (metric upserts are idempotent), then its
    `resumed(step)` drops whatever came after the checkpoint. The driver deletes the file once the job has succeeded.

    Nothing half-written is read: each point is one `write` of a whole line to a file opened for
    appending (no buffer holds part of a line for later); a line cut short (a kill, a full disk) has no
    closing brace, so it is no JSON and replay skips it, and the next point starts on a line of its
    own. On a full disk `append` returns False instead of raising: the point still goes to the driver
    (QueueReporter), and spooling goes on by itself once there is space.
    """

    NAME = "events.spool"
    # a rewind is spooled with the points: replayed in order, it moves the spiked points it superseded
    # out of the curve again (and is stored even if a kill lost it before it reached the driver)
    KINDS = (EventKind.METRIC, EventKind.REWOUND)
    FULL = (errno.ENOSPC, errno.EDQUOT)  # what a full disk or quota raises

    def __init__(self, artifact_dir: str | Path) -> None:
        self.path = Path(artifact_dir) / self.NAME
        self._fd: int | None = None
        self._torn = False  # the file may end in a partial line

    def replay(self) -> list[Event]:
        """Metric and rewound events of earlier attempts, in the order they were written (a torn line
        from a kill or a full disk is skipped; a line without a kind, as every line was before rewinds,
        is a metric)."""
        if not self.path.exists():
            return []
        events = []
        for line in self.path.read_text(errors="replace").splitlines():
            try:
                point = json.loads(line)
            except ValueError:
                continue
            events.append(Event(EventKind(point.pop("kind", EventKind.METRIC)), point.pop("ts"), point))
        return events

    def append(self, event: Event) -> bool:
        """Spool one point; False when the disk (or quota) is full and it could not be written whole."""
        kind = {} if event.kind == EventKind.METRIC else {"kind": str(event.kind)}
        line = (json.dumps({"ts": event.ts, **kind, **event.payload}) + "\n").encode()
        try:
            if self._fd is None:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                self._torn = os.fstat(self._fd).st_size > 0 and not self._ends_with_newline()
            if self._torn:  # end a torn line, or this point would be glued to it
                line = b"\n" + line
            while line:
                line = line[os.write(self._fd, line) :]
        except OSError as e:
            if e.errno not in self.FULL:
                raise
            self._torn = True  # part of the line may be in the file
            return False
        self._torn = False
        return True

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _ends_with_newline(self) -> bool:
        with open(self.path, "rb") as f:
            f.seek(-1, 2)
            return f.read(1) == b"\n"


class QueueReporter(BaseReporter):
    """Runs inside the Ray task: buffers events, ships them with a heartbeat every `flush_s`.

    With an artifact dir, metric points also go to its `MetricSpool` before they are shipped, and the
    points an earlier attempt spooled are replayed when the attempt resumes (see MetricSpool for why).
    `_ship` is the one call that needs Ray: tests replace it to run the reporter without a cluster.
    """

    SPOOL = MetricSpool.NAME
    DRIVER_LOST_S = 30.0

    def __init__(
        self,
        job_id: int,
        sink: Any,
        artifact_dir: str | Path | None = None,
        flush_s: float = 0.5,
        attempt: int | None = None,
    ) -> None:
        self.job_id, self.sink, self.flush_s, self.attempt = job_id, sink, flush_s, attempt
        self._buf: list[Event] = []
        self._lock = threading.Lock()  # guards the buffer
        self._send_lock = threading.Lock()  # keeps batches in order
        self._spool = MetricSpool(artifact_dir) if artifact_dir is not None else None
        self._spool_full = False
        self._progress_lines = ProgressLines()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def emit(self, event: Event) -> None:
        with self._lock:
            if event.kind in MetricSpool.KINDS and self._spool is not None:
                spooled = self._spool.append(event)
                if spooled == self._spool_full:  # it filled up, or has room again: say so once
                    self._spool_full = not spooled
                    self._buf.append(Event(EventKind.LOG, event.ts, self._spool_note(spooled)))
            self._buf.append(event)

    def progress(self, done, total, eta_s=None) -> None:
        """The progress event, and a log line at each tenth of the way (orchestrator/joblog.py)."""
        super().progress(done, total, eta_s)
        line = self._progress_lines.line(float(done), float(total), eta_s)
        if line is not None:
            self.log(line)

    def placement(self, group: str) -> None:
        """Rank 0 of a gang: the driver learns the gang's Ray placement group (`EventSink.placement`)."""
        self.sink.placement.remote(self.job_id, group)

    def resumed(self, step: int) -> None:
        """The attempt resumes from a checkpoint at `step`: the points earlier attempts spooled go first
        (see MetricSpool), then the event that drops the points after `step`. Read now, after the
        checkpoint was chosen, not when the attempt started: an attempt that was fenced out may still be
        running (a paused or cut-off host) and write a later checkpoint after its spooled points; a
        replay read before that would miss the points up to the checkpoint this attempt then resumes
        from, and nobody would report them again."""
        if self._spool is not None:
            with self._lock:
                self._buf.extend(self._spool.replay())
        super().resumed(step)

    def _spool_note(self, spooled: bool) -> dict[str, str]:
        if spooled:
            return {"level": "INFO", "message": f"the spool {self._spool.path} takes points again"}
        return {
            "level": "WARNING",
            "message": f"no space left for the spool {self._spool.path}: points still go "
            "to the driver, but a kill before they are stored would lose them (the checkpoint, on the same "
            "disk, will fail too: the job then stops at its last good checkpoint)",
        }

    def _ship(self, batch: list[Event]) -> bool:
        """Hand a batch to the driver's sink; returns the job's stop flag."""
        return bool(ray.get(self.sink.push.remote(self.job_id, batch)))

    def flush(self) -> None:
        with self._send_lock:
            with self._lock:
                batch, self._buf = self._buf, []
            self.stop_requested = self._ship(batch)

    def _loop(self) -> None:
        failing_since = None
        while not self._closed.wait(self.flush_s):
            self.heartbeat()
            try:
                self.flush()
                failing_since = None
            except Exception:  # the driver is gone (killed; its sink died with it)
                log.debug("event flush failed", exc_info=True)
                failing_since = failing_since or time.time()
                if time.time() - failing_since > self.DRIVER_LOST_S:
                    # nobody records this job any more: checkpoint and stop; a new driver resumes it
                    self.stop_requested = True

    def close(self) -> None:
        self._closed.set()
        self._thread.join()
        self.flush()
        if self._spool is not None:
            self._spool.close()


def sink_on_this_node() -> Any:
    """A new EventSink on the driver's own node. Ray may place a zero-CPU actor on any node, and the
    death of that node would take every job's mailbox with it (and stop the driver) although the
    jobs and the driver ran elsewhere; pinned here, the sink lives exactly as long as the driver."""
    return EventSink.options(scheduling_strategy=_this_node()).remote()


def _this_node() -> Any:
    """A scheduling strategy that keeps an actor or task on the driver's node."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)


def kinds_ref(kinds: JobRegistry) -> Any:
    """A module travels as (name, the sys.path entry it was imported from): a Ray worker on another
    node, or started before a test put its root on sys.path, can still import it by name."""
    if isinstance(kinds, types.ModuleType):
        root = Path(kinds.__file__).resolve().parents[kinds.__name__.count(".")]
        if kinds.__file__.endswith("__init__.py"):
            root = root.parent
        return ("module", kinds.__name__, str(root))
    return kinds


def _load_kinds(ref: Any) -> JobRegistry:
    if isinstance(ref, tuple) and ref and ref[0] == "module":
        _, name, root = ref
        try:
            return importlib.import_module(name)
        except ImportError:
            sys.path.insert(0, root)
            return importlib.import_module(name)
    return ref


def launch(
    job_id: int,
    kind: str,
    spec: dict,
    artifact_dir: str,
    sink: Any,
    kinds: JobRegistry,
    request: Request,
    attempt: int | None = None,
    strategy: Any = None,
) -> Any:
    """Start attempt `attempt` of job `job_id` (the number `jobqueue.claim` gave: checkpoints are named
    and fenced by it) with the resources the admission booked (`request`); returns the Ray ref of its
    `TaskResult`. `strategy`: a Ray scheduling strategy for a one-worker job (ray_watch.relaunch_strategy,
    after a launch Ray never started); a gang stays on the driver's node. ConfigError for a gang of a
    kind that cannot run on several workers."""
    if request.workers == 1:
        placed = {} if strategy is None else {"scheduling_strategy": strategy}
        return execute_job.options(num_cpus=request.cpus, num_gpus=request.gpus, **placed).remote(
            job_id, kind, spec, artifact_dir, sink, kinds_ref(kinds), attempt
        )
    check_workers("resources.workers", kind, request.workers, kinds)
    # on the driver's node: Ray Train's controller runs beside its host, and their placement group lives
    # until the driver ends; were the host's node lost while the driver lives, the group would hold the
    # workers' resources the admission believes free (see `sink_on_this_node` for the same reasoning)
    return execute_gang.options(scheduling_strategy=_this_node()).remote(
        job_id, spec, artifact_dir, sink, request.workers, request.cpus, request.gpus, attempt
    )


@ray.remote(max_retries=0, num_cpus=0, num_gpus=0)
def execute_gang(
    job_id: int,
    spec: dict,
    artifact_dir: str,
    sink: Any,
    workers: int,
    cpus: float,
    gpus: float,
    attempt: int | None = None,
) -> TaskResult:
    """Runs train job `job_id` on `workers` Ray Train workers of `cpus` CPUs and `gpus` GPUs each (this
    task holds nothing: see the module docstring). Never raises (`run_attempt`)."""
    Path(artifact_dir).mkdir(parents=True, exist_ok=True)
    rep = QueueReporter(job_id, sink)  # where the run's driver is; rank 0 reports the rest itself
    rank0 = functools.partial(QueueReporter, job_id, sink, artifact_dir, attempt=attempt)  # on rank 0
    return run_attempt(
        job_id,
        rep,
        f"{_this_process()} ({workers} workers)",
        None,
        functools.partial(run_gang, spec, artifact_dir, workers, cpus, gpus, rank0),
    )


@ray.remote(max_retries=0)
def execute_job(
    job_id: int,
    kind: str,
    spec: dict,
    artifact_dir: str,
    sink: Any,
    kinds_ref: Any,
    attempt: int | None = None,
) -> TaskResult:
    """Runs one job on a Ray worker. Never raises (`run_attempt`)."""
    Path(artifact_dir).mkdir(parents=True, exist_ok=True)
    rep = QueueReporter(job_id, sink, artifact_dir, attempt=attempt)
    gpus = os.environ.get("CUDA_VISIBLE_DEVICES") or ",".join(str(g) for g in ray.get_gpu_ids())

    def run() -> TaskResult:
        summary = _load_kinds(kinds_ref).run(kind, spec, rep, artifact_dir)
        return TaskResult(AttemptOutcome.SUCCEEDED, summary=summary)

    return run_attempt(job_id, rep, _this_process(), gpus or None, run)


def _this_process() -> str:
    """Where an attempt runs, as the job's `worker` column shows it: node:pid."""
    return f"{ray.get_runtime_context().get_node_id()[:12]}:{os.getpid()}"


def run_gang(
    spec: dict,
    artifact_dir: str,
    workers: int,
    cpus: float,
    gpus: float,
    rank0: Callable[[], BaseReporter],
) -> TaskResult:
    """The run of a gang (workers/train/distributed.py `fit`): a rank that died (killed, its node lost)
    interrupts the attempt, as a lost node does; a rank's error is raised, for `run_attempt`."""
    from looplab.workers.train.distributed import WorkerLost, fit

    try:
        ranks = fit(spec, artifact_dir, workers, cpus, gpus, rank0)
    except WorkerLost as e:
        return TaskResult(AttemptOutcome.INTERRUPTED, f"Ray Train worker lost: {e}")
    if "interrupted" in ranks:
        return TaskResult(AttemptOutcome.INTERRUPTED)
    return TaskResult(AttemptOutcome.SUCCEEDED, summary=ranks["summary"])


def run_attempt(
    job_id: int, rep: QueueReporter, where: str, gpus: str | None, run: Callable[[], TaskResult]
) -> TaskResult:
    """What every attempt does around its run, on one worker or a gang: says it started (on `where`,
    with `gpus`), calls `run`, turns what it raised into the result the driver records, and ships the
    last events. Never raises: a stop (the driver's, or Ctrl-C) interrupts the attempt, every other
    error fails it, the queue goes on; an out-of-memory or full-disk error opens with what to do."""
    rep.started(where, gpus)
    try:
        with captured(rep):
            result = run()
    except (JobInterrupted, KeyboardInterrupt):
        result = TaskResult(AttemptOutcome.INTERRUPTED)
    except BaseException as e:  # every failure is recorded, the queue goes on
        finding = non_finite_of(e) or spikes_of(e)
        fault = classify(_errors(e), _out_of_memory(e) or _disk_full(e))
        lead = advice(e, job_id) if finding is None else f"{finding.message}. Traceback follows.\n"
        if finding is None and not lead and fault == Fault.PROGRAM:
            lead = program_note(e)
        result = TaskResult(
            AttemptOutcome.FAILED, lead + traceback.format_exc(), finding=finding, fault=fault
        )
    try:
        rep.close()
    except Exception:
        log.warning("job %s: could not ship the last events", job_id, exc_info=True)
    return result


def advice(error: BaseException, job_id: int) -> str:
    """What to do, for an error the job's own settings or the machine caused: out of memory
    (OOM_ADVICE), a full disk (DISK_FULL_ADVICE); "" for any other."""
    if _out_of_memory(error):
        return OOM_ADVICE
    if _disk_full(error):
        return DISK_FULL_ADVICE.format(job=job_id)
    return ""


def non_finite_of(error: BaseException) -> Finding | None:
    """The non-finite finding of a run that raised a FloatingPointError (`error` or one behind it): the
    trainer raises one whose args are (key, step, value) at the first non-finite train loss or gradient
    norm; a plain one has no step."""
    for e in _errors(error):
        if isinstance(e, FloatingPointError):
            key, step, value = e.args if len(e.args) == 3 else (None, None, None)
            if isinstance(key, str) and isinstance(step, int) and isinstance(value, float):
                return non_finite(key, step, value) or _plain_non_finite(str(e))
            return _plain_non_finite(str(e))
    return None


def spikes_of(error: BaseException) -> Finding | None:
    """The finding of a run that loss spikes stopped (`workers.train.rewind.SpikeError`: its rewinds used up,
    or none possible): final, as a non-finite loss is, since a retry would replay the same spikes."""
    for e in _errors(error):
        if isinstance(e, SpikeError):
            step, loss = e.args[1:3] if len(e.args) == 3 else (None, None)
            return Finding(
                Rule.REWIND, Level.ERROR, step, TRAIN_LOSS, loss, f"loss spikes stopped the run: {e}"
            )
    return None


def _plain_non_finite(message: str) -> Finding:
    return Finding(
        Rule.NON_FINITE, Level.ERROR, None, None, None, f"a non-finite value stopped the run: {message}"
    )


def _errors(error: BaseException | None) -> Iterator[BaseException]:
    """`error`, the errors that caused it, and a gang's rank errors: Ray Train raises one error for the
    gang (`WorkerGroupError`) and keeps each failed rank's own in `worker_failures` (a rank's error
    comes from its process pickled, which keeps its type, errno and message, not what caused it)."""
    todo, seen = [error], set()
    while todo:
        e = todo.pop()
        if not isinstance(e, BaseException) or id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        todo += [e.__cause__, e.__context__, *(getattr(e, "worker_failures", None) or {}).values()]


def _out_of_memory(error: BaseException | None) -> bool:
    """`error`, or one behind it (`_errors`), is CUDA running out of memory (torch's OutOfMemoryError)."""
    return any(
        type(e).__name__ == "OutOfMemoryError" or "CUDA out of memory" in str(e) for e in _errors(error)
    )


def _disk_full(error: BaseException | None) -> bool:
    """`error`, or one behind it (`_errors`), is a full disk or quota (a checkpoint's NoSpaceError too)."""
    from looplab.workers.checkpoint import NoSpaceError

    return any(
        isinstance(e, OSError) and (e.errno in MetricSpool.FULL or isinstance(e, NoSpaceError))
        for e in _errors(error)
    )
