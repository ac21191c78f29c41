"""What runs on the Ray side of the queue: the job task, its reporter and the driver's mailbox.

`execute_job` runs one job on a Ray worker (any node). Its `QueueReporter` batches the job's events and
pushes them every half second, with a heartbeat, to the `EventSink` actor that the driver owns; the
reply carries the stop flag `reporter.should_stop()` returns (Ctrl-C on the driver, `looplab cancel`).
Workers never open the database: the driver drains the sink and is the one writer.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import sys
import threading
import time
import traceback
import types
from pathlib import Path
from typing import Any

import ray

from workers.reporter import BaseReporter, Event

log = logging.getLogger("looplab.task")
OOM_ADVICE = ("CUDA out of memory: the job did not fit on its GPU. Lower batch_size (or seq_len, or the "
              "model size), or give it a whole GPU (resources num_gpus=1). Traceback follows.\n")  # fmt: skip


@ray.remote(num_cpus=0)
class EventSink:
    """Mailbox between running jobs and the driver. push() returns the job's stop flag."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, list[Event]]] = []
        self.stop: set[int] = set()
        self.stop_all = False

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
        """A new attempt starts: forget a stop asked of an earlier one (a cancel, then a retry)."""
        self.stop.discard(job_id)


class QueueReporter(BaseReporter):
    """Runs inside the Ray task: buffers events, ships them with a heartbeat every `flush_s`.

    Metric points are also appended to a spool file in the artifact dir before they are shipped.
    Why: a kill -9 (or power cut) can land after a checkpoint was written but before the points that
    preceded it reached the database; the resumed attempt starts after that checkpoint and would
    never report them again. So a new attempt first replays the spool (metric upserts are
    idempotent), and its `resumed(step)` then drops whatever came after the checkpoint.
    """

    SPOOL = "events.spool"
    DRIVER_LOST_S = 30.0

    def __init__(self, job_id: int, sink: Any, artifact_dir: str | Path | None = None,
                 flush_s: float = 0.5) -> None:  # fmt: skip
        self.job_id, self.sink, self.flush_s = job_id, sink, flush_s
        self._buf: list[Event] = []
        self._lock = threading.Lock()  # guards the buffer
        self._send_lock = threading.Lock()  # keeps batches in order
        self._spool = None
        if artifact_dir is not None:
            path = Path(artifact_dir) / self.SPOOL
            self._buf.extend(_read_spool(path))
            self._spool = open(path, "a", buffering=1)  # noqa: SIM115 - line-buffered: one write per point
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def emit(self, event: Event) -> None:
        with self._lock:
            if event.kind == "metric" and self._spool is not None:
                self._spool.write(json.dumps({"ts": event.ts, **event.payload}) + "\n")
            self._buf.append(event)

    def flush(self) -> None:
        with self._send_lock:
            with self._lock:
                batch, self._buf = self._buf, []
            self.stop_requested = bool(ray.get(self.sink.push.remote(self.job_id, batch)))

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


def _read_spool(path: Path) -> list[Event]:
    """Metric events of earlier attempts (a torn last line from a kill is skipped)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            d = json.loads(line)
        except ValueError:
            continue
        out.append(Event("metric", d.pop("ts"), d))
    return out


def kinds_ref(kinds: Any) -> Any:
    """A module travels as (name, the sys.path entry it was imported from): a Ray worker on another
    node, or started before a test put its root on sys.path, can still import it by name."""
    if isinstance(kinds, types.ModuleType):
        root = Path(kinds.__file__).resolve().parents[kinds.__name__.count(".")]
        if kinds.__file__.endswith("__init__.py"):
            root = root.parent
        return ("module", kinds.__name__, str(root))
    return kinds


def _load_kinds(ref: Any) -> Any:
    if isinstance(ref, tuple) and ref and ref[0] == "module":
        _, name, root = ref
        try:
            return importlib.import_module(name)
        except ImportError:
            sys.path.insert(0, root)
            return importlib.import_module(name)
    return ref


@ray.remote(max_retries=0)
def execute_job(job_id: int, kind: str, spec: dict, artifact_dir: str, sink: Any, kinds_ref: Any) -> dict:
    """Runs one job on a Ray worker. Never raises: the outcome is a dict the driver records."""
    from workers.jobs import JobInterrupted

    Path(artifact_dir).mkdir(parents=True, exist_ok=True)
    rep = QueueReporter(job_id, sink, artifact_dir)
    gpus = os.environ.get("CUDA_VISIBLE_DEVICES") or ",".join(str(g) for g in ray.get_gpu_ids())
    node = ray.get_runtime_context().get_node_id()[:12]
    rep.emit(Event("started", time.time(), {"worker": f"{node}:{os.getpid()}", "gpu_ids": gpus or None}))
    try:
        summary = _load_kinds(kinds_ref).run(kind, spec, rep, artifact_dir)
        out = {"outcome": "succeeded", "summary": summary}
    except (JobInterrupted, KeyboardInterrupt):
        out = {"outcome": "interrupted", "error": None}
    except BaseException as e:  # noqa: BLE001 - every failure is recorded, the queue goes on
        tb = traceback.format_exc()
        oom = type(e).__name__ == "OutOfMemoryError" or "CUDA out of memory" in str(e)
        out = {"outcome": "failed", "error": (OOM_ADVICE + tb) if oom else tb}
    try:
        rep.close()
    except Exception:
        log.warning("job %s: could not ship the last events", job_id, exc_info=True)
    return out
