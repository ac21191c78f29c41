"""looplab deployed on the test cluster (tests/cluster/netns.py) host by host, as docs/scale-out.md
describes a lab's: PostgreSQL on host `pg`, the Ray head and a driver on `head`, Ray workers on
`worker1` and `worker2`, a second driver on `driver2`, artifacts on the shared directory. Every command
runs on its host, with its address: PostgreSQL listens on pg's address (trust from the cluster's range
only), Ray nodes start with `--node-ip-address`, gloo is told the interface (`GLOO_SOCKET_IFNAME=eth0`).

The test process itself is on none of these networks: it reads the database by running a short Python
program on a host (`query`), as any other client of the cluster would.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tests import pg
from tests.cluster.netns import Cluster

ROOT = Path(__file__).resolve().parents[2]
RAY = str(Path(sys.executable).parent / "ray")
HOSTS = ("head", "worker1", "worker2", "pg", "driver2")
RAY_PORT = 6379
PG_PORT = 5432
# one logical CPU a node (one tiny train job at a time), no GPU, a small object store, no usage report
NODE_FLAGS = ("--num-gpus=0", "--object-store-memory=100000000", "--disable-usage-stats")
QUERY = """
import json, sys
import sqlalchemy as sa
engine = sa.create_engine(sys.argv[1])
with engine.connect() as conn:
    rows = conn.execute(sa.text(sys.argv[2])).all()
print(json.dumps([list(r) for r in rows], default=str))
"""


class LabCluster:
    """The cluster with PostgreSQL up and a database made; Ray nodes and drivers started on demand."""

    def __init__(self, cache: Path, hosts: tuple[str, ...] = HOSTS, client: str = "head") -> None:
        self.net = Cluster(hosts, shared_mb=512)
        self.client = client  # the host that makes the database (and reads it: `query`)
        self.logs = self.net.root / "logs"
        self.logs.mkdir()
        self.art = self.net.shared / "artifacts"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        self.env.update(
            RAY_AUTH_MODE="disabled",
            OMP_NUM_THREADS="1",
            PYTHONPATH=str(ROOT),
            LOOPLAB_CACHE=str(cache),
            GLOO_SOCKET_IFNAME="eth0",
        )
        self.ray: dict[str, subprocess.Popen] = {}
        try:
            self.url = self._start_postgres()
        except BaseException:
            self.net.close()
            raise

    # ------------------------------------------------------------ PostgreSQL on host pg

    def _start_postgres(self) -> str:
        initdb, pg_ctl = pg.find_binary("initdb"), pg.find_binary("pg_ctl")
        if not initdb or not pg_ctl:
            raise pg.PgUnavailable("initdb/pg_ctl not found (apt-get install -y postgresql)")
        base = self.net.root / "pg"
        (base / "sock").mkdir(parents=True)
        self.net.root.chmod(0o755)
        for path in (base, base / "sock"):
            shutil.chown(path, pg.SUPERUSER, pg.SUPERUSER)
        host = self.net["pg"]
        init = host.run(
            pg._as_server_user(
                [initdb, "-D", str(base / "data"), "-U", pg.SUPERUSER, "-A", "trust", "--no-sync"]
            )
        )
        assert init.returncode == 0, init.stderr
        with open(base / "data" / "pg_hba.conf", "a") as hba:
            hba.write(f"host all all 10.213.{self.net.cid}.0/24 trust\n")
        self.pg_ctl, self.pg_base = pg_ctl, base
        self.start_postgres()
        admin = f"postgresql+psycopg://{pg.SUPERUSER}@{host.addr}:{PG_PORT}/postgres"
        made = self.net[self.client].run(
            [
                sys.executable,
                "-c",
                "import psycopg,sys; c=psycopg.connect(sys.argv[1], autocommit=True); c.execute('CREATE DATABASE looplab')",
                admin.replace("+psycopg", ""),
            ],
            env=self.env,
        )
        assert made.returncode == 0, made.stderr
        return f"postgresql+psycopg://{pg.SUPERUSER}@{host.addr}:{PG_PORT}/looplab"

    def start_postgres(self) -> None:
        host = self.net["pg"]
        options = (
            f"-h {host.addr} -p {PG_PORT} -k {self.pg_base / 'sock'} -c fsync=off -c max_connections=200"
        )
        argv = [
            self.pg_ctl,
            "start",
            "-D",
            str(self.pg_base / "data"),
            "-l",
            str(self.pg_base / "server.log"),
            "-w",
            "-o",
            options,
        ]
        started = host.run(pg._as_server_user(argv), timeout=90)
        assert started.returncode == 0, started.stdout + started.stderr

    def stop_postgres(self) -> None:
        """The database host's server stops at once (`-m immediate`: a crash, no clean shutdown)."""
        argv = [self.pg_ctl, "stop", "-D", str(self.pg_base / "data"), "-m", "immediate", "-w"]
        self.net["pg"].run(pg._as_server_user(argv), timeout=60)

    # ------------------------------------------------------------ Ray

    def start_ray(self, name: str, tries: int = 2, cpus: int = 1) -> None:
        """A Ray node on host `name` offering `cpus` CPUs: the head on `head`, a worker joining it
        elsewhere; returns when it is up. A node started again (after a fault) reads only its own lines
        of the host's log; a start that fails (a raylet not up in time on a loaded machine: CI saw "the
        current node timed out during startup" once) is tried again on a clean host, `tries` in all."""
        host = self.net[name]
        # $LOOPLAB_LAB_DASHBOARD=1: the head runs Ray's dashboard, which Ray's state API (what a task
        # waits for, on which node) needs; off by default (a process more on a loaded machine)
        dash = os.environ.get("LOOPLAB_LAB_DASHBOARD") == "1"
        role = (
            ["--head", f"--port={RAY_PORT}", f"--include-dashboard={str(dash).lower()}"]
            + ([f"--dashboard-host={host.addr}"] if dash else [])
            if name == "head"
            else [f"--address={self.ray_address}"]
        )
        argv = [
            RAY,
            "start",
            "--block",
            *role,
            f"--node-ip-address={host.addr}",
            f"--num-cpus={cpus}",
            *NODE_FLAGS,
        ]
        log = self.logs / f"ray-{name}.log"
        for attempt in range(1, tries + 1):
            seen = log.stat().st_size if log.exists() else 0
            self.ray[name] = host.spawn(argv, env=self.env, log=log)
            end = time.monotonic() + 120
            while not re.search(r"Ray runtime started", log.read_bytes()[seen:].decode(errors="replace")):
                if self.ray[name].poll() is not None or time.monotonic() > end:
                    break
                time.sleep(0.3)
            else:
                return
            assert attempt < tries, f"ray on {name} did not start:\n{log.read_text()[-3000:]}"
            self.net.kill(name)  # what the failed start left

    def node_id(self, name: str) -> str:
        """The Ray node id of host `name` now (an attempt's `worker` starts with its first 12 digits), as
        its raylet logged it under the host's own /tmp."""
        # a raylet started again on the host logs to raylet.1.out, .2, ...: the newest is the live node's
        # (the first raylet.out names the first node, which the soak's faults then looked for in vain)
        newest = 'cat "$(ls -t /tmp/ray/session_latest/logs/raylet*.out | head -n 1)"'
        log = self.net[name].run(["sh", "-c", newest]).stdout
        found = re.search(r"Setting node ID node_id=([0-9a-f]{56})", log) or re.search(
            r"node_id=([0-9a-f]{56})", log
        )
        assert found, f"no node id in {name}'s raylet log"
        return found.group(1)

    @property
    def ray_address(self) -> str:
        return f"{self.net['head'].addr}:{RAY_PORT}"

    # ------------------------------------------------------------ looplab

    def looplab(self, host: str, *args: str, log: str | None = None) -> subprocess.Popen:
        """`looplab --db URL ARGS` on `host`, in the shared directory."""
        argv = [sys.executable, "-m", "looplab", "--db", self.url, *args]
        return self.net[host].spawn(
            argv, cwd=self.net.shared, env=self.env, log=self.logs / (log or f"{host}.log")
        )

    def looplab_done(self, host: str, *args: str, timeout: float = 180) -> str:
        argv = [sys.executable, "-m", "looplab", "--db", self.url, *args]
        out = self.net[host].run(argv, cwd=self.net.shared, env=self.env, timeout=timeout)
        assert out.returncode == 0, out.stdout + out.stderr
        return out.stdout

    def query(self, sql: str, host: str | None = None) -> list[list]:
        """Rows of `sql` on the cluster's database, read from `host`."""
        out = self.net[host or self.client].run(
            [sys.executable, "-c", QUERY, self.url, sql], env=self.env, timeout=60
        )
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    def close(self) -> None:
        self.net.close()
