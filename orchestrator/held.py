"""What a driver holds while it cannot write: the outage buffer of the scheduler (its docstring's "A database
outage" says the promise; this module keeps it).

Every event drained from the sink waits in `events` with the attempt it was reported under, and every
finished attempt's outcome in `outcomes`, until a write goes through; each leaves the buffer only once
written, so an outage half-way keeps exactly what is not written yet. While paused, of a job's heartbeats
and progress reports only the last is kept (`live`): the writer keeps only the last anyway, and a long
pause should hold the points, not a heartbeat every half second. The pause itself (`Pause`) knows since
when, what the outage is, how many tries failed and when to try next: 1, 2, 4, ... s, at most
`retry_max_s`, and it is said once ("paused") and once ("back") per outage, each failed try at INFO.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable

from looplab.orchestrator.db import Outage, outage, outage_phrase
from looplab.orchestrator.task import TaskResult
from looplab.orchestrator.writer import Unwritten, write_events
from looplab.workers.reporter import Event, EventKind

# what a job reports whose last value is all the writer keeps (the live columns of its jobs row)
LATEST_ONLY = (EventKind.HEARTBEAT, EventKind.PROGRESS)

Batch = tuple[int, int, list[Event]]  # (job, attempt, its events)


@dataclasses.dataclass
class Pause:
    """The outage the driver waits out: since when, what it is, how often a retry failed, the next try."""

    since: float
    outage: Outage
    tries: int = 0
    retry_at: float = 0.0


class Held:
    """The events and outcomes waiting for the database, and the pause while it is away."""

    def __init__(self, retry_s: float, retry_max_s: float) -> None:
        self.events: list[Batch] = []
        self.outcomes: list[tuple[int, int, TaskResult]] = []
        self.live: dict[tuple[int, int, str], Event] = {}  # while paused: (job, attempt, kind) -> the last
        self.paused: Pause | None = None
        self.retry_s, self.retry_max_s = retry_s, retry_max_s

    def add(self, job_id: int, n: int, events: list[Event]) -> None:
        """Events of attempt `n` drained from the sink (while paused, only the last heartbeat/progress)."""
        if self.paused is not None:
            self.live.update({(job_id, n, e.kind): e for e in events if e.kind in LATEST_ONLY})
            events = [e for e in events if e.kind not in LATEST_ONLY]
        if events:
            self.events.append((job_id, n, events))

    def count(self) -> int:
        return sum(len(b) for *_, b in self.events)

    def write(self, eng, notes: list[Batch], health) -> None:
        """Write `notes` and the held events in one transaction (the live ones after their job's held
        events); what is not written stays held (the notes of a failed try are dropped: the next try writes
        its own)."""
        if not (self.events or notes or self.live):
            return
        batches, self.events = self.events, []
        live = [(j, n, [e]) for (j, n, _), e in self.live.items()]
        try:
            write_events(eng, [*notes, *batches, *live], health)
        except Unwritten as e:
            self.events, self.live = e.batches + self.events, {}
            raise
        except Exception:
            self.events = batches + self.events
            raise
        self.live = {}

    def pause(self, error: BaseException, running: int, url: str, say: Callable[..., None]) -> bool:
        """`error` is an outage: pause (or stay paused) and say so; False when it is no outage."""
        what = outage(error.__cause__ if isinstance(error, Unwritten) else error)
        if what is None:
            return False
        now = time.time()
        first = self.paused is None
        if first:
            self.paused = Pause(since=now, outage=what)
        p = self.paused
        p.tries += 1
        delay = min(self.retry_max_s, self.retry_s * 2 ** (p.tries - 1))
        p.retry_at = now + delay
        if first:
            say(
                f"database {url} {outage_phrase(what)}: claiming and writing paused; {running} running "
                f"job(s) keep training, their events wait here; retrying in {delay:.3g} s"
            )
        else:  # INFO: the log says "paused" once and "back" once per outage
            say(
                level=logging.INFO,
                message=f"still paused after {now - p.since:.0f} s: the database {outage_phrase(what)}; "
                f"{self.count()} event(s) and {len(self.outcomes)} outcome(s) held; retrying in {delay:.3g} s",
            )
        return True

    def notes(self, running: dict[int, int]) -> list[Batch]:
        """While paused: for the first write after the outage, a line in the log of each job it held
        (running, or finished with its outcome held), so `looplab logs` tells why its progress stood still."""
        p = self.paused
        if p is None:
            return []
        start, end = time.strftime("%H:%M:%S", time.localtime(p.since)), time.strftime("%H:%M:%S")
        note = (
            f"the database {outage_phrase(p.outage)} from {start} to {end}: the driver paused claiming and "
            "writing; this job kept running and its events waited in the driver"
        )
        event = Event(EventKind.LOG, time.time(), {"level": "WARNING", "message": note})
        jobs = running | {j: n for j, n, _ in self.outcomes}
        return [(j, n, [event]) for j, n in sorted(jobs.items())]

    def resumed(self) -> Pause:
        """The outage is over: the pause it was, for the "back" line and the alert."""
        p, self.paused = self.paused, None
        assert p is not None
        return p
