"""Whether a soak tested what it claims (tests/cluster/soak.py; docs/guarantees.md#the-soak), as pure
functions of what it recorded, so each rule is unit-tested without a cluster (tests/cluster/test_soak.py):

- `on_target`: whether a running attempt is one a fault hits (a fault is armed only when its target
  holds one, and counts those it met);
- `refusals`: the fenced writes the drivers refused, per (job, attempt), from their logs;
- `late_logs`: the check that can fail where the metrics' upsert cannot (a late write with equal values
  is invisible there): no job log line of an attempt taken over is stamped after its takeover;
- `problems`: what makes the soak fail although every promise held: a fault that met no job, no
  takeover, no refused late write, an attempt of the fence fault not taken over or none of its late
  writes refused.
"""

from __future__ import annotations

import re
from collections import Counter

DRIVERS = ("head", "driver2")
EVERYWHERE = ("postgres", "disk")  # faults every running job meets
SLACK_S = 1.0  # one kernel clock on the namespace cluster; what a log line's stamp may lead its write


def host_of(kind: str, target: str) -> str | None:
    """The host a fault is about (the first of a cut pair), None for one every job meets."""
    return None if kind in EVERYWHERE else target.split("/")[0]


def on_target(
    kind: str,
    target: str,
    worker: str | None,
    driver_host: str | None,
    nodes: dict[str, str],
    rank_hosts: frozenset[str] = frozenset(),
) -> bool:
    """Whether a running attempt (its `worker` "node:pid", "node:pid (N workers)" for a gang, and its
    driver's host) is one fault (`kind`, `target`) hits: a driver's fault its driver's jobs, a worker
    host's the attempts on its Ray node (`nodes`: the first 12 digits of a node id -> its host) and a
    gang with a rank there (`rank_hosts`: the hosts holding a gang rank now; a gang's `worker` names
    the node of its controller only), the database's and the disk's every one."""
    host = host_of(kind, target)
    if host is None:
        return True
    if host in DRIVERS:
        return driver_host == host
    if (worker or "").endswith("workers)") and host in rank_hosts:
        return True
    return nodes.get((worker or "").split(":")[0]) == host


_EVENTS = re.compile(r"job (\d+): \d+ event\(s\) of attempt (\d+) dropped: the attempt no longer owns")
_OUTCOME = re.compile(r"job (\d+): attempt (\d+) no longer owns the job; its \S+ is not recorded")


def refusals(logs: str) -> Counter:
    """(job, attempt) -> how many of its writes the queue refused (batches of events, its outcome)."""
    found = [*_EVENTS.findall(logs), *_OUTCOME.findall(logs)]
    return Counter((int(j), int(n)) for j, n in found)


def late_logs(taken_over: list[tuple[int, int, float]], logs: list[tuple[int, int, float]]) -> list[tuple]:
    """Job log lines (job, attempt, ts) of an attempt taken over (job, attempt, ended_at: the takeover
    ended it) stamped after its takeover: a late write the fence should have refused and accepted."""
    ended = {(j, n): t for j, n, t in taken_over}
    return [(j, n, ts) for j, n, ts in logs if (j, n) in ended and ts > ended[(j, n)] + SLACK_S]


def problems(faults: list, takeovers: int, refused: Counter) -> list[str]:
    """Why the soak did not test what it claims (empty: it did): a fault that met no running job (`faults`:
    each with `kind`, `target`, `met`), no takeover, or no late write refused (the fence never exercised)."""
    out = [
        f"fault {i} ({f.kind} {f.target}) met no running job"
        for i, f in enumerate(faults, start=1)
        if not f.met
    ]
    if takeovers < 1:
        out.append("no takeover: the fence was never exercised")
    if sum(refused.values()) < 1:
        out.append("no late write refused: the fence was never exercised")
    return out


def fence_notes(faults: list, refused: Counter, taken_over: set[tuple[int, int]]) -> list[str]:
    """What the fence fault's own attempts (`met_attempts` of the fault marked `fence`) came to: each should
    be taken over (`taken_over`) with a late write refused. Reported, not binding: an attempt may end on its
    own just as its driver is paused (a CI run: the fence fault's one job was not taken over while two
    others were, and a late write was refused), and `problems` already fails a soak whose fence no fault
    exercised."""
    out = []
    for i, f in enumerate(faults, start=1):
        for job, n in f.met_attempts if f.fence else ():
            if (job, n) not in taken_over:
                out.append(f"fault {i} (fence): job {job} attempt {n} was not taken over")
            elif not refused[(job, n)]:
                out.append(f"fault {i} (fence): no late write of job {job} attempt {n} was refused")
    return out
