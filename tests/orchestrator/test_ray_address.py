"""The multi-node path: `looplab run --address` against a Ray head started separately with `ray start`
(what a user does on a cluster), running a small grid of fake jobs to completion.

The head gets a temp dir of its own and runs under `ray start --block` in a new session, so the test
stops exactly that head (its process group) and never touches another Ray on the machine (`ray stop`
would stop every Ray instance of the user). Token authentication is switched off for both sides
(RAY_AUTH_MODE=disabled): the test is about looplab connecting, not about Ray's auth set-up.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from looplab import Grid, Queue
from tests.orchestrator import fake_jobs

pytestmark = [pytest.mark.ray, pytest.mark.multinode]  # a Ray head of its own, `ray start`

ROOT = Path(__file__).resolve().parents[2]
RAY = Path(sys.executable).parent / "ray"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM the head's process group (Ray drains), SIGKILL what is left after a few seconds."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(3)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)


@pytest.mark.slow
@pytest.mark.skipif(not RAY.exists(), reason="no `ray` CLI next to the interpreter")
def test_run_on_an_existing_ray_cluster_by_address(tmp_path):
    # a short path: Ray's unix sockets live under the temp dir (107-character limit)
    ray_tmp = tempfile.mkdtemp(prefix="llray-", dir="/tmp")
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(
        RAY_AUTH_MODE="disabled",
        OMP_NUM_THREADS="1",
        PYTHONPATH=str(ROOT),
        LOOPLAB_JOB_KINDS="tests.orchestrator.fake_jobs",
    )
    head_log = open(tmp_path / "head.log", "w")  # closed in finally
    head = subprocess.Popen(
        [
            str(RAY),
            "start",
            "--head",
            "--block",
            "--num-cpus",
            "2",
            "--port",
            str(port),
            "--include-dashboard=false",
            "--disable-usage-stats",
            "--temp-dir",
            ray_tmp,
        ],
        cwd=tmp_path,
        env=env,
        start_new_session=True,
        stdout=head_log,
        stderr=subprocess.STDOUT,
    )
    try:
        db = tmp_path / "q.db"
        q = Queue(db=db, kinds=fake_jobs)
        ids = q.submit(
            [
                Grid(
                    "addr",
                    base={"tokens": 100, "steps": 4, "step_s": 0.01},
                    sweep={"recipe": ["lean", "parcae"]},
                    then=["depth_sweep", "decode_bench"],
                ),
                Grid(
                    "iso",
                    base={"recipe": "plain", "step_s": 0.01, "budget": {"match_time_of": {"recipe": "lean"}}},
                ),
            ]
        )
        log = (tmp_path / "head.log").read_text
        end = time.time() + 60
        # the address the head announces for other nodes ("ray start --address='IP:PORT'")
        while not (m := re.search(r"--address='([^']+)'", log())):
            assert head.poll() is None, f"ray start exited {head.returncode}:\n{log()}"
            assert time.time() < end, f"the Ray head did not start within 60 s:\n{log()}"
            time.sleep(0.2)
        address = m.group(1)
        assert address.endswith(f":{port}")
        driver = subprocess.run(
            [
                sys.executable,
                "-m",
                "looplab",
                "--db",
                str(db),
                "run",
                "--address",
                address,
                "--until-empty",
                "--artifacts",
                str(tmp_path / "art"),
            ],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        out = driver.stdout + driver.stderr
        assert driver.returncode == 0, out
        assert "Started a local Ray instance" not in out
        with q.eng.connect() as conn:
            st = dict(conn.execute(sa.text("SELECT id, status FROM jobs")).all())
            workers = {w for (w,) in conn.execute(sa.text("SELECT worker FROM attempts")).all()}
        assert sorted(st) == sorted(ids) and set(st.values()) == {"succeeded"}, (st, out)
        # the jobs ran in worker processes of that head (its session logs name their pids), not in a
        # Ray the driver started for itself
        pids = {w.rsplit(":", 1)[-1] for w in workers}
        logged = {f.stem.rsplit("-", 1)[-1] for f in Path(ray_tmp).glob("session_*/logs/worker-*")}
        assert pids and pids <= logged, (pids, sorted(logged))
    finally:
        _stop_group(head)
        head_log.close()
        shutil.rmtree(ray_tmp, ignore_errors=True)
