"""Whether the driver still has its Ray cluster, and what it does when it has lost it.

A driver cut off from its Ray head (the GCS) but not from the database would otherwise go on
heartbeating, in the database, jobs it can no longer run or hear from: Ray's head declares the
driver's node dead after its health checks and ends the driver's tasks on the other nodes, while the
driver, which still reaches PostgreSQL, keeps its jobs' heartbeats fresh, so no other driver takes them
over. A thread of the driver asks the head every `every_s` seconds for the cluster's nodes
(`ray.nodes()`, a round trip to the GCS) and whether the driver's own node is alive there. When no
answer has said so for `lost_after_s` seconds ($LOOPLAB_RAY_LOST_S, default 30), the driver releases
its jobs: each running attempt is ended `interrupted` ("Ray cluster lost", which costs none of the
job's `max_attempts`) in one fenced write per attempt, its job re-queued at once for any driver (a
train job resumes from its checkpoint), and the driver exits with `EXIT_RAY_LOST` (75, EX_TEMPFAIL:
start it again once its head is reachable). The bound, from the moment the head stops answering to the
jobs queued again: `lost_after_s` plus one probe period plus one pass of the driver's loop
(docs/guarantees.md, promise 12).

The same pass ends an attempt whose task never said it started `ray_start_s` seconds after its
launch ($LOOPLAB_RAY_START_S, default 300: `unstarted`): its lease was lost with a node, and the
driver would otherwise hold its slot and heartbeat its job for ever.

Time the driver itself stood still (its host paused: SIGSTOP, a frozen VM) is not counted: the probe
thread stood still too, and a driver that resumes must not take its own freeze for a lost cluster; a
gap of more than `FROZEN_S` between two passes of the driver's loop restarts the count.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable

log = logging.getLogger("looplab.scheduler")
EXIT_RAY_LOST = 75  # EX_TEMPFAIL (sysexits.h): a temporary failure, try again later
DEFAULT_LOST_AFTER_S = 30.0
DEFAULT_START_S = 300.0
FROZEN_S = 3.0  # a pause of the driver's loop longer than this is the driver's own freeze, not Ray's


def own_node_alive() -> bool:
    """A round trip to the Ray head: whether it lists the driver's own node as alive."""
    import ray  # here: the settings read this module's default without starting or importing Ray

    me = ray.get_runtime_context().get_node_id()
    return any(n.get("NodeID") == me and n.get("Alive") for n in ray.nodes())


class RayWatch:
    """The probe thread and the rule. `beat(now)` at every pass of the driver's loop; `lost(now)` says why
    the cluster is lost (None while it is not). Times are `time.monotonic()` seconds."""

    def __init__(
        self,
        lost_after_s: float,
        every_s: float = 1.0,
        probe: Callable[[], bool] = own_node_alive,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.lost_after_s, self.every_s, self.probe, self.clock = lost_after_s, every_s, probe, clock
        now = clock()
        self.last_ok = self.counting_from = self.last_beat = now
        self.last_error = "no answer yet"
        self.gone = False  # the cluster was lost and the jobs released: the driver stops
        self.waiting: dict[int, float] = {}  # job -> when its task was launched, until it says it started
        self.gangs: dict[tuple[int, int], tuple[int | None, float]] = {}  # orchestrator/gang_watch.py
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> RayWatch:
        self._thread = threading.Thread(target=self._run, name="looplab-ray-watch", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> RayWatch:
        self._stop.set()  # a probe blocked on an unreachable head is left to end with the process
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                ok = self.probe()
                error = "the head lists the driver's node as dead"
            except Exception as e:  # the head unreachable, Ray shut down: no answer
                ok, error = False, f"{type(e).__name__}: {e}"
            self.observe(ok, error)
            self._stop.wait(self.every_s)

    def observe(self, ok: bool, error: str = "") -> None:
        if ok:
            self.last_ok = self.clock()
        else:
            self.last_error = error[:300]

    def launched(self, job_id: int) -> None:
        self.waiting[job_id] = self.clock()

    def started(self, job_id: int) -> None:
        self.waiting.pop(job_id, None)

    def beat(self, now: float) -> None:
        """A pass of the driver's loop; after a gap longer than FROZEN_S (the driver stood still) the
        count starts again from now."""
        if now - self.last_beat > FROZEN_S:
            self.counting_from = now
        self.last_beat = now

    def lost(self, now: float) -> str | None:
        silent = now - max(self.last_ok, self.counting_from)
        if silent <= self.lost_after_s:
            return None
        return (
            f"Ray cluster lost: its head has not confirmed this driver's node for {silent:.0f} s "
            f"(more than {self.lost_after_s:g} s; last: {self.last_error})"
        )


def released(driver) -> bool:
    """At each pass of the driver's loop (`driver`: the orchestrator.scheduler.Scheduler): the watch's
    beat, and when the cluster is lost, the release. Every running attempt is ended interrupted with
    the reason (its held events first, all fenced: an attempt already replaced writes nothing); an
    outage of the database as well leaves them to a takeover after the grace. True: the driver stops
    and exits with EXIT_RAY_LOST; its tasks are not cancelled (that needs the head) and end with it."""
    from looplab.orchestrator import gang_watch
    from looplab.orchestrator.db import outage
    from looplab.orchestrator.states import AttemptOutcome
    from looplab.orchestrator.task import TaskResult
    from looplab.orchestrator.writer import Unwritten

    watch, now = driver.ray_watch, time.monotonic()
    watch.beat(now)
    why = watch.lost(now)
    if why is None:
        unstarted(driver, now)
        gang_watch.check(driver, now)
        return False
    watch.gone = True
    jobs = sorted(j for j, *_ in driver.running.values())
    for j, n, _ in driver.running.values():
        driver.held.outcomes.append((j, n, TaskResult(AttemptOutcome.INTERRUPTED, why)))
    driver.running.clear()
    try:
        driver._write_held()
        done = f"released its {len(jobs)} running job(s) {jobs}: they are queued again for any driver"
    except Exception as e:
        if outage(e.__cause__ if isinstance(e, Unwritten) else e) is None:
            raise
        done = (
            f"could not release its job(s) {jobs} (the database is away too): a takeover after the grace will"
        )
    driver._say(f"{why}; {done}; stopping (start `looplab run` again once the head is reachable)")
    return True


def unstarted(driver, now: float) -> None:
    """Attempts whose Ray task has not said it started (`QueueReporter.started`, the first thing a task
    does) `driver.settings.ray_start_s` after its launch: Ray lost its lease with a node (seen in the
    soak: a task launched as its node froze, that node then declared dead and started again, waited for
    ever, and the driver heartbeated its job and held its slot). The task is cancelled and the attempt
    ended interrupted (it ran nothing), its job queued again. The driver's own freezes are not counted."""
    from looplab.orchestrator.states import AttemptOutcome
    from looplab.orchestrator.task import TaskResult

    watch, limit = driver.ray_watch, driver.settings.ray_start_s
    for ref, (job, n, _) in list(driver.running.items()):
        since = watch.waiting.get(job)
        if since is None or now - max(since, watch.counting_from) <= limit:
            continue
        watch.started(job)
        why = f"Ray did not start its task within {limit:g} s of its launch (a lease lost with a node?)"
        try:
            import ray

            ray.cancel(ref, force=True)
        except Exception as e:  # it is dropped here whatever Ray says
            log.info("job %s: cancelling its unstarted task: %s", job, e)
        driver._collect(ref, TaskResult(AttemptOutcome.INTERRUPTED, why))
        driver._say(f"job {job}: attempt {n}: {why}: ended, its job queued again")


def leave(code: int) -> None:
    """End the process now with `code`, its output flushed, without Ray's shutdown at exit (which waits
    for the head the driver lost): `looplab run` after `released`."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
