"""The Reporter protocol: the only way a job talks outward.

A job is a plain function `run(spec, reporter, artifact_dir) -> dict` (see `workers.jobs`). It never
opens the database; everything it wants recorded goes through these calls. Under the queue the
reporter batches events and ships them to the scheduler process (the one database writer); standalone
it prints progress; in tests it keeps them in memory.

Every event is a small picklable `Event(kind, ts, payload)`, made by one `Reporter` method per kind.
The kinds are `EventKind` (the only place their names are spelled); kinds and payloads:
- metric:     {"key", "step", "tokens", "wall_s", "value"}      one curve point
- progress:   {"done", "total", "eta_s"}                          e.g. steps
- heartbeat:  {}                                                  "still alive"
- checkpoint: {"path", "step"}                                    a checkpoint was written
- result:     {"table", "row"}    a row of a result table (train_results, depth_evals,
                                  round_deltas, decode_benches); the job id is added by the writer
- log:        {"level", "message"}
- resumed:    {"step"}            the job resumed from a checkpoint at this step: points the
                                  previous attempt reported after it are superseded
- rewound:    {"step", "spiked_step", "rows", "n"}  a loss spike at `spiked_step` was rewound (the n-th
                                  rewind of the run): training went back to its checkpoint at `step`, and
                                  the data rows `rows` (global row indices) are skipped from then on; the
                                  points reported after `step` become a superseded segment (kept, drawn
                                  faint, never a run's curve)
- started:    {"worker", "gpu_ids"}  where the attempt runs ("node:pid", the visible GPUs or None);
                                  sent by the queue's task wrapper before the job starts, not by jobs
"""

from __future__ import annotations

import signal
import sys
import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

# a train run's unigram baseline, reported as a metric at step 0 of each attempt (workers/data/shards.py
# `unigram_xent`): the bar the health rule `unigram` (orchestrator/health.py) holds its val_loss to
UNIGRAM_XENT = "unigram_xent"
# A `logging` record's `extra` key for a line the job already sent with `reporter.log`: the queue's
# capture of the job's logging (orchestrator/joblog.py) does not repeat it.
REPORTED = "looplab_reported"


class JobInterrupted(Exception):
    """Raised by a job that was asked to stop (`Reporter.should_stop()`) after it saved a checkpoint.
    The queue puts such a job back to `queued`; it resumes from that checkpoint."""


class EventKind(StrEnum):
    """What an event says (payloads in the module docstring). A string enum, like
    `orchestrator.states.JobStatus`: an event that crossed a process boundary or a JSON line compares
    equal to its member (`"metric" == EventKind.METRIC`), and a JSON line stores the plain value."""

    METRIC = "metric"
    PROGRESS = "progress"
    HEARTBEAT = "heartbeat"
    CHECKPOINT = "checkpoint"
    RESULT = "result"
    LOG = "log"
    RESUMED = "resumed"
    REWOUND = "rewound"
    STARTED = "started"


@dataclass(frozen=True)
class Event:
    kind: EventKind  # a plain string that is no member is refused by the writer as a bad event
    ts: float
    payload: dict[str, Any] = field(default_factory=dict)


class Reporter(Protocol):
    attempt: int | None  # the queue's attempt number, its fencing token (workers/artifacts.py names by it)

    def metric(
        self, key: str, step: int, value: float, *, tokens: int | None = None, wall_s: float | None = None
    ) -> None: ...
    def progress(self, done: float, total: float, eta_s: float | None = None) -> None: ...
    def heartbeat(self) -> None: ...
    def checkpoint(self, path: str, step: int) -> None: ...
    def result(self, table: str, row: dict[str, Any]) -> None: ...
    def log(self, message: str, level: str = "INFO") -> None: ...
    def resumed(self, step: int) -> None: ...
    def rewound(self, step: int, spiked_step: int, rows: list[int], n: int) -> None: ...
    def started(self, worker: str, gpu_ids: str | None) -> None: ...
    def should_stop(self) -> bool:
        """True when the job was asked to stop (Ctrl-C on the queue, cancel): checkpoint and return."""
        ...


class BaseReporter:
    """Turns the calls into Events and hands them to `emit`. Subclasses override `emit`."""

    stop_requested: bool = False
    attempt: int | None = None  # the queue's attempt number (its fencing token); None outside the queue

    def emit(self, event: Event) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def _e(self, kind: EventKind, **payload: Any) -> None:
        self.emit(Event(kind, time.time(), payload))

    def metric(self, key, step, value, *, tokens=None, wall_s=None):
        self._e(
            EventKind.METRIC,
            key=key,
            step=int(step),
            value=float(value),
            tokens=None if tokens is None else int(tokens),
            wall_s=None if wall_s is None else float(wall_s),
        )

    def progress(self, done, total, eta_s=None):
        self._e(EventKind.PROGRESS, done=float(done), total=float(total), eta_s=eta_s)

    def heartbeat(self):
        self._e(EventKind.HEARTBEAT)

    def checkpoint(self, path, step):
        self._e(EventKind.CHECKPOINT, path=str(path), step=int(step))

    def result(self, table, row):
        self._e(EventKind.RESULT, table=table, row=dict(row))

    def log(self, message, level="INFO"):
        self._e(EventKind.LOG, level=level, message=str(message))

    def resumed(self, step):
        self._e(EventKind.RESUMED, step=int(step))

    def rewound(self, step, spiked_step, rows, n):
        self._e(
            EventKind.REWOUND,
            step=int(step),
            spiked_step=int(spiked_step),
            rows=[int(r) for r in rows],
            n=int(n),
        )

    def started(self, worker, gpu_ids):
        self._e(EventKind.STARTED, worker=str(worker), gpu_ids=gpu_ids)

    def should_stop(self) -> bool:
        return self.stop_requested


class MemoryReporter(BaseReporter):
    """Keeps every event in a list: for tests."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def emit(self, event: Event) -> None:
        self.events.append(event)

    def of(self, kind: EventKind | str) -> list[dict[str, Any]]:
        return [e.payload for e in self.events if e.kind == kind]

    def curve(self, key: str) -> list[tuple[int, float]]:
        return [(p["step"], p["value"]) for p in self.of(EventKind.METRIC) if p["key"] == key]


class SilentReporter(BaseReporter):
    """Drops every event: a standalone run with --quiet (and no --events-jsonl) keeps nothing."""

    def emit(self, event: Event) -> None:
        pass


class ConsoleReporter(BaseReporter):
    """For standalone runs (`python -m looplab.workers.train ...`): a tqdm progress bar plus a line for each
    event of the kinds in `SAID` (a log message as it is, the others as `kind: payload`)."""

    SAID = (EventKind.LOG, EventKind.CHECKPOINT, EventKind.RESUMED, EventKind.RESULT, EventKind.STARTED)

    def __init__(self, desc: str = "job", stream=sys.stderr) -> None:
        from tqdm import tqdm

        self._tqdm = tqdm
        self._bar = None
        self._desc = desc
        self._stream = stream
        self._last: dict[str, float] = {}
        self.events_seen = 0

    def emit(self, event: Event) -> None:
        self.events_seen += 1
        p = event.payload
        if event.kind == EventKind.PROGRESS:
            if self._bar is None or self._bar.total != p["total"]:
                if self._bar is not None:
                    self._bar.close()
                self._bar = self._tqdm(
                    total=p["total"], desc=self._desc, file=self._stream, dynamic_ncols=True
                )
            self._bar.n = p["done"]
            if self._last:
                self._bar.set_postfix({k: f"{v:.4g}" for k, v in self._last.items()}, refresh=False)
            self._bar.refresh()
        elif event.kind == EventKind.METRIC:
            if p["key"] in ("train_loss", "val_loss", "tokens_per_s", "lr"):
                self._last[p["key"]] = p["value"]
        elif event.kind in self.SAID:
            msg = p.get("message") if event.kind == EventKind.LOG else f"{event.kind}: {p}"
            if self._bar is not None:
                self._bar.write(str(msg), file=self._stream)
            else:
                print(msg, file=self._stream)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


class JsonlReporter(BaseReporter):
    """Appends every event as one JSON line to a file (flushed per line), optionally passing it on to
    another reporter: `python -m looplab.workers.train ... --events-jsonl events.jsonl` records a run for later
    analysis, and tests read the curves of killed subprocesses from it."""

    def __init__(self, path, inner: BaseReporter | None = None) -> None:
        import json

        self._json = json
        self._f = open(path, "a", buffering=1)  # lives as long as the reporter
        self.inner = inner

    def emit(self, event: Event) -> None:
        self._f.write(self._json.dumps({"kind": event.kind, "ts": event.ts, **event.payload}) + "\n")
        if self.inner is not None:
            self.inner.emit(event)

    def should_stop(self) -> bool:
        return self.stop_requested or (self.inner is not None and self.inner.should_stop())

    def close(self) -> None:
        self._f.close()
        if self.inner is not None and hasattr(self.inner, "close"):
            self.inner.close()


def make_reporter(desc: str, events_jsonl: str | None = None, quiet: bool = False) -> BaseReporter:
    """The reporter of a standalone run (`python -m workers.<job>`): a progress bar (or nothing, when
    `quiet`), optionally recording every event to `events_jsonl`. Ctrl-C and SIGTERM ask the job to
    stop: a train job checkpoints at its next step and can be resumed by rerunning the command."""
    inner: BaseReporter = SilentReporter() if quiet else ConsoleReporter(desc)
    rep: BaseReporter = JsonlReporter(events_jsonl, inner) if events_jsonl else inner

    def stop(signum, frame) -> None:
        rep.stop_requested = True
        inner.stop_requested = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    return rep
