"""What the queue costs: the same tiny training job standalone and through the queue, in one run; and
what the database takes, on SQLite and on PostgreSQL side by side.

Measures, on a local Ray:
1. training throughput (tokens/s as the train job measures it, excluding eval/checkpoint time) of one
   tiny train job called directly (in-process, no Ray, no database) vs. submitted and run by the
   scheduler (Ray task, event batching, heartbeats, database writer) -> ratio (target: cost < 2 %);
2. queued -> running latency of a job submitted while the driver is idle (median of N);
3. throughput of 500 trivial jobs (jobs/s, submission included);
and, on each backend (a fresh SQLite file; a fresh database on a PostgreSQL server):
4. claims per second with 4 drivers: 4 processes claim trivial queued jobs from one queue with
   `jobqueue.claim` (what `looplab run` calls for each ready job it can start), every driver taking every
   ready job it can, until none is left; each job must end with exactly one attempt (checked);
5. metric points per second ingested by the writer (`write_events`, batches of 500 points);
and, with `--only outage`:
6. the queue under a refusing webhook: the same batch of trivial jobs that fail (each failure is an
   alert) through the real scheduler, with no alert channel and with a webhook channel at a closed
   port on 127.0.0.1 (every try: connection refused), interleaved over `--repeats` (the order flipped
   each repeat) -> jobs/s of each and the ratio of the medians (outage / none; issue 39 asks >= 0.98),
   and the alerts still pending in the outbox afterwards (undelivered, not lost); a third side with a
   webhook that accepts (a receiver process on 127.0.0.1) tells the outage's own cost (refused /
   accepting) from the outbox's (accepting / none).

Sections 1-3 run on `--db` (default: fresh SQLite files, as before; a PostgreSQL URL: fresh databases
the benchmark creates on that server and drops after, so its user needs CREATEDB). The PostgreSQL side
of 4-5 uses that server, or else starts a throw-away one (tests/pg.py: initdb on a temp dir, needs the
`postgresql` binaries); `--no-postgres` skips it.

    .venv/bin/python benchmarks/queue_bench.py [--trivial 500] [--tokens 8192] [--repeats 2]
        [--db postgresql+psycopg://user@host/db] [--claim-jobs 1000] [--no-postgres] [--only backends]
        [--only outage --outage-jobs 100]

Prints a table and writes benchmarks/results/queue_bench.json.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OMP_NUM_THREADS", "1")  # same threads standalone and in the Ray worker

TRAIN = {
    "recipe": "lean",
    "size": "tiny",
    "seq_len": 64,
    "batch_size": 8,
    "eval_every": 10_000,
    "eval_tokens": 512,
    "ckpt_every": 10_000,
    "data": {"tokenizer": "byte"},
}


class TrivialKinds:
    """A job registry with one kind that does nothing (pickled by value into the Ray workers)."""

    def validate(self, kind: str, spec: dict) -> dict:
        return dict(spec)

    def run(self, kind: str, spec: dict, reporter, artifact_dir) -> dict:
        return {}


class FailingKinds(TrivialKinds):
    """Trivial jobs of kind `fail` raise: each failure is a `job_failed` alert when a channel is set."""

    def run(self, kind: str, spec: dict, reporter, artifact_dir) -> dict:
        if kind == "fail":
            raise RuntimeError("a failing trivial job (queue_bench outage section)")
        return {}


class Databases:
    """Fresh, empty databases for the sections: SQLite files in a temp dir, or databases created on a
    PostgreSQL server (`server_url`: any database on it; close() drops what was created)."""

    def __init__(self, tmp: Path, server_url: str | None = None) -> None:
        self.tmp, self.server_url = tmp, server_url
        self.made: list[str] = []

    @property
    def backend(self) -> str:
        return "sqlite" if self.server_url is None else "postgresql"

    def _admin(self, sql: str) -> None:
        import sqlalchemy as sa

        admin = sa.create_engine(self.server_url, isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as conn:
                conn.execute(sa.text(sql))
        finally:
            admin.dispose()

    def new(self, name: str) -> str:
        if self.server_url is None:
            return f"sqlite:///{self.tmp / f'{name}.db'}"
        from sqlalchemy.engine import make_url

        database = f"looplab_bench_{os.getpid()}_{name}"
        self._admin(f'DROP DATABASE IF EXISTS "{database}"')
        self._admin(f'CREATE DATABASE "{database}"')
        self.made.append(database)
        return make_url(self.server_url).set(database=database).render_as_string(hide_password=False)

    def close(self) -> None:
        from looplab.orchestrator.db import dispose_all

        dispose_all()  # the cached engines hold connections to the databases dropped next
        for database in self.made:
            self._admin(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        self.made.clear()


def bench_train(dbs: Databases, tmp: Path, tokens: int, repeats: int) -> dict:
    from looplab import Grid, Queue
    from looplab.workers import jobs
    from looplab.workers.reporter import MemoryReporter

    spec = {**TRAIN, "tokens": tokens}
    standalone, queued = [], []
    q = Queue(db=dbs.new("train"), artifacts=tmp / "art")
    for i in range(repeats):  # interleaved, so drifting machine load hits both sides alike
        out = jobs.run(
            "train", jobs.validate("train", {**spec, "seed": i}), MemoryReporter(), tmp / f"alone{i}"
        )
        standalone.append(out["tokens_per_s"])
        (jid,) = q.submit(Grid(f"bench{i}", base={**spec, "seed": i}))
        q.run(until_empty=True, progress=False, poll_s=0.2)
        queued.append(float(q.results("train_results").set_index("job_id").loc[jid, "tokens_per_s"]))
    a, b = statistics.median(standalone), statistics.median(queued)
    return {
        "standalone_tokens_per_s": a,
        "queue_tokens_per_s": b,
        "queue_over_standalone": b / a,
        "runs": repeats,
        "tokens": tokens,
    }


def bench_ingest(url: str, points: int = 50_000, batch: int = 500) -> dict:
    """The writer's rate: `points` metric points of one job (5 keys), `batch` per transaction, as the
    driver writes what it drained. The job is claimed first: the writer drops the events of an attempt
    that does not own its job."""
    from looplab.orchestrator import Grid, Queue, jobqueue
    from looplab.orchestrator.writer import write_events
    from looplab.workers.reporter import Event, EventKind
    from tests.db_rows import rows

    q = Queue(db=url, kinds=TrivialKinds())
    (jid,) = q.submit(Grid("ingest", job="noop"))
    n = jobqueue.claim(q.eng, jid, "bench", "unused")
    keys = ("train_loss", "lr", "tokens_per_s", "peak_mem_mb", "val_loss")
    events = [
        Event(
            EventKind.METRIC,
            0.0,
            {
                "key": keys[i % 5],
                "step": i // 5,
                "value": 1.0 / (i + 1),
                "tokens": i * 64,
                "wall_s": i * 0.01,
            },
        )
        for i in range(points)
    ]
    t = time.perf_counter()
    for i in range(0, points, batch):
        write_events(q.eng, [(jid, n, events[i : i + batch])])
    dt = time.perf_counter() - t
    stored = rows(q, "SELECT COUNT(*) FROM metrics WHERE job_id = :j", j=jid)[0][0]
    if stored != points:
        raise RuntimeError(f"ingest: {stored} of {points} metric points reached the database")
    return {"points": points, "batch": batch, "points_per_s": points / dt}


def claim_driver(url: str, name: str, start: Any, out: Any) -> None:
    """One of the claiming drivers (a process of its own): claims every ready job it can, in the order
    `looplab run` scans them, until a scan finds none; reports (won, lost, errors, end time)."""
    from sqlalchemy.exc import OperationalError

    from looplab.orchestrator import jobqueue

    eng = jobqueue.open_engine(url)
    out.put(("ready", name))
    start.wait()
    won = lost = 0
    errors: list[str] = []
    while True:
        seen = 0
        for job in jobqueue.ready_jobs(eng):
            seen += 1
            try:
                n = jobqueue.claim(eng, job.id, name, "unused")
            except OperationalError as e:  # e.g. SQLite's "database is locked": counted, not fatal
                errors.append(str(e.orig))
                continue
            won, lost = (won + 1, lost) if n is not None else (won, lost + 1)
        if not seen:
            break
    out.put(("done", name, won, lost, errors, time.time()))


def bench_claims(url: str, n_jobs: int, drivers: int = 4) -> dict:
    """Claims per second with `drivers` processes on one queue of `n_jobs` trivial jobs; raises if a
    job was claimed twice or not at all."""
    from looplab import Grid, Queue
    from tests.db_rows import rows

    q = Queue(db=url, kinds=TrivialKinds())
    ids = q.submit(Grid("claims", job="noop", sweep={"i": list(range(n_jobs))}))
    context = multiprocessing.get_context("spawn")  # fresh interpreters: no inherited connections
    start, out = context.Event(), context.Queue()
    procs = [
        context.Process(target=claim_driver, args=(url, f"bench-driver-{k}", start, out))
        for k in range(drivers)
    ]
    for proc in procs:
        proc.start()
    for _ in procs:  # every driver has imported looplab and opened its engine
        out.get(timeout=300)
    t0 = time.time()
    start.set()
    done = [out.get(timeout=600) for _ in procs]
    for proc in procs:
        proc.join(60)
    dt = max(end for *_, end in done) - t0
    per_job = dict(rows(q, "SELECT job_id, COUNT(*) FROM attempts GROUP BY job_id"))
    if sorted(per_job) != sorted(ids) or set(per_job.values()) != {1}:
        twice = sorted(j for j, c in per_job.items() if c > 1)
        raise RuntimeError(f"claims: {len(per_job)} of {len(ids)} jobs claimed; claimed twice: {twice[:10]}")
    errors = [e for *_, errs, _ in done for e in errs]
    return {
        "drivers": drivers,
        "jobs": n_jobs,
        "claims_per_s": n_jobs / dt,
        "total_s": dt,
        "won_per_driver": [won for _, _, won, *_ in done],
        "lost_claims": sum(d[3] for d in done),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
    }


def bench_latency_and_throughput(url: str, tmp: Path, n_trivial: int, n_latency: int = 10) -> dict:
    import sqlalchemy as sa

    from looplab import Grid, Queue
    from looplab.orchestrator.scheduler import Scheduler

    kinds = TrivialKinds()
    q = Queue(db=url, kinds=kinds)
    sched = Scheduler(q.eng, tmp / "art", kinds, progress=False, poll_s=0.2)
    th = threading.Thread(target=sched.run, daemon=True)
    th.start()
    time.sleep(3.0)  # the driver is up and idle
    lat = []
    for i in range(n_latency):
        (jid,) = q.submit(Grid(f"lat{i}", job="noop", base={"i": i}))
        q.wait([jid], timeout=60, poll_s=0.05)
        with q.eng.connect() as conn:
            created, started = conn.execute(
                sa.text(
                    "SELECT j.created_at, a.started_at FROM jobs j JOIN attempts a ON a.job_id=j.id "
                    "WHERE j.id=:j"
                ),
                {"j": jid},
            ).one()
        lat.append(started - created)
    t = time.perf_counter()
    ids = q.submit(Grid("many", job="noop", sweep={"i": list(range(n_trivial))}))
    q.wait(ids, timeout=1800, poll_s=0.2)
    dt = time.perf_counter() - t
    sched._on_signal(2, None)
    th.join(60)
    return {
        "latency_median_s": statistics.median(lat),
        "latency_max_s": max(lat),
        "trivial_jobs": n_trivial,
        "trivial_jobs_per_s": n_trivial / dt,
        "trivial_total_s": dt,
    }


ALERT_ENV = ("LOOPLAB_ALERTS", "LOOPLAB_ALERT_")  # what configures channels (orchestrator/alerts.py)


def refusing_port() -> socket.socket:
    """A socket bound on 127.0.0.1 that never listens: a connection to its port is refused at once,
    and no other program can take the port while the socket is held."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    return sock


def accepting_receiver(port: Any) -> None:
    """A webhook receiver on 127.0.0.1 (a process of its own, so it shares no interpreter with the
    driver) that answers 200 to every POST; puts its port into `port`, then serves until terminated."""
    from http.server import BaseHTTPRequestHandler, HTTPServer

    class Accept(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Accept)
    port.put(server.server_address[1])
    server.serve_forever()


def failing_batch(url: str, tmp: Path, n_jobs: int) -> tuple[float, Any]:
    """Seconds from submitting `n_jobs` failing trivial jobs (one attempt each) to all of them finished,
    through a running scheduler that is up and idle first (its alert channels: what the environment
    says now); returns (seconds, the queue)."""
    from looplab import Grid, Queue
    from looplab.orchestrator.scheduler import Scheduler

    kinds = FailingKinds()
    q = Queue(db=url, kinds=kinds)
    sched = Scheduler(q.eng, tmp / "art", kinds, progress=False, poll_s=0.2)
    th = threading.Thread(target=sched.run, daemon=True)
    th.start()
    time.sleep(2.0)  # the driver (and its alert deliverer) up and idle
    t = time.perf_counter()
    ids = q.submit(Grid("outage", job="fail", sweep={"i": list(range(n_jobs))}, max_attempts=1))
    statuses = q.wait(ids, timeout=1800, poll_s=0.05)
    dt = time.perf_counter() - t
    sched._on_signal(2, None)
    th.join(60)
    if any(str(s) != "failed" for s in statuses.values()):
        raise RuntimeError(f"outage: not every job failed once: {sorted(map(str, set(statuses.values())))}")
    return dt, q


def bench_outage(dbs: Databases, tmp: Path, n_jobs: int, repeats: int) -> dict:
    """Jobs/s of a batch of failing trivial jobs with no alert channel, with a webhook whose port
    refuses connections, and with one that accepts them (what an outage is measured against: the
    outbox is written whenever a channel is set), interleaved (the order flipped each repeat) after one untimed batch that starts
    Ray's workers; then what the outbox holds after each outage run."""
    from tests.db_rows import rows

    saved = {k: v for k, v in os.environ.items() if k.startswith(ALERT_ENV)}
    for k in saved:
        del os.environ[k]
    (tmp / "no_channels.json").write_text("{}")  # never the user's ~/.config/looplab/alerts.json
    os.environ["LOOPLAB_ALERTS"] = str(tmp / "no_channels.json")
    # the queue's throughput, not the driver's wait at its exit for a refusing channel (flush_s)
    os.environ["LOOPLAB_ALERT_FLUSH_S"] = "0"
    closed = refusing_port()
    context = multiprocessing.get_context("spawn")
    port = context.Queue()
    receiver = context.Process(target=accepting_receiver, args=(port,), daemon=True)
    receiver.start()
    webhooks = {
        "none": None,
        "refused": f"http://127.0.0.1:{closed.getsockname()[1]}/alerts",
        "delivered": f"http://127.0.0.1:{port.get(timeout=60)}/alerts",
    }
    per_s: dict[str, list[float]] = {arm: [] for arm in webhooks}
    outbox: list[dict] = []
    delivered: list[int] = []
    try:
        failing_batch(dbs.new("outage_warmup"), tmp / "warmup", n_jobs)  # Ray's workers started, untimed
        for r in range(repeats):
            order = list(webhooks) if r % 2 == 0 else list(reversed(webhooks))
            for arm in order:
                if webhooks[arm]:
                    os.environ["LOOPLAB_ALERT_WEBHOOK"] = webhooks[arm]
                else:
                    os.environ.pop("LOOPLAB_ALERT_WEBHOOK", None)
                dt, q = failing_batch(dbs.new(f"outage_{arm}_{r}"), tmp / f"{arm}{r}", n_jobs)
                per_s[arm].append(n_jobs / dt)
                if arm == "delivered":
                    delivered.append(
                        rows(q, "SELECT COUNT(*) FROM alert_outbox WHERE status='delivered'")[0][0]
                    )
                if arm == "refused":
                    got = rows(
                        q,
                        "SELECT topic, status, tries, last_error FROM alert_outbox ORDER BY id",
                    )
                    outbox.append(
                        {
                            "jobs": n_jobs,
                            "rows": len(got),
                            "job_failed": sum(1 for t, *_ in got if t == "job_failed"),
                            "pending": sum(1 for _, s, *_ in got if s == "pending"),
                            "delivered": sum(1 for _, s, *_ in got if s == "delivered"),
                            "tried": sum(1 for _, _, n, _ in got if n),
                            "last_error": next((e for *_, e in got if e), None),
                        }
                    )
    finally:
        closed.close()
        receiver.terminate()
        receiver.join(10)
        for k in [k for k in os.environ if k.startswith(ALERT_ENV)]:
            del os.environ[k]
        os.environ.update(saved)
    median = {arm: statistics.median(v) for arm, v in per_s.items()}
    return {
        "jobs": n_jobs,
        "repeats": repeats,
        **{f"{arm}_jobs_per_s": v for arm, v in per_s.items()},
        **{f"{arm}_median_jobs_per_s": v for arm, v in median.items()},
        "refused_over_none": median["refused"] / median["none"],
        "refused_over_delivered": median["refused"] / median["delivered"],
        "delivered_over_none": median["delivered"] / median["none"],
        "outbox_after_refused_runs": outbox,
        "delivered_per_delivered_run": delivered,
    }


def bench_backends(tmp: Path, pg_url: str | None, n_claim_jobs: int) -> dict:
    """Claims with 4 drivers and metric ingest on SQLite and, given a server, on PostgreSQL."""
    res = {}
    for dbs in (Databases(tmp / "sqlite"), *([Databases(tmp, pg_url)] if pg_url else [])):
        dbs.tmp.mkdir(exist_ok=True)
        try:
            res[dbs.backend] = {
                "claims": bench_claims(dbs.new("claims"), n_claim_jobs),
                "ingest": bench_ingest(dbs.new("ingest")),
            }
        finally:
            dbs.close()
    return res


def postgres_server(db: str, skip: bool) -> tuple[str | None, Callable[[], None], str | None]:
    """(server URL, how to stop it, why there is none): the --db server, else a throw-away one."""
    if db != "sqlite":
        return db, lambda: None, None
    if skip:
        return None, lambda: None, "--no-postgres"
    from tests.pg import PgUnavailable, start_server

    try:
        server = start_server()
    except PgUnavailable as e:
        return None, lambda: None, str(e)
    return server.url("postgres"), server.stop, None


def check_db(value: str) -> str:
    """--db: `sqlite` or a PostgreSQL URL (argparse names the option in its message)."""
    from looplab.model.errors import ConfigError
    from looplab.orchestrator.db import resolve_url

    if value == "sqlite":
        return value
    try:
        url = resolve_url(value) if "://" in value else ""
    except ConfigError:
        url = ""
    if not url.startswith("postgresql"):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not accepted; give `sqlite` (fresh SQLite files, the default) or a "
            "PostgreSQL server URL like postgresql+psycopg://user@host:5432/postgres"
        )
    return url


SECTIONS = ("train", "scheduling", "backends", "outage")
DEFAULT_SECTIONS = ("train", "scheduling", "backends")  # the outage section runs when asked for


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trivial", type=int, default=500)
    ap.add_argument("--tokens", type=int, default=8 * 64 * 24)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument(
        "--db",
        type=check_db,
        default="sqlite",
        help="`sqlite` (default: fresh files) or a PostgreSQL URL (needs CREATEDB)",
    )
    ap.add_argument("--claim-jobs", type=int, default=1000, help="trivial jobs the 4 drivers claim")
    ap.add_argument("--outage-jobs", type=int, default=100, help="failing trivial jobs per outage run")
    ap.add_argument(
        "--no-postgres",
        action="store_true",
        help="without --db: no throw-away PostgreSQL server, SQLite only",
    )
    ap.add_argument(
        "--only",
        choices=SECTIONS,
        action="append",
        help="run only this section (repeatable; default: all but outage)",
    )
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "queue_bench.json"))
    args = ap.parse_args()
    sections = args.only or DEFAULT_SECTIONS
    pg_url, stop_pg, no_pg = (
        postgres_server(args.db, args.no_postgres) if "backends" in sections else (None, lambda: None, None)
    )
    res: dict[str, Any] = {}
    try:
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            dbs = Databases(tmp, None if args.db == "sqlite" else args.db)
            try:
                if {"train", "scheduling", "outage"} & set(sections):
                    import ray

                    ray.init(
                        address="local",
                        num_cpus=2,
                        include_dashboard=False,
                        log_to_driver=False,
                        configure_logging=False,
                    )
                    res["db"] = dbs.backend
                    if "train" in sections:
                        res["train"] = bench_train(dbs, tmp, args.tokens, args.repeats)
                    if "scheduling" in sections:
                        res["scheduling"] = bench_latency_and_throughput(
                            dbs.new("trivial"), tmp, args.trivial
                        )
                    if "outage" in sections:
                        res["outage"] = bench_outage(dbs, tmp, args.outage_jobs, args.repeats)
                    ray.shutdown()
            finally:
                dbs.close()
            if "backends" in sections:
                res["backends"] = bench_backends(tmp, pg_url, args.claim_jobs)
                if no_pg:
                    res["backends"]["postgresql_skipped"] = no_pg
    finally:
        stop_pg()
    res["machine"] = {
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }
    table = []
    if "train" in res:
        t = res["train"]
        table += [
            (f"train tokens/s standalone ({res['db']})", f"{t['standalone_tokens_per_s']:.0f}"),
            (f"train tokens/s via queue ({res['db']})", f"{t['queue_tokens_per_s']:.0f}"),
            ("queue / standalone", f"{t['queue_over_standalone']:.3f}"),
        ]
    if "scheduling" in res:
        s = res["scheduling"]
        table += [
            (f"queued->running latency (median s, {res['db']})", f"{s['latency_median_s']:.3f}"),
            (f"{s['trivial_jobs']} trivial jobs (jobs/s, {res['db']})", f"{s['trivial_jobs_per_s']:.1f}"),
        ]
    if "outage" in res:
        o = res["outage"]
        left = o["outbox_after_refused_runs"]
        table += [
            (
                f"{o['jobs']} failing jobs, no channel (jobs/s, {res['db']})",
                f"{o['none_median_jobs_per_s']:.1f}",
            ),
            (f"  webhook refused (jobs/s, {res['db']})", f"{o['refused_median_jobs_per_s']:.1f}"),
            (f"  webhook accepting (jobs/s, {res['db']})", f"{o['delivered_median_jobs_per_s']:.1f}"),
            ("  refused / none (medians)", f"{o['refused_over_none']:.3f}"),
            ("  refused / accepting (medians)", f"{o['refused_over_delivered']:.3f}"),
            ("  accepting / none (medians)", f"{o['delivered_over_none']:.3f}"),
            ("  alerts pending in the outbox after", ", ".join(str(b["pending"]) for b in left)),
            ("  (accepting: delivered by the end)", ", ".join(map(str, o["delivered_per_delivered_run"]))),
        ]
    for backend, b in res.get("backends", {}).items():
        if backend == "postgresql_skipped":
            table.append(("postgresql", f"skipped: {b}"))
            continue
        c = b["claims"]
        table += [
            (f"claims/s, {c['drivers']} drivers ({backend})", f"{c['claims_per_s']:.0f}"),
            (f"  lost claims / errors ({backend})", f"{c['lost_claims']} / {c['errors']}"),
            (f"metric ingest points/s ({backend})", f"{b['ingest']['points_per_s']:.0f}"),
        ]
    w = max(len(k) for k, _ in table)
    for k, v in table:
        print(f"{k:<{w}}  {v:>10}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=1))
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
