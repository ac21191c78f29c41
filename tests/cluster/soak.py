"""The soak (docs/guarantees.md#the-soak): a study of about 40 tiny jobs (train runs with a depth-sweep
follow-up each, and one 2-worker gang) on the test cluster (tests/cluster/lab.py), two drivers on one
PostgreSQL queue, under a seeded schedule of faults, ending with every promise checked
(tests/cluster/promises.py), the curves of the interrupted train jobs compared bit for bit with an
uninterrupted run, and a one-page summary.

The schedule is a function of the seed alone (`plan`): each fault's kind, target, the pause before it
and how long it is held. Each fault is recoverable by design, one at a time, healed before the next:
- `kill` a Ray worker host or driver2 (a power cut); after the hold the machine comes back (its Ray
  node, or its driver, started again);
- `partition` a Ray worker host or driver2 (its link down), then heal;
- `cut` one pair (driver2 or head from pg, a worker from head: a blackhole both ways), then mend;
- `pause` a Ray worker host or driver2 (SIGSTOP of every process), then resume;
- `postgres`: the database server crashes (an immediate stop) and starts again;
- `disk`: the shared artifact disk filled, then freed.
Never the head host itself (its Ray head is the only one; its driver is one of two) and never two
faults at once: a driver and a Ray node always remain. A worker host's raylet that Ray declared dead
leaves rather than rejoining (docs/guarantees.md); the soak then restarts it, as an operator would.

Run by tests/cluster/test_soak.py with the CI seed, and by hand: `make soak SEED=7 FAULTS=20 JOBS=41`
(`python -m tests.cluster.soak --help`).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tests.cluster import evidence, promises, soak_verdict
from tests.cluster.lab import LabCluster
from tests.orchestrator.test_crash_resume import TRAIN as CRASH_TRAIN

CI_SEED = 41
# what the soak tunes for a short run (stated in docs/guarantees.md): a driver's jobs are taken over
# 8 s after its last heartbeat; Ray's GCS checks each raylet every second from 5 s after it joined (a
# 2 s timeout: a raylet starting under load answers late) and declares it dead after 3 misses in a row
# (defaults: 3 s, 10 s, 5 misses); retries of a failed attempt wait 2 s, 4 s, at most 8 s
GRACE_S = 8
# the fence fault every soak has (`plan`): driver2 paused, holding a job, long enough for the head's
# driver to take its job over (the grace, then its recovery poll every grace / 2, then the claim) with
# room to spare, so that its attempt, resumed, writes late and is refused
FENCE_HOLD_S = 2 * GRACE_S + 6
ARM_TIMEOUT_S = 120  # how long a fault waits for a running job on its target before it goes without
# the study is fed while faults are to come: when fewer than FEED_LOW train runs wait in the queue, a wave
# of FEED_RUNS more (each with its depth sweep) is submitted, so that no driver and no Ray worker host
# runs dry before the last fault however fast the machine runs the study (a quiet machine outran the
# fixed waves: the fence fault met no job); a slow machine, its queue long enough, gets none
FEED_LOW = 2
FEED_RUNS = 2
SETTINGS = {
    "LOOPLAB_HEARTBEAT_GRACE_S": str(GRACE_S),
    "LOOPLAB_RETRY_BACKOFF_S": "2",
    "LOOPLAB_RETRY_BACKOFF_MAX_S": "8",
    # a task Ray never starts (its lease lost with a node that froze as it was launched) is ended after
    # a minute, not the default five (orchestrator/ray_watch.py `unstarted`)
    "LOOPLAB_RAY_START_S": "60",
    # a gang without a step for a minute is stopped whole and retried (orchestrator/gang_watch.py): the CI
    # soak saw one wedge at 73 % after its ranks' hosts were paused and partitioned, holding both workers
    "LOOPLAB_GANG_STALL_S": "60",
    "RAY_health_check_initial_delay_ms": "5000",
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_timeout_ms": "2000",
    "RAY_health_check_failure_threshold": "3",
}
WORKERS = ("worker1", "worker2")
TARGETS = {
    "kill": (*WORKERS, "driver2"),
    "partition": (*WORKERS, "driver2"),
    "cut": ("driver2/pg", "head/pg", "worker1/head", "worker2/head"),
    "pause": (*WORKERS, "driver2"),
    "postgres": ("pg",),
    "disk": ("shared",),
}
# how long each kind is held (s): a driver's fault long enough, mostly, for a takeover; a worker's for
# Ray to declare its node dead (3 s of missed checks)
HOLD = {
    "kill": (3, 8),
    "partition": (6, 14),
    "cut": (6, 14),
    "pause": (6, 14),
    "postgres": (3, 10),
    "disk": (2, 5),
}
TRAIN = {**CRASH_TRAIN, "tokens": 4 * 32 * 60}  # 60 steps, a checkpoint every 5
SWEEP = {"loops": [1, 2], "eval_tokens": 256, "batch_size": 4}
# failures count against it (a full disk fails every attempt that starts while it lasts); interruptions
# do not
MAX_ATTEMPTS = 10
# one process on the head host submits the waves as their files appear in the shared directory (a
# `looplab submit` each would pay Python's and torch's imports every time: 30 s under a load of 15)
SUBMITTER = """
import sys, time
from pathlib import Path
from looplab.lab.api import Queue
from looplab.lab.commands import load_grids
queue, here, i = Queue(db=sys.argv[1]), Path(sys.argv[2]), 0
while not (here / "waves.end").exists():
    wave = here / f"wave{i}.py"
    if not wave.exists():
        time.sleep(0.2)
        continue
    for _ in range(60):  # a database just restarted may refuse the first try
        try:
            if wave.read_text().strip():
                queue.submit(load_grids(str(wave)))
            break
        except Exception as e:
            print(f"wave {i}: {type(e).__name__}: {e}; again", flush=True)
            time.sleep(1)
    (here / f"wave{i}.done").write_text("")
    i += 1
"""


@dataclass
class Fault:
    kind: str
    target: str
    gap_s: float  # after the previous fault was healed
    hold_s: float
    at_s: float | None = None  # when injected, seconds after the drivers started
    healed_s: float | None = None
    note: str = ""
    fence: bool = False  # the fault that must make a takeover and a refused late write (`plan`)
    met: int | None = None  # the jobs running on its target when it was injected
    met_attempts: list = field(default_factory=list)  # their (job, attempt)


def plan(seed: int, faults: int) -> list[Fault]:
    """The schedule of `seed`: the same list for the same seed, whatever else runs. One fault is the
    fence fault (driver2 paused for FENCE_HOLD_S: a takeover and a refused late write in every soak,
    whatever the draw), at a seeded place; of the others each kind is in once at least (when `faults`
    allows), the rest drawn, all in a seeded order."""
    rng = random.Random(seed)
    kinds = sorted(TARGETS)
    others = max(0, faults - 1)
    drawn = (kinds * (others // len(kinds) + 1))[: min(others, len(kinds))]
    drawn += [rng.choice(kinds) for _ in range(others - len(drawn))]
    rng.shuffle(drawn)
    out = []
    for kind in drawn:
        lo, hi = HOLD[kind]
        target = rng.choice(TARGETS[kind])
        out.append(Fault(kind, target, round(rng.uniform(2, 10), 1), round(rng.uniform(lo, hi), 1)))
    if faults:
        fence = Fault("pause", "driver2", round(rng.uniform(2, 10), 1), FENCE_HOLD_S, fence=True)
        out.insert(rng.randrange(len(out) + 1), fence)
    return out


def grid_file(name: str, seeds: list[int], gang: bool = False) -> str:
    """A wave of the study as a grid file: train runs of `seeds`, each with a depth sweep after it, and
    (`gang`) the 2-worker gang; "" when it holds nothing."""
    from tests.orchestrator.test_gang import TRAIN as GANG

    text = "".join(
        [
            f"study = Grid({name!r}, base={TRAIN!r}, sweep={{'seed': {seeds!r}}}, then=['depth_sweep'],\n"
            f"    follow={{'depth_sweep': {SWEEP!r}}}, max_attempts={MAX_ATTEMPTS})\n"
            if seeds
            else "",
            f"gang = Grid('soak-gang', base={GANG!r}, resources={{'workers': 2}}, max_attempts={MAX_ATTEMPTS})\n"
            if gang
            else "",
        ]
    )
    return f"from looplab import Grid\n{text}" if text else ""


def waves(jobs: int, faults: int) -> list[str]:
    """The study's fixed part as grid files, one submitted before each fault and one at the start (with
    the gang): (jobs - 1) // 2 train runs in all, each with a depth sweep after it, and one 2-worker gang.
    A wave with no run is "". While faults are to come the soak feeds more (`Soak.feed_queue`)."""
    seeds, n = list(range(max(1, (jobs - 1) // 2))), faults + 1
    return [
        grid_file(f"soak-{i}", seeds[i * len(seeds) // n : (i + 1) * len(seeds) // n], gang=i == 0)
        for i in range(n)
    ]


@dataclass
class Soak:
    lab: LabCluster
    faults: list[Fault]
    jobs: int
    t0: float = 0.0
    events: list[str] = field(default_factory=list)
    drivers: dict = field(default_factory=dict)
    repairs: int = 0
    waves: list[str] = field(default_factory=list)
    attempt_rows: list = field(default_factory=list)
    other_errors: list = field(default_factory=list)
    arm_timeout_s: float = ARM_TIMEOUT_S
    feed: bool = True  # False: the fixed waves only (`--outrun` starves the faults on purpose)
    feeding: bool = False  # while faults are to come (`run_schedule`), `wait` keeps the queue fed
    fed: list[int] = field(default_factory=list)  # the seeds of the runs fed beyond the fixed waves
    submitted: int = 0  # waves handed to SUBMITTER (the fixed ones and the feeds, in that order)
    outrun: bool = False  # each fault waits for the queue to run dry first: the study outruns it

    def now(self) -> float:
        return round(time.monotonic() - self.t0, 1)

    def say(self, text: str) -> None:
        line = f"{self.now():7.1f} s  {text}"
        self.events.append(line)
        print(line, flush=True)

    def start(self) -> None:
        self.lab.env.update(SETTINGS)
        # no CPU on the head: Ray keeps a task on the submitting node while it has room, and every job
        # would run beside the head's driver, out of reach of the worker hosts' faults
        self.lab.start_ray("head", cpus=0)
        for name in WORKERS:
            self.lab.start_ray(name)
        self.waves = waves(self.jobs, len(self.faults))
        argv = [sys.executable, "-c", SUBMITTER, self.lab.url, str(self.lab.net.shared)]
        self.lab.net["head"].spawn(
            argv, cwd=self.lab.net.shared, env=self.lab.env, log=self.lab.logs / "submit.log"
        )
        self.submit(self.waves[0])
        self.t0 = time.monotonic()
        self.start_driver("head")
        self.start_driver("driver2")

    def submit(self, text: str) -> None:
        """The next wave of the study (grid file `text`, "" for none), submitted from the head host (never
        faulted whole) by SUBMITTER."""
        shared, wave = self.lab.net.shared, self.submitted
        self.submitted += 1
        (shared / f"wave{wave}.tmp").write_text(text)
        (shared / f"wave{wave}.tmp").rename(shared / f"wave{wave}.py")  # whole, never half written
        end = time.monotonic() + 180
        while not (shared / f"wave{wave}.done").exists():
            assert time.monotonic() < end, (
                f"wave {wave} not submitted: {(self.lab.logs / 'submit.log').read_text()}"
            )
            time.sleep(0.2)

    def start_driver(self, host: str) -> None:
        """`looplab run` on `host` until it is stopped (the waves come while it runs): the head's on the
        Ray cluster; driver2's on a Ray of its own (two CPUs, one job at a time, so the gang fits there
        too and is never refused as too big)."""
        where = (
            ["--address", self.lab.ray_address]
            if host == "head"
            else ["--num-cpus", "2", "--max-concurrent", "1"]
        )
        self.drivers[host] = self.lab.looplab(host, "run", *where, "--artifacts", str(self.lab.art))

    def left(self) -> int:
        return self.lab.query("SELECT COUNT(*) FROM jobs WHERE status IN ('queued', 'running')")[0][0]

    def feed_queue(self) -> None:
        """While faults are to come: fewer than FEED_LOW train runs queued, FEED_RUNS more (with their
        sweeps) are submitted, with seeds after the study's; counted in the summary."""
        if not (self.feeding and self.feed):
            return
        queued = self.lab.query("SELECT COUNT(*) FROM jobs WHERE kind = 'train' AND status = 'queued'")[0][0]
        if queued >= FEED_LOW:
            return
        first = max(1, (self.jobs - 1) // 2) + len(self.fed)
        seeds = list(range(first, first + FEED_RUNS))
        self.fed += seeds
        self.say(f"{queued} train run(s) queued: {FEED_RUNS} more fed (seeds {seeds})")
        self.submit(grid_file(f"soak-fed-{first}", seeds))

    def run_schedule(self) -> None:
        self.feeding = True
        for i, fault in enumerate(self.faults, start=1):
            self.submit(self.waves[i])
            self.wait(fault.gap_s)
            if self.outrun:
                self.run_dry()
            self.arm(fault)
            self.feeding = i < len(self.faults)  # fed while a fault is to come, not for the drain
            fault.at_s = self.now()
            self.say(
                f"fault {i}: {fault.kind} {fault.target} for {fault.hold_s} s, meeting {fault.met} job(s) "
                f"{fault.met_attempts} ({self.left()} jobs left)"
            )
            heal = self.inject(fault)
            time.sleep(fault.hold_s)
            heal()
            fault.healed_s = self.now()
            fault.note = self.recover(fault)
            self.say(f"fault {i}: healed{'; ' + fault.note if fault.note else ''}")

    def run_dry(self) -> None:
        """`--outrun`: wait (at most 300 s) until no job is queued or running, as when the study outran
        the schedule on a fast machine: the fault then meets nothing, and the soak must fail."""
        end = time.monotonic() + 300
        while self.left() and time.monotonic() < end:
            self.wait(1)

    def repair(self) -> None:
        """A worker host whose Ray node left without a fault of the schedule (Ray's health checks, tuned
        short, declared a slow raylet dead under load: it then exits) is started again, as an operator
        would, and so is driver2's driver if it exited (one started again after a kill refuses to start
        while PostgreSQL is down: a fault of the schedule met it starting); said in the schedule's log
        and counted."""
        for host in WORKERS:
            if self.lab.ray[host].poll() is not None:
                self.repairs += 1
                self.say(f"{host}'s Ray node left unasked (declared dead under load?): started again")
                self.lab.net.kill(host)
                self.lab.start_ray(host, tries=3)
        two = self.drivers.get("driver2")
        if two is not None and two.poll() is not None:  # e.g. started again while PostgreSQL was down
            self.repairs += 1
            self.say(f"driver2's driver exited unasked ({two.poll()}): started again")
            self.start_driver("driver2")

    def arm(self, fault: Fault) -> None:
        """Wait (at most `arm_timeout_s`) until `fault`'s target holds a running attempt
        (`soak_verdict.on_target`), and record the ones it will meet; none found in time: it meets none,
        which fails the soak (`soak_verdict.problems`) after it ran."""
        end = time.monotonic() + self.arm_timeout_s
        while True:
            on_worker = soak_verdict.host_of(fault.kind, fault.target) in WORKERS
            rows = self.lab.query(
                "SELECT j.id, j.attempts, a.worker, a.driver_host FROM jobs j JOIN attempts a "
                "ON a.job_id = j.id AND a.n = j.attempts WHERE j.status = 'running' ORDER BY j.id"
            )
            gang = on_worker and any((w or "").endswith("workers)") for _, _, w, _ in rows)
            nodes, ranks = self.nodes() if on_worker else {}, self.rank_hosts() if gang else frozenset()
            hit = [
                (j, n)
                for j, n, w, d in rows
                if soak_verdict.on_target(fault.kind, fault.target, w, d, nodes, ranks)
            ]
            if hit or time.monotonic() > end:
                fault.met, fault.met_attempts = len(hit), hit
                if not hit:
                    self.say(
                        f"no job running on {fault.target} after {self.arm_timeout_s:.0f} s: it meets none"
                    )
                return
            self.wait(0.5)

    def rank_hosts(self) -> frozenset[str]:
        """The worker hosts holding a gang rank now (a Ray Train worker process in the host's network
        namespace: the hosts share one pid namespace, so pgrep alone sees every host's)."""
        found = subprocess.run(["pgrep", "-f", "RayTrainWorker"], capture_output=True, text=True)
        pids = set(map(int, found.stdout.split()))
        return frozenset(h for h in WORKERS if pids & set(self.lab.net[h].pids()))

    def nodes(self) -> dict[str, str]:
        """The worker hosts' Ray nodes now: the first 12 digits of each node id (an attempt's `worker`
        starts with them) -> its host; a host whose raylet is down (being started again) is left out."""
        out = {}
        for host in WORKERS:
            try:
                out[self.lab.node_id(host)[:12]] = host
            except AssertionError:
                continue
        return out

    def wait(self, seconds: float) -> None:
        """Sleep `seconds` while the head's driver runs, restarting Ray nodes that left unasked."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            head = self.drivers["head"]
            assert head.poll() is None, f"the head's driver exited {head.poll()}: {self.tail('head')}"
            self.repair()
            self.feed_queue()
            time.sleep(min(1.0, max(0.0, end - time.monotonic())))

    def inject(self, fault: Fault):
        """Start `fault`; the function that heals it."""
        net, t = self.lab.net, fault.target
        if fault.kind == "kill":
            net.kill(t)
            return lambda: None
        if fault.kind == "partition":
            net.partition(t)
            return lambda: net.heal(t)
        if fault.kind == "cut":
            a, b = t.split("/")
            net.cut(a, b)
            return lambda: net.mend(a, b)
        if fault.kind == "pause":
            net.pause(t)
            return lambda: net.resume(t)
        if fault.kind == "postgres":
            self.lab.stop_postgres()
            return self.lab.start_postgres
        filler = net.fill_disk()
        return lambda: filler.unlink()

    def recover(self, fault: Fault) -> str:
        """After the heal: a driver2 that was killed starts again; a worker host whose raylet was
        declared dead (it then leaves) or killed is restarted. What was done, in words."""
        host = fault.target.split("/")[0] if fault.kind == "cut" else fault.target
        if host == "driver2" and fault.kind == "kill":
            self.start_driver("driver2")
            return "driver2's driver started again"
        if host not in WORKERS:
            return ""
        ray = self.lab.ray[host]
        end = time.monotonic() + 10  # the raylet, told it was declared dead, exits within seconds
        while ray.poll() is None and fault.kind != "kill" and time.monotonic() < end:
            time.sleep(0.5)
        if ray.poll() is None and fault.kind != "kill":
            return f"{host}'s Ray node stayed a member"
        self.lab.net.kill(host)  # whatever of the old node is left (workers still shutting down)
        self.lab.start_ray(host, tries=3)
        return f"{host}'s Ray node {'was lost' if fault.kind == 'kill' else 'left'}: started again"

    def finish(self, timeout: float) -> dict[str, int]:
        """Wait for the queue to empty, then stop the drivers (SIGINT, as Ctrl-C); their exit codes
        (130: stopped when asked)."""
        end = time.monotonic() + timeout
        while self.left():
            assert time.monotonic() < end, (
                f"jobs still queued or running after {timeout} s: {self.tail('head')}"
            )
            self.wait(2)
        self.say("the queue is empty: the drivers are stopped")
        (self.lab.net.shared / "waves.end").write_text("")
        codes = {}
        for host, proc in self.drivers.items():
            proc.send_signal(signal.SIGINT)
            codes[host] = proc.wait(timeout=120)
        self.say(f"drivers ended: {codes}")
        return codes

    def tail(self, host: str) -> str:
        return (self.lab.logs / f"{host}.log").read_text()[-3000:]

    # ------------------------------------------------------------ after the schedule

    def curves(self, ref_dir: Path, most: int | None) -> list[int]:
        """Train jobs that ran more than once: their curves equal an uninterrupted run's, bit for bit
        (promise 3); the ids checked. `most`: at most that many (a reference run each, tens of seconds on
        a loaded machine), those of most attempts first, the gang among them if it ran twice; None: all."""
        from tests.orchestrator.test_gang import TRAIN as GANG
        from tests.orchestrator.test_real_jobs import one_thread_run

        rows = self.lab.query(
            "SELECT j.id, j.config, g.name FROM jobs j JOIN grids g ON g.id = j.grid_id WHERE j.kind = 'train' "
            "AND j.status = 'succeeded' AND j.attempts > 1 "
            "ORDER BY g.name = 'soak-gang' DESC, j.attempts DESC, j.id"
        )[:most]
        for job_id, config, grid in rows:
            spec = GANG if grid == "soak-gang" else {**TRAIN, "seed": json.loads(config)["seed"]}
            ref = one_thread_run(spec, ref_dir / str(job_id))
            # the gang's evaluation is rank 0's, as tests/cluster/test_faults.py compares it: its train curve
            for key in ("train_loss",) if grid == "soak-gang" else ("train_loss", "val_loss"):
                got = self.lab.query(
                    f"SELECT step, value FROM metrics WHERE job_id = {job_id} AND key = '{key}' ORDER BY step"
                )
                why = self.lab.query(
                    f"SELECT n, outcome, resumed_from_step, error FROM attempts WHERE job_id = {job_id}"
                )
                assert got and [tuple(r) for r in got] == ref.curve(key), (job_id, key, why)
        return sorted(r[0] for r in rows)

    def where(self) -> dict[str, int]:
        """Attempts by the host that ran them: an attempt's worker starts with its Ray node's id, which
        the GCS's log on head pairs with the node's address when it registers (driver2's own Ray is
        not in it: its attempts are counted as driver2's)."""
        log = (
            self.lab.net["head"].run(["sh", "-c", "cat /tmp/ray/session_latest/logs/gcs_server*.out"]).stdout
        )
        by_addr = {h.addr: name for name, h in self.lab.net.hosts.items()}
        found = re.findall(
            r"Registering new node\. node_id=([0-9a-f]+) node_name=\S+ node_address=(\S+)", log
        )
        node = {node_id[:12]: by_addr.get(addr, addr) for node_id, addr in found}
        rows = self.lab.query("SELECT COALESCE(worker, ''), driver_host FROM attempts")
        return dict(
            Counter(node.get(w.split(":")[0], driver if driver == "driver2" else "?") for w, driver in rows)
        )

    def counts(self) -> dict:
        """Takeovers, Ray node losses and fenced writes refused, from the database and the drivers' logs."""
        lost = self.lab.query(
            "SELECT SUM(CASE WHEN error LIKE 'driver lost%' THEN 1 ELSE 0 END), "
            "SUM(CASE WHEN error LIKE 'Ray node lost%' OR error LIKE 'Ray Train worker lost%' THEN 1 ELSE 0 END) "
            "FROM attempts"
        )[0]
        logs = "".join(
            p.read_text(errors="replace")
            for p in self.lab.logs.glob("*.log")
            if not p.name.startswith("ray-")
        )
        reasons = self.lab.query(
            "SELECT outcome, SUBSTR(COALESCE(error, ''), 1, 70) AS why, COUNT(*) FROM attempts "
            "WHERE outcome != 'succeeded' GROUP BY outcome, why ORDER BY COUNT(*) DESC"
        )
        self.attempt_rows = self.lab.query(
            "SELECT job_id, n, outcome, ROUND(CAST(started_at AS NUMERIC), 1), ROUND(CAST(ended_at AS NUMERIC), 1), "
            "worker, driver_host, resumed_from_step, SUBSTR(COALESCE(error, ''), 1, 90) FROM attempts "
            "WHERE job_id IN (SELECT job_id FROM attempts WHERE n > 1) ORDER BY job_id, n"
        )
        self.other_errors = self.lab.query(
            "SELECT job_id, n, outcome, error FROM attempts WHERE outcome != 'succeeded' "
            "AND error NOT LIKE 'No space left on device%' AND error NOT LIKE 'driver lost%' ORDER BY job_id, n"
        )
        taken = self.lab.query(
            "SELECT job_id, n, ended_at FROM attempts WHERE outcome = 'interrupted' AND error LIKE 'driver lost%'"
        )
        refused = soak_verdict.refusals(logs)
        return {
            "refused": refused,
            "taken_over": {(j, n) for j, n, _ in taken},
            # promise 2 where the metrics cannot tell (a late point with equal values is an upsert)
            "late_logs": soak_verdict.late_logs(
                [tuple(r) for r in taken],
                [tuple(r) for r in self.lab.query("SELECT job_id, attempt, ts FROM job_logs")],
            ),
            "where": self.where(),
            "reasons": [(o, " ".join(w.split()), n) for o, w, n in reasons],
            "takeovers": int(lost[0] or 0),
            "nodes_lost": int(lost[1] or 0),
            # the queue's refusals of a replaced attempt's writes: its batches of events (orchestrator/writer.py,
            # one line a batch, with the number of events) and its outcome (jobqueue.finish)
            "fenced_writes_refused": len(re.findall(r"no longer owns the job", logs)),
            "fenced_events": sum(
                map(int, re.findall(r"(\d+) event\(s\) of attempt \d+ dropped: the attempt no longer", logs))
            ),
            "fenced_outcomes": len(re.findall(r"no longer owns the job; its \S+ is not recorded", logs)),
            "db_pauses": len(re.findall(r"claiming and writing paused", logs)),
            "repairs": self.repairs,
        }


def summary(soak: Soak, checked: dict, counts: dict, curves: list[int], seconds: float, seed: int) -> str:
    """The one page: what ran, what was injected, what the checks found."""
    f = soak.faults
    lines = [
        f"looplab soak  seed {seed}  faults {len(f)}  jobs asked {soak.jobs}  "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}  host {os.uname().nodename}  "
        f"load {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}",
        f"jobs: {checked['jobs']} ({checked['succeeded']} succeeded, {checked['jobs'] - checked['succeeded']} failed; "
        f"{len(soak.fed)} train run(s) and their sweeps fed while faults were to come)",
        "attempts: "
        + ", ".join(f"{n} {o}" for o, n in sorted(checked["attempts"].items()))
        + f" ({sum(checked['attempts'].values())} in all)",
        f"faults injected: {sum(x.at_s is not None for x in f)} of {len(f)}",
    ]
    for i, x in enumerate(f, start=1):
        when = f"at {x.at_s:6.1f} s, healed {x.healed_s:6.1f} s" if x.at_s is not None else "-"
        met = f"met {x.met if x.met is not None else '-':>2} job(s)"
        fence = " (fence)" if x.fence else ""
        lines.append(
            f"  {i:2d}. {x.kind:9s} {x.target:13s} hold {x.hold_s:4.1f} s  {when}  {met}{fence}  {x.note}"
        )
    lines += [
        f"takeovers (driver lost): {counts['takeovers']}   "
        f"Ray nodes or gang ranks lost under a job: {counts['nodes_lost']}   "
        f"driver pauses (database away): {counts['db_pauses']}",
        "attempts by host: " + ", ".join(f"{h} {n}" for h, n in sorted(counts["where"].items())),
        "attempts that did not succeed, by reason:",
        *(f"  {n:3d} {o}: {w}" for o, w, n in counts["reasons"][:8]),
        f"fenced writes refused: {counts['fenced_writes_refused']} (batches of {counts['fenced_events']} events, "
        f"and {counts['fenced_outcomes']} outcomes)   "
        f"Ray worker nodes or driver2 restarted outside the schedule: {counts['repairs']}",
        f"attempts with late writes refused: {len(counts['refused'])}   "
        f"job log lines of an attempt stamped after its takeover: {len(counts['late_logs'])} (must be 0)",
        f"metric points: {checked['points']}   duplicates: {checked['duplicates']}",
        f"curves equal to an uninterrupted run, bit for bit: {len(curves)} job(s) {curves}",
        "promises (tests/cluster/promises.py): all held",
        "what the soak tested: "
        + ("; ".join(counts["problems"]) or "every fault met a job, the fence was exercised")
        + "".join(f"\n  (reported, not binding) {note}" for note in counts.get("fence_notes", [])),
        f"time: {seconds:.0f} s (cluster up to promises checked)",
    ]
    return "\n".join(line.rstrip() for line in lines) + "\n"


def keep_evidence(lab: LabCluster, out: Path) -> None:
    """A failed soak's evidence (tests/cluster/evidence.py) beside its summary `out`, copied before the
    teardown takes each host's /tmp; where it is, printed."""
    kept = out.parent / f"{out.stem}-evidence"
    print(
        f"the soak failed: its evidence is kept in {kept}:", *evidence.keep(lab, kept), sep="\n  ", flush=True
    )


def soak(
    cache: Path,
    seed: int,
    faults: int,
    jobs: int,
    out: Path,
    ref_dir: Path,
    curves: int | None = None,
    arm_timeout_s: float = ARM_TIMEOUT_S,
    outrun: bool = False,
) -> tuple[str, dict]:
    """Build the cluster, run the study under `plan(seed, faults)`, check (the curves of at most
    `curves` jobs; None: every job that ran twice), tear down (checked too); the summary (also written
    to `out`) and the figures it was made of. Fails after writing the summary when the soak did not
    test what it claims (`soak_verdict.problems`). `outrun` is the switch that shows it: the queue is not
    fed and each fault waits for it to run dry, as when a fast machine outran the schedule, so the faults
    meet nothing."""
    started = time.monotonic()
    lab = LabCluster(cache)
    try:
        run = Soak(lab, plan(seed, faults), jobs, arm_timeout_s=arm_timeout_s, feed=not outrun, outrun=outrun)
        run.start()
        run.run_schedule()
        codes = run.finish(timeout=480)
        assert codes == {"head": 130, "driver2": 130}, (codes, run.tail("head"), run.tail("driver2"))
        checked = promises.check(lab)
        counts = run.counts()
        counts["problems"] = soak_verdict.problems(run.faults, counts["takeovers"], counts["refused"]) + [
            f"a late write accepted: job log line {x}" for x in counts["late_logs"]
        ]
        counts["fence_notes"] = soak_verdict.fence_notes(run.faults, counts["refused"], counts["taken_over"])
        checked_curves = run.curves(ref_dir, curves)
        if counts["problems"]:  # it fails once the summary is written, after the teardown
            keep_evidence(lab, out)
    except BaseException:
        keep_evidence(lab, out)
        raise
    finally:
        keep = out.parent / f"{out.stem}-logs"  # the drivers', submitter's and Ray nodes' logs
        shutil.copytree(lab.logs, keep, dirs_exist_ok=True)
        lab.close()
    left = lab.net.leftovers()
    assert left == [], left
    text = summary(run, checked, counts, checked_curves, time.monotonic() - started, seed)
    rows = "\n".join(" | ".join(map(str, r)) for r in run.attempt_rows)
    out.write_text(
        f"{text}\nschedule as it ran:\n"
        + "\n".join(run.events)
        + "\n\nattempts of the jobs that ran more than once "
        f"(job | n | outcome | started | ended | worker | driver host | resumed from | error):\n{rows}\n"
        + "".join(f"\njob {j} attempt {n} {o}, whole error:\n{e}\n" for j, n, o, e in run.other_errors)
    )
    print(text, flush=True)
    assert not counts["problems"], text  # the summary says what is missing; it is written first
    figures = {**checked, **counts, "curves": checked_curves, "faults": [asdict(x) for x in run.faults]}
    return text, figures


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="make soak", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--seed", type=int, default=CI_SEED, help=f"picks the faults' moments and targets (CI: {CI_SEED})"
    )
    p.add_argument("--faults", type=int, default=10, help="faults in the schedule (default 10)")
    p.add_argument("--jobs", type=int, default=41, help="about this many jobs (default 41)")
    p.add_argument("--out", default="soak-summary.txt", help="where the summary is written")
    p.add_argument(
        "--arm-timeout",
        type=float,
        default=ARM_TIMEOUT_S,
        help=f"seconds a fault waits for a running job on its target (default {ARM_TIMEOUT_S}; 0: none, "
        "so a fault may meet nothing and the soak fails)",
    )
    p.add_argument(
        "--outrun",
        action="store_true",
        help="feed nothing and let the queue run dry before each fault (a fast machine outrunning the "
        "schedule): the faults meet nothing and the soak fails, as it must",
    )
    p.add_argument(
        "--curves", type=int, default=None, help="compare at most this many rerun jobs' curves (default: all)"
    )
    args = p.parse_args(argv)
    for name, value, lo in (
        ("--faults", args.faults, 1),  # the fence fault at least
        ("--arm-timeout", args.arm_timeout, 0),
        ("--jobs", args.jobs, 3),
        ("--curves", args.curves, 0),
    ):
        if value is not None and value < lo:
            p.error(f"{name}: expected an integer >= {lo}, got {value}")
    work = Path(tempfile.mkdtemp(prefix="looplab-soak-", dir="/var/tmp"))  # every host sees /var/tmp
    os.environ["LOOPLAB_CACHE"] = str(work / "cache")
    passed = False
    try:
        soak(
            work / "cache",
            args.seed,
            args.faults,
            args.jobs,
            Path(args.out).resolve(),
            work / "ref",
            args.curves,
            args.arm_timeout,
            args.outrun,
        )
        passed = True
    finally:
        if passed:
            shutil.rmtree(work, ignore_errors=True)  # the data cache and the reference runs
        else:  # kept for whoever looks into the failure (the data cache the jobs read is in it)
            print(f"the soak failed: its work dir is kept: {work}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
