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
        self.no_starts: dict[int, int] = {}  # job -> its launches in a row whose task never started
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
        """The job's task said it started: it is no longer waited for, and its count of no-starts ends."""
        self.waiting.pop(job_id, None)
        self.no_starts.pop(job_id, None)

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
    ended interrupted (it ran nothing), its job queued again. The driver's own freezes are not counted.

    The same job not started launch after launch (soak seed 2026: a depth sweep's task launched, not
    started, ended and queued again, attempt 10 and on, until the soak gave up) is not left to loop for ever:
    each end names where Ray put the task when its state API can say (`placed`), the `ALERT_AFTER`th
    no-start in a row of a job is a health finding (an alert where channels are set), and the
    `FAIL_AFTER`th ends the job failed, a fault of the machine, with what to do (`no_start_result`)."""
    from looplab.orchestrator.states import AttemptOutcome

    watch, limit = driver.ray_watch, driver.settings.ray_start_s
    for ref, (job, n, _) in list(driver.running.items()):
        since = watch.waiting.get(job)
        if since is None or now - max(since, watch.counting_from) <= limit:
            continue
        watch.waiting.pop(job, None)
        times = watch.no_starts[job] = watch.no_starts.get(job, 0) + 1
        why = f"Ray did not start its task within {limit:g} s of its launch (a lease lost with a node?); {placed(ref)}"
        try:
            import ray

            ray.cancel(ref, force=True)
        except Exception as e:  # it is dropped here whatever Ray says
            log.info("job %s: cancelling its unstarted task: %s", job, e)
        result = no_start_result(job, times, why)
        failed = result.outcome == AttemptOutcome.FAILED
        if failed:
            watch.no_starts.pop(job, None)  # a `looplab retry` starts a new count
        elif times >= ALERT_AFTER:  # a warning while it goes on; the end's finding is the result's own
            driver.findings.append((job, n, _finding(job, times, why, failed=False)))
        driver._collect(ref, result)
        ended = (
            "ended, the job failed"
            if failed
            else "ended, its job queued again (its next launch asks Ray through a scheduling class of its own)"
        )
        driver._say(f"job {job}: attempt {n}: {why}: {ended} (no-start {times} in a row)")


def relaunch_strategy(times: int, nodes: list[dict] | None = None):
    """Where the next launch of a job whose task Ray did not start `times` launches in a row asks to
    run: None (Ray's default) for a job that never missed a start; else a soft affinity to one live node
    with CPUs, the `times`th in turn. Why: in the soak of seed 2026 every task the head's driver launched
    while a worker's node was dying (and after) waited for ever, its later launches too, while the other
    driver's tasks of the same kind started at once: the driver's own Ray client held a lease request
    that never returned (a request to the dead node, Ray issue #63405), and Ray queues every task of the
    same scheduling class behind it. A scheduling strategy is part of the class, so a launch with a
    strategy of its own goes through a new lease request; soft, so a node without room defers to Ray's
    choice. `nodes` replaces `ray.nodes()` (tests); what Ray cannot say leaves the default."""
    if times < 1:
        return None
    try:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        listed = ray.nodes() if nodes is None else nodes
        alive = sorted(
            n["NodeID"] for n in listed if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0
        )
    except Exception as e:  # the head away: the default, and the next pass of the watch says more
        log.info("no node list for a relaunch (%s): Ray's default placement", e)
        return None
    if not alive:
        return None
    return NodeAffinitySchedulingStrategy(alive[(times - 1) % len(alive)], soft=True)


ALERT_AFTER = 2  # a job's no-starts in a row that make a health finding (and an alert)
FAIL_AFTER = 4  # ... that end the job failed


def no_start_result(job: int, times: int, why: str):
    """The TaskResult of an attempt whose task Ray did not start, the `times`th in a row of job `job`:
    interrupted (it costs none of the job's attempts) before `FAIL_AFTER`, then failed for good: a
    fault of the machine, with a finding that stops it (no retry: the next launch would wait the same
    way) and what to do."""
    from looplab.orchestrator.faults import Fault
    from looplab.orchestrator.states import AttemptOutcome
    from looplab.orchestrator.task import TaskResult

    if times < FAIL_AFTER:
        return TaskResult(AttemptOutcome.INTERRUPTED, why)
    finding = _finding(job, times, why, failed=True)
    return TaskResult(AttemptOutcome.FAILED, finding.message, finding=finding, fault=Fault.MACHINE)


def _finding(job: int, times: int, why: str, failed: bool):
    from looplab.orchestrator.health import STOP, Finding, Level, Rule

    todo = (
        "see `ray status` on the head (a node listed but not taking work?) and that node's raylet log "
        "(/tmp/ray/session_latest/logs/raylet.out: workers that fail to start?); restart that node's Ray "
        "(`ray stop`, then `ray start --address=HEAD:6379` on it)"
    )
    if failed:
        message = (
            f"Ray did not start job {job}'s task {times} launches in a row: the job is ended failed, a "
            f"fault of the machine, not of the job. {todo}; then `looplab retry {job}`. Last: {why}"
        )
        return Finding(Rule.UNSTARTED, Level.ERROR, None, None, None, message, action=STOP)
    message = (
        f"Ray has not started job {job}'s task {times} launches in a row (it is ended failed at "
        f"{FAIL_AFTER}): {todo}. Last: {why}"
    )
    return Finding(Rule.UNSTARTED, Level.WARNING, None, None, None, message)


def placed(ref, wait_s: float = 3.0, get=None, free=None) -> str:
    """Where Ray put the task of `ref`, in words: the CPUs and GPUs Ray has free in the cluster (a task
    waits for ever where they are held by what the driver does not count, e.g. a placement group left
    behind) and the task's state and node as Ray's state API says. Best effort, never more than
    `wait_s` seconds (the calls run on a thread of their own; what answers later is dropped). The state
    API needs Ray's dashboard on the head; without it, that is said. `get` and `free` replace the calls
    to Ray (tests)."""
    said: list[str] = []

    def ask() -> None:
        try:
            said.append((free or _free)())
        except Exception as e:
            said.append(f"Ray's free resources unknown ({type(e).__name__}: {str(e)[:120]})")
        try:
            if get is None:
                from ray.util.state import get_task

                task = get_task(ref.task_id().hex(), timeout=max(1, int(wait_s)), _explain=False)
            else:
                task = get(ref)
            if isinstance(task, list):  # one entry an execution attempt of the task: the last is now
                task = task[-1] if task else None
            if task is None:
                said.append("Ray's state API does not know the task")
                return
            state, node = getattr(task, "state", "?"), getattr(task, "node_id", None)
            on = f"on node {node}" if node else "on no node yet (waiting for one with room)"
            said.append(f"Ray lists it {state} {on}")
        except Exception as e:
            said.append(f"where Ray put it is unknown (its state API: {type(e).__name__}: {str(e)[:160]})")

    thread = threading.Thread(target=ask, name="looplab-ray-placed", daemon=True)
    thread.start()
    thread.join(wait_s)
    if len(said) < 2:
        said.append(f"(no answer from Ray in {wait_s:g} s)")
    return "; ".join(list(said))


def _free() -> str:
    """What Ray has free in the whole cluster now, of what it has: CPUs and GPUs (two GCS round trips)."""
    import ray

    free, total = ray.available_resources(), ray.cluster_resources()
    shown = (f"{k} {free.get(k, 0):g} of {total[k]:g}" for k in ("CPU", "GPU") if k in total)
    return "Ray's cluster has free: " + ", ".join(shown)


def leave(code: int) -> None:
    """End the process now with `code`, its output flushed, without Ray's shutdown at exit (which waits
    for the head the driver lost): `looplab run` after `released`."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
