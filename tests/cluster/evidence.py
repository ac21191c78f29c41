"""What a failed soak leaves for a person to find its cause (tests/cluster/soak.py): the cluster is torn
down after every run and each host's /tmp (a tmpfs of its own, where Ray keeps its session) goes with
it, so a failure that was not copied out first cannot be looked into. `keep` copies, before the
teardown: each host's Ray session logs (raylet.out/err, the workers', the GCS's on head), the shared
directory's artifacts, PostgreSQL's server log, a dump of the jobs and attempts tables, and what Ray's
head says of its nodes and of the tasks not finished. Every step is best effort (the failure may be a
database or a head that is away): what could not be kept is named in the index it writes. A soak that
passed keeps none of this."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from tests.cluster.lab import HOSTS, LabCluster

TABLES = (
    "SELECT id, kind, status, attempts, max_attempts, worker, driver_host, artifact_dir FROM jobs ORDER BY id",
    "SELECT job_id, n, outcome, started_at, ended_at, worker, driver_host, resumed_from_step, error "
    "FROM attempts ORDER BY job_id, n",
)
# run on head: the nodes (GCS), then the tasks not finished as the state API knows them (it needs the
# dashboard, which the lab's head runs without: then its error is what is kept)
RAY_STATE = """
import json, sys, ray
ray.init(address=sys.argv[1], logging_level="ERROR")
print(json.dumps({"nodes": ray.nodes()}, default=str, indent=1))
try:
    from ray.util.state import list_tasks
    tasks = list_tasks(filters=[("state", "!=", "FINISHED")], detail=True, timeout=20, raise_on_missing_output=False)
    print(json.dumps({"tasks": [t.__dict__ if hasattr(t, "__dict__") else t for t in tasks]}, default=str, indent=1))
except Exception as e:
    print(json.dumps({"tasks_error": f"{type(e).__name__}: {e}"}))
"""


def keep(lab: LabCluster, into: Path) -> list[str]:
    """Copy the evidence into `into` (made); the lines of its index (also written there as INDEX.txt)."""
    into.mkdir(parents=True, exist_ok=True)
    said: list[str] = []

    def step(what: str, do) -> None:
        try:
            said.append(f"{what}: {do() or 'kept'}")
        except Exception as e:  # the next step may still work
            said.append(f"{what}: NOT kept ({type(e).__name__}: {str(e)[:200]})")

    for host in (h for h in HOSTS if h != "pg"):  # every host but the database's runs Ray
        dest = into / f"ray-{host}"
        # on the host (its own /tmp); the destination is outside /tmp, which every host sees
        step(
            f"{host}'s Ray session logs -> {dest}",
            lambda h=host, d=dest: _run_ok(lab, h, ["cp", "-rL", "/tmp/ray/session_latest/logs", str(d)]),
        )
    step(
        "ray status (head)",
        lambda: _write(
            into / "ray-status.txt", _out(lab, "head", [_ray(), "status", f"--address={lab.ray_address}"])
        ),
    )
    step(
        "Ray nodes and unfinished tasks (head)",
        lambda: _write(
            into / "ray-state.json",
            _out(lab, "head", [sys.executable, "-c", RAY_STATE, lab.ray_address], timeout=90),
        ),
    )
    for i, sql in enumerate(TABLES):
        name = ("jobs", "attempts")[i]
        step(
            f"{name} table",
            lambda s=sql, n=name: _write(into / f"{n}.json", json.dumps(lab.query(s), indent=0)),
        )
    step("artifacts", lambda: shutil.copytree(lab.art, into / "artifacts", dirs_exist_ok=True) and None)
    step(
        "postgres server log",
        lambda: shutil.copy(lab.pg_base / "server.log", into / "pg-server.log") and None,
    )
    step(
        "drivers' and Ray nodes' output",
        lambda: shutil.copytree(lab.logs, into / "logs", dirs_exist_ok=True) and None,
    )
    (into / "INDEX.txt").write_text("\n".join(said) + "\n")
    return said


def _ray() -> str:
    return str(Path(sys.executable).parent / "ray")


def _out(lab: LabCluster, host: str, argv: list[str], timeout: float = 60) -> str:
    got = lab.net[host].run(argv, env=lab.env, timeout=timeout)
    return f"exit {got.returncode}\n{got.stdout}\n--- stderr\n{got.stderr[-5000:]}"


def _run_ok(lab: LabCluster, host: str, argv: list[str]) -> None:
    got = lab.net[host].run(argv, env=lab.env, timeout=120)
    if got.returncode != 0:
        raise RuntimeError(got.stderr[-300:])


def _write(path: Path, text: str) -> None:
    path.write_text(text)
