"""Two Ray nodes, one dies: a Ray head and a second Ray node started with `ray start` as separate
processes on this machine (one logical CPU each, a temp dir each), a `looplab run --address` driver
running two real tiny train jobs on them (one per node), artifacts on a path both nodes share.
The second node is killed with SIGKILL (its raylet and every process it started: a power cut of that
machine) after its job wrote a checkpoint. The driver sees the task die, the job goes back to the
queue, runs again on the head node from its checkpoint, and its curves equal an uninterrupted run's,
bit for bit, each point exactly once. It runs once per backend of the `db_url` fixture: a SQLite file
on the shared path, and a PostgreSQL database (the recipe's) when a server can be started.

These are the commands of the README's "Beyond one machine" recipe; `--block` (each node stays in
the foreground, in a session of its own) and `--temp-dir` let the test stop exactly its own nodes
and never another Ray of the machine (`ray stop` stops every Ray instance of the user).
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

from looplab import Queue
from looplab.workers import jobs
from looplab.workers.reporter import MemoryReporter
from tests.db_rows import rows
from tests.orchestrator.crash import looplab
from tests.orchestrator.test_crash_resume import GRID_FILE, TRAIN

pytestmark = [pytest.mark.ray, pytest.mark.multinode]

ROOT = Path(__file__).resolve().parents[2]
RAY = Path(sys.executable).parent / "ray"
# flags both nodes get: one logical CPU (one train job at a time), no GPU, a small object store (the
# jobs pass no large objects), no usage report
NODE_FLAGS = ("--num-cpus=1", "--num-gpus=0", "--object-store-memory=100000000", "--disable-usage-stats")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


class RayNode:
    """One `ray start --block` process in a session of its own, with its own (short) temp dir."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], log_dir: Path) -> None:
        # Ray's unix sockets live under the temp dir: keep the path short (107-character limit)
        self.temp_dir = tempfile.mkdtemp(prefix=f"ll{name}-", dir="/tmp")
        self.log_path = log_dir / f"{name}.log"
        self._log = open(self.log_path, "w")  # closed in stop()
        cmd = [str(RAY), "start", "--block", *args, *NODE_FLAGS, f"--temp-dir={self.temp_dir}"]
        self.proc = subprocess.Popen(
            cmd, env=env, start_new_session=True, stdout=self._log, stderr=subprocess.STDOUT
        )

    def log(self) -> str:
        return self.log_path.read_text()

    def wait_for(self, pattern: str, timeout: float = 90) -> re.Match:
        end = time.time() + timeout
        while not (m := re.search(pattern, self.log())):
            assert self.proc.poll() is None, f"ray start exited {self.proc.returncode}:\n{self.log()}"
            assert time.time() < end, f"no {pattern!r} from ray start within {timeout} s:\n{self.log()}"
            time.sleep(0.2)
        return m

    def node_id(self) -> str:
        """The node's Ray id, as its raylet logged it (attempts.worker starts with its first 12 digits)."""
        raylet_log = next(Path(self.temp_dir).glob("session_*/logs/raylet.out")).read_text()
        return re.search(r"node_id=([0-9a-f]{56})", raylet_log).group(1)

    def processes(self) -> list[int]:
        """Pids of the live processes that belong to this node (their command line names its temp dir:
        the raylet, its workers and agents)."""
        pids = []
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            with contextlib.suppress(OSError):
                if self.temp_dir.encode() in cmdline.read_bytes():
                    pids.append(int(cmdline.parent.name))
        return pids

    def kill(self) -> None:
        """SIGKILL the whole node: `ray start`, its raylet, the raylet's workers and agents; returns
        once none of them is left (a surviving worker would go on writing the job's checkpoints)."""
        assert self.processes(), "the node has no process to kill"
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        end = time.time() + 10
        while left := self.processes():
            assert time.time() < end, f"processes of the killed node still run: {left}"
            time.sleep(0.1)

    def stop(self) -> None:
        """SIGTERM the node's process group (Ray drains), SIGKILL what is left after a few seconds."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self._log.close()
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def reference_run(seed: int, art: Path, train: dict | None = None) -> MemoryReporter:
    """The job run uninterrupted, in this process, on one thread as the Ray workers ran (float sums
    depend on the thread count)."""
    import torch

    ref = MemoryReporter()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        jobs.run("train", jobs.validate("train", {**(train or TRAIN), "seed": seed}), ref, art)
    finally:
        torch.set_num_threads(threads)
    return ref


@pytest.mark.slow
@pytest.mark.skipif(not RAY.exists(), reason="no `ray` CLI next to the interpreter")
def test_killed_node_job_resumes_on_the_other_node_exactly(tmp_path, db_url, looplab_cache):
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    # the nodes' env is their workers' env: the data cache, one torch thread, the repository
    env.update(
        RAY_AUTH_MODE="disabled", OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT), LOOPLAB_CACHE=str(looplab_cache)
    )
    # the results database: a SQLite file (on the path every node sees), or a PostgreSQL database
    db, art = db_url, tmp_path / "art"  # artifacts: on a path every node sees
    port = _free_port()
    head = RayNode("head", ["--head", f"--port={port}", "--include-dashboard=false"], env, tmp_path)
    nodes, driver = [head], None
    try:
        # the address the head announces for other nodes ("ray start --address='IP:PORT'")
        address = head.wait_for(r"--address='([^']+)'").group(1)
        worker = RayNode("worker", [f"--address={address}"], env, tmp_path)
        nodes.append(worker)
        worker.wait_for(r"Ray runtime started")
        head_id, worker_id = head.node_id()[:12], worker.node_id()[:12]

        (tmp_path / "grids.py").write_text(GRID_FILE)
        sub = looplab(tmp_path, "submit", str(tmp_path / "grids.py"), env=env, db=db)
        out = sub.communicate(timeout=120)[0]
        assert sub.returncode == 0 and "2 added" in out, out
        q = Queue(db=db)
        driver = looplab(
            tmp_path, "run", "--address", address, "--until-empty", "--artifacts", str(art), env=env, db=db
        )

        # one job per node (one CPU each); wait for the second node's job to pass a checkpoint
        end = time.time() + 240
        current = (
            "SELECT j.id, a.worker, j.checkpoint_step FROM jobs j JOIN attempts a "
            "ON a.job_id = j.id AND a.n = j.attempts WHERE j.status = 'running'"
        )
        while True:
            running = rows(q, current)
            on_worker = [(j, ckpt) for j, w, ckpt in running if w and w.startswith(worker_id)]
            if on_worker and (on_worker[0][1] or 0) >= 3:
                break
            assert driver.poll() is None, driver.stdout.read()
            assert time.time() < end, f"no checkpoint on the second node within 240 s: {running}"
            time.sleep(0.2)
        ((victim, ckpt),) = on_worker
        worker.kill()

        out = driver.communicate(timeout=300)[0]
        assert driver.returncode == 0, out
        assert set(rows(q, "SELECT status FROM jobs")) == {("succeeded",)}, out
        attempts = rows(
            q,
            "SELECT n, outcome, worker, resumed_from_step, error FROM attempts WHERE job_id = :j ORDER BY n",
            j=victim,
        )
        # attempt 1 died with its node (an interruption: it costs none of the job's max_attempts and no
        # retry backoff); attempt 2 ran on the head, from the checkpoint, not step 0
        assert [(n, o, w.split(":")[0]) for n, o, w, *_ in attempts] == [
            (1, "interrupted", worker_id),
            (2, "succeeded", head_id),
        ], attempts
        assert "Ray node lost" in attempts[0][4], attempts[0][4]
        assert attempts[1][3] is not None and attempts[1][3] >= ckpt > 0
        # the other job ran once, on the head, beside the second node's job
        others = rows(q, "SELECT outcome, worker FROM attempts WHERE job_id != :j", j=victim)
        assert [(o, w.split(":")[0]) for o, w in others] == [("succeeded", head_id)], others
    finally:
        if driver is not None and driver.poll() is None:  # a failed assertion left it running
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait(10)
        for node in nodes:
            node.stop()

    # the resumed job's curves equal an uninterrupted run's, bit for bit, each point exactly once
    seed = rows(q, "SELECT seed FROM jobs WHERE id = :j", j=victim)[0][0]
    ref = reference_run(seed, tmp_path / "ref")
    for key in ("train_loss", "val_loss"):
        got = rows(
            q, "SELECT step, value FROM metrics WHERE job_id = :j AND key = :k ORDER BY step", j=victim, k=key
        )
        assert [tuple(r) for r in got] == ref.curve(key) and len(got) > 0
    n_steps = len(ref.curve("train_loss"))
    counts = "SELECT COUNT(*), COUNT(DISTINCT step) FROM metrics WHERE job_id = :j AND key = 'train_loss'"
    assert rows(q, counts, j=victim) == [(n_steps, n_steps)]
