"""The admission rule: of the ready jobs, which start now and where, which wait holding a reservation,
which are refused for good, and when the pass stops. One rule for the scheduler (orchestrator/scheduler.py,
which runs it on the Ray cluster) and the planner's simulation (lab/planner/simulate.py, which
replays it on estimates), so a plan replays the scheduler by construction. Pure: no Ray, no SQL, no clock.

Input of a pass: the ready jobs in the order the queue returns them (effective priority highest first,
then the oldest: `effective_priority` below is the rule `jobqueue.ready_jobs` computes in SQL), the
cluster as nodes (`Node`: CPUs and GPU devices), the jobs already running with where they were placed,
and `max_concurrent`. A job asks (`Request`) for `workers` bundles of `cpus` CPUs and `gpus` GPUs each
(a gang: all at once, or none), and whether it wants the cluster to itself (`exclusive`).

The rule, job by job (the scheduler's docstring says why it has no starvation):
- the pass stops before the next job when `max_concurrent` jobs run or an exclusive job runs (nothing
  starts beside it);
- it stops at the first job of lower effective priority than an exclusive job that waits for the cluster
  to empty (the cluster drains for it);
- when the effective priority drops, the reservations of the higher one are taken off what is free (each
  holds what is left of what it asks, no more); if nothing is left then, no later job can start and the
  pass stops (the early exit);
- a job that could not be placed even on the empty cluster is refused, with a reason naming what it asks
  and what the cluster has;
- an exclusive job waits while anything runs;
- a job that does not fit into what is free (after the reservations of higher priorities), or cannot be
  placed on the nodes, reserves all it asks for against lower priorities and waits whole: a gang never
  starts partially, so two gang jobs can never each hold half of what both need;
- otherwise it starts: every bundle placed, each on one node. After an exclusive job starts the pass ends.

Preemption: a job that does not fit may take the place of running jobs that opted in (`preemptible`, a
grid's resources) and whose priority is at least `preempt_gap` below its own (`PREEMPT_GAP`, 10 by
default: an urgent job is one a person marked so, not one that aged a little). The victims are the fewest
of lowest priority whose resources, with those of jobs already stopping for an earlier preemption, let it
be placed; if even all of them would not make room, nothing is preempted. The decision (`Preempt`) asks
them to stop; the job itself waits reserved like any job that does not fit, and starts in a later pass
once they have ended. Whether a running job may be preempted *now* (it has checkpointed in its attempt,
it was not preempted lately) is the caller's to say (`Running.preemptible`): the rule sees no clock.
An admin's urgent job (`Candidate.by_admin`, issue 56) may also take the place of a job that did not opt
in, if that job could be stopped now (`Running.stoppable`: checkpointed, not preempted lately); a
member's may not: the opt-in is the preempted job's owner's.

Placement (first fit, in node order, then device order): a bundle goes on the first node with its CPUs
free and its GPUs placeable; `gpus` >= 1 takes ceil(gpus) whole free devices, a fraction goes on the first
device with that fraction free (Ray also keeps a fractional GPU on one device). The bundles of one gang
may share a node. The scheduler books the whole Ray cluster as one node (it does not see Ray's nodes;
stricter than needed on several nodes, never weaker), the planner one node with the machine's GPUs.

The incremental API: `Admission` is an iterator of decisions (`Start` or `Refuse`). A start is only booked
when the caller confirms it: `started(start)` after it really launched, `not_started(start)` when the
claim was lost to another driver or the launch failed (nothing is booked, and the pass goes on as if the
job had not been seen). Asking for the next decision with a start still unconfirmed is an error. Why an
object and not a generator driven by `send()`: the caller's side (claim, build the spec, launch, handle
its exceptions) stays plain code in a for loop, the confirmation is named at the place it happens, and
an unconfirmed start fails loudly instead of being booked or dropped silently; and why not a callback
given to a function: the admission would then call into SQL and Ray, which it must never see.
`admit()` runs a whole pass where every start happens (the planner's simulation).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

EPS = 1e-9
PREEMPT_GAP = 10  # the least priority difference that lets a job preempt another (see the docstring)


def effective_priority(priority: int, waited_s: float, aging_s: float | None) -> int:
    """priority + floor(waited seconds / aging_s) (just the priority when aging_s is None): the value
    `jobqueue.ready_jobs` orders by, computed in SQL there; waiting counts from the job's submission, or
    from the end of its retry backoff or a user's retry."""
    if aging_s is None:
        return int(priority)
    return int(priority) + math.floor(max(0.0, waited_s) / aging_s)


@dataclass(frozen=True)
class Request:
    """What one job asks: `workers` bundles (>= 1) of `cpus` CPUs and `gpus` GPUs each, all at once, and
    whether it wants the cluster to itself."""

    cpus: float = 1.0
    gpus: float = 0.0
    workers: int = 1
    exclusive: bool = False
    preemptible: bool = False  # it may be stopped for a job of much higher priority, and resume later

    @classmethod
    def of(cls, resources: dict[str, Any]) -> Request:
        """From `jobkinds.job_resources`' dict (num_cpus, num_gpus, workers, exclusive, preemptible)."""
        return cls(
            float(resources["num_cpus"]),
            float(resources["num_gpus"]),
            int(resources.get("workers", 1)),
            bool(resources["exclusive"]),
            bool(resources.get("preemptible", False)),
        )

    @property
    def total(self) -> dict[str, float]:
        """All bundles together, as the pool and the reservations count them."""
        return {"cpus": float(self.cpus * self.workers), "gpus": float(self.gpus * self.workers)}

    def describe(self) -> str:
        one = {"num_cpus": float(self.cpus), "num_gpus": float(self.gpus)}
        if self.workers == 1:
            return str(one)
        total = self.total
        return (
            f"{self.workers} workers of {one} at once ({total['cpus']:g} CPUs, {total['gpus']:g} GPUs in all)"
        )


@dataclass(frozen=True)
class Node:
    """One machine's CPUs and GPU devices (each device's size; 1.0 is a whole GPU)."""

    cpus: float
    gpus: tuple[float, ...] = ()

    @classmethod
    def with_gpus(cls, cpus: float, gpus: float) -> Node:
        """A node of `gpus` GPUs as whole devices, plus a last partial one for a fractional total."""
        whole = int(math.floor(gpus + EPS))
        rest = gpus - whole
        return cls(float(cpus), (1.0,) * whole + ((rest,) if rest > EPS else ()))


@dataclass(frozen=True)
class Bundle:
    """Where one worker went: its node, its CPUs, and (device, share) for each GPU device it uses."""

    node: int
    cpus: float
    gpus: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True)
class Placement:
    bundles: tuple[Bundle, ...]

    def devices(self) -> str:
        """ "cpu" for a job without GPUs, else its devices: "gpu0,gpu1" (node 1's as "node1:gpu0")."""
        names = []
        for b in self.bundles:
            for device, _ in b.gpus:
                name = f"gpu{device}" if b.node == 0 else f"node{b.node}:gpu{device}"
                if name not in names:
                    names.append(name)
        return ",".join(names) or "cpu"


@dataclass(frozen=True)
class Running:
    """A running job as the admission books it; `placement` None: placed by someone else where we do not
    know (its resources are then taken from the first nodes and devices that have them). For preemption:
    the caller's `job`, the `priority` it started at, `preemptible` (it opted in and may be stopped now),
    `stopping` (asked to stop already: what it holds is as good as free for the job that asked) and
    `stoppable` (it could be stopped now, opted in or not: an admin's urgent job may stop it)."""

    request: Request
    placement: Placement | None
    job: Any = None
    priority: int = 0
    preemptible: bool = False
    stopping: bool = False
    stoppable: bool = False


@dataclass(frozen=True)
class Candidate:
    """A ready job: the caller's object, its effective priority, what it asks, and whether an admin
    submitted it (it may then preempt jobs that did not opt in: the module's docstring)."""

    job: Any
    priority: int
    request: Request
    by_admin: bool = False


@dataclass(frozen=True)
class _Decision:
    candidate: Candidate

    @property
    def job(self) -> Any:
        return self.candidate.job

    @property
    def request(self) -> Request:
        return self.candidate.request


@dataclass(frozen=True)
class Start(_Decision):
    """Start `candidate.job` with every bundle placed as `placement` says."""

    placement: Placement

    @property
    def running(self) -> Running:
        return Running(self.request, self.placement, self.job, self.candidate.priority)


@dataclass(frozen=True)
class Refuse(_Decision):
    """Fail `candidate.job` for good: it could never be placed on this cluster (`reason` says why)."""

    reason: str


@dataclass(frozen=True)
class Preempt(_Decision):
    """Ask the running jobs `victims` (the callers' `Running.job`) to stop for `candidate.job`, which waits
    reserved until they have. Needs no confirmation: a stop that did not happen is asked again."""

    victims: tuple[Any, ...]


class Stop(enum.Enum):
    """Why a pass ended before the ready jobs ran out."""

    MAX_CONCURRENT = "max_concurrent jobs run"
    EXCLUSIVE_RUNS = "an exclusive job runs: nothing starts beside it"
    DRAINING = "the cluster drains for an exclusive job of higher effective priority"
    ALL_BOOKED = "everything is booked or reserved: no later job can start"


class _Free:
    """What is free on each node: CPUs, and the free share of each GPU device."""

    def __init__(self, nodes: Sequence[Node]) -> None:
        self.cpus = [n.cpus for n in nodes]
        self.gpus = [list(n.gpus) for n in nodes]

    def pool(self) -> dict[str, float]:
        return {"cpus": sum(self.cpus), "gpus": sum(sum(d) for d in self.gpus)}

    def _bundle_on(self, node: int, cpus: float, gpus: float) -> Bundle | None:
        if cpus > self.cpus[node] + EPS:
            return None
        devices = self.gpus[node]
        if gpus <= 0:
            taken: list[tuple[int, float]] = []
        elif gpus >= 1 - EPS:
            whole = [(i, d) for i, d in enumerate(devices) if d >= 1 - EPS][: math.ceil(gpus - EPS)]
            if len(whole) < math.ceil(gpus - EPS):
                return None
            taken = whole
        else:
            first = next((i for i, d in enumerate(devices) if d >= gpus - EPS), None)
            if first is None:
                return None
            taken = [(first, gpus)]
        return Bundle(node, cpus, tuple(taken))

    def book(self, bundle: Bundle) -> None:
        self.cpus[bundle.node] -= bundle.cpus
        for device, share in bundle.gpus:
            self.gpus[bundle.node][device] -= share

    def unbook(self, bundle: Bundle) -> None:
        self.cpus[bundle.node] += bundle.cpus
        for device, share in bundle.gpus:
            self.gpus[bundle.node][device] += share

    def place(self, request: Request) -> Placement | None:
        """Every bundle on the first node it fits (all of them, or None and nothing changed)."""
        bundles: list[Bundle] = []
        for _ in range(request.workers):
            on_nodes = (self._bundle_on(n, request.cpus, request.gpus) for n in range(len(self.cpus)))
            bundle = next((b for b in on_nodes if b is not None), None)
            if bundle is None:
                for b in bundles:
                    self.unbook(b)
                return None
            self.book(bundle)
            bundles.append(bundle)
        return Placement(tuple(bundles))

    def force(self, request: Request) -> None:
        """Take what a job placed elsewhere holds from the first nodes and devices that have it."""
        for _ in range(request.workers):
            cpus, gpus = request.cpus, request.gpus
            for n, devices in enumerate(self.gpus):
                took = min(cpus, max(0.0, self.cpus[n]))
                self.cpus[n] -= took
                cpus -= took
                for i, d in enumerate(devices):
                    took = min(gpus, max(0.0, d))
                    devices[i] -= took
                    gpus -= took


def place(nodes: Sequence[Node], running: Iterable[Running], request: Request) -> Placement | None:
    """Where `request` would go on `nodes` beside `running` (None: it does not fit now)."""
    free = _free_beside(nodes, running)
    return free.place(request)


def _free_beside(nodes: Sequence[Node], running: Iterable[Running]) -> _Free:
    free = _Free(nodes)
    for r in running:
        if r.placement is None:
            free.force(r.request)
        else:
            for bundle in r.placement.bundles:
                free.book(bundle)
    return free


def _refusal(request: Request, nodes: Sequence[Node]) -> str:
    total = {"CPU": float(sum(n.cpus for n in nodes)), "GPU": float(sum(sum(n.gpus) for n in nodes))}
    where = ""
    if len(nodes) > 1:
        biggest = {"CPU": float(max(n.cpus for n in nodes)), "GPU": float(max(sum(n.gpus) for n in nodes))}
        where = f" in {len(nodes)} nodes, each at most {biggest}"
    return (
        f"needs {request.describe()} but the cluster has {total}{where}: change the grid's resources "
        "or add machines"
    )


class Admission:
    """One pass of the rule over `ready` (Candidates in the queue's order, read lazily: a pass that stops
    early reads no more). Iterate for decisions; confirm each Start with `started` or `not_started`.
    After the pass: `starts`, `refused`, `reserved` (jobs waiting with a reservation) and `stopped`
    (a Stop, or None when the ready jobs ran out)."""

    def __init__(
        self,
        ready: Iterable[Candidate],
        nodes: Sequence[Node],
        running: Iterable[Running] = (),
        max_concurrent: int | None = None,
        preempt_gap: int = PREEMPT_GAP,
    ) -> None:
        self.nodes = tuple(nodes)
        self.max_concurrent, self.preempt_gap = max_concurrent, preempt_gap
        self._ready: Iterator[Candidate] = iter(ready)
        self._running = list(running)
        self._free = _free_beside(self.nodes, self._running)
        self._pool = self._free.pool()  # what the current effective priority may still use
        self._level: int | None = None
        self._reserve: list[dict[str, float]] = []  # reservations of the current priority
        self._waiting: int | None = None  # effective priority of an exclusive job waiting for the cluster
        self._pending: Start | None = None
        self.starts: list[Start] = []
        self.refused: list[Refuse] = []
        self.preempts: list[Preempt] = []
        self._taken: list[Any] = []  # stopping jobs whose place a job of this pass took
        self.reserved: list[Candidate] = []
        self.stopped: Stop | None = None
        self._done = False

    def __iter__(self) -> Admission:
        return self

    def __next__(self) -> Start | Refuse | Preempt:
        if self._pending is not None:
            raise RuntimeError(
                f"admission: confirm the start of {self._pending.job!r} (started or not_started) first"
            )
        while not self._done:
            decision = self._consider()
            if decision is not None:
                return decision
        raise StopIteration

    def _end(self, why: Stop | None) -> None:
        self.stopped, self._done = why, True

    def _consider(self) -> Start | Refuse | Preempt | None:
        """The rule for the next ready job (the module's docstring); None: it waits, or the pass ended."""
        if self.max_concurrent is not None and len(self._running) >= self.max_concurrent:
            self._end(Stop.MAX_CONCURRENT)
            return None
        if any(r.request.exclusive for r in self._running):
            self._end(Stop.EXCLUSIVE_RUNS)
            return None
        candidate = next(self._ready, None)
        if candidate is None:
            self._end(None)
            return None
        priority, request = candidate.priority, candidate.request
        if self._waiting is not None and priority < self._waiting:
            self._end(Stop.DRAINING)
            return None
        if self._level is not None and priority < self._level:
            for wanted in self._reserve:  # each reservation holds what is left of what it asks, no more
                self._pool = {k: max(0.0, self._pool[k] - wanted[k]) for k in self._pool}
            self._reserve = []
            if max(self._pool.values()) <= EPS:
                self._end(Stop.ALL_BOOKED)
                return None
        self._level = priority
        if _Free(self.nodes).place(request) is None:
            refuse = Refuse(candidate, _refusal(request, self.nodes))
            self.refused.append(refuse)
            return refuse
        if request.exclusive and self._running:
            self._waiting = priority if self._waiting is None else self._waiting
            return None  # it waits for the cluster to empty
        wants = request.total
        placement = None
        if all(wants[k] <= self._pool[k] + EPS for k in wants):
            placement = self._free.place(request)
        if placement is None:
            self._reserve.append(wants)  # lower priorities may not take what it waits for
            self.reserved.append(candidate)
            taken = self._victims(candidate)
            self._taken += [r.job for r in taken]  # what they free is this job's, not a later one's
            new = {id(r) for r in taken if not r.stopping}
            if new:
                self._running = [replace(r, stopping=True) if id(r) in new else r for r in self._running]
                self.preempts.append(Preempt(candidate, tuple(r.job for r in taken if id(r) in new)))
                return self.preempts[-1]
            return None  # a smaller job further down may still fit
        for bundle in placement.bundles:  # held until confirmed: placed again only by `started`
            self._free.unbook(bundle)
        self._pending = Start(candidate, placement)
        return self._pending

    def _victims(self, candidate: Candidate) -> list[Running]:
        """The running jobs `candidate` takes the place of (the module's docstring): jobs stopping already
        and not taken by a job before it in this pass first, then new victims; none when even all of them
        would not make room."""
        stops = [r for r in self._running if r.stopping and r.job not in self._taken]
        eligible = sorted(
            (
                r
                for r in self._running
                if (r.preemptible or (candidate.by_admin and r.stoppable))
                and not r.stopping
                and r.job is not None
                and r.priority <= candidate.priority - self.preempt_gap
            ),
            key=lambda r: r.priority,
        )
        chosen: list[Running] = []
        for victim in [None, *stops, *eligible]:
            if victim is not None:
                chosen.append(victim)
            left = [r for r in self._running if not any(r is c for c in chosen)]
            if _free_beside(self.nodes, left).place(candidate.request) is not None:
                return chosen
        return []

    def started(self, start: Start) -> None:
        """`start` happened: book it (after an exclusive job nothing else starts in this pass)."""
        self._confirm(start)
        for bundle in start.placement.bundles:
            self._free.book(bundle)
        wants = start.request.total
        self._pool = {k: self._pool[k] - wants[k] for k in self._pool}
        self._running.append(start.running)
        self.starts.append(start)
        if start.request.exclusive:
            self._end(Stop.EXCLUSIVE_RUNS)

    def not_started(self, start: Start) -> None:
        """`start` did not happen (claim lost, launch failed): nothing is booked for it."""
        self._confirm(start)

    def _confirm(self, start: Start) -> None:
        if start is not self._pending:
            raise RuntimeError(f"admission: {start.job!r} is not the start waiting for confirmation")
        self._pending = None


@dataclass
class Pass:
    """The outcome of `admit`: what started (with placements), was refused, waits reserved; why it ended."""

    starts: list[Start] = field(default_factory=list)
    refused: list[Refuse] = field(default_factory=list)
    reserved: list[Candidate] = field(default_factory=list)
    stopped: Stop | None = None
    preempts: list[Preempt] = field(default_factory=list)


def admit(
    ready: Iterable[Candidate],
    nodes: Sequence[Node],
    running: Iterable[Running] = (),
    max_concurrent: int | None = None,
    preempt_gap: int = PREEMPT_GAP,
) -> Pass:
    """A whole pass in which every start happens (the planner's simulation; tests)."""
    admission = Admission(ready, nodes, running, max_concurrent, preempt_gap)
    for decision in admission:
        if isinstance(decision, Start):
            admission.started(decision)
    return Pass(
        admission.starts, admission.refused, admission.reserved, admission.stopped, admission.preempts
    )
