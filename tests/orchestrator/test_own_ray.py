"""A driver given no Ray address starts a Ray of its own (orchestrator/scheduler.py `_connect`), whatever
cluster file another Ray left on the machine: found one step off the path, when a Ray experiment killed
without its shutdown left /tmp/ray/ray_current_cluster behind and the next `looplab demo` failed at once
("When connecting to an existing cluster, num_cpus and num_gpus must not be provided"). A `ray start` of
the user's own on the machine did the same. The start-up probes the planner times import what an
installed wheel has (looplab.*), not the checkout's folders."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.ray
def test_a_driver_without_an_address_runs_its_queue_beside_another_rays_cluster_file(tmp_path):
    ray_tmp = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))  # short: Ray's sockets live under it
    (ray_tmp / "ray").mkdir(parents=True)
    # what a killed session leaves: the address of a cluster that is gone (nothing listens on port 9)
    (ray_tmp / "ray" / "ray_current_cluster").write_text("127.0.0.1:9\n")
    code = textwrap.dedent(
        f"""
        from looplab.orchestrator import Grid, Queue
        from tests.orchestrator import fake_jobs
        q = Queue(db={str(tmp_path / "q.db")!r}, artifacts={str(tmp_path / "art")!r}, kinds=fake_jobs)
        q.submit(Grid("one", job="noop"))
        q.run(until_empty=True, progress=False, poll_s=0.1, num_cpus=1)
        print("statuses", sorted(q.status()["status"].astype(str)))
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(RAY_TMPDIR=str(ray_tmp), PYTHONPATH=str(ROOT))
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert "statuses ['succeeded']" in done.stdout, done.stdout[-2000:]
        assert (
            ray_tmp / "ray" / "ray_current_cluster"
        ).exists()  # the other cluster's file: not ours to touch
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)


def _imported(code: str) -> list[str]:
    """The modules a one-line program imports: `import a, b.c` and `from d.e import f` give a, b.c, d.e."""
    names = []
    for statement in re.split(r"[;\n]", code):
        words = statement.split()
        if words[:1] == ["from"] and len(words) > 1:
            names.append(words[1])
        elif words[:1] == ["import"]:
            names += [m.strip() for m in " ".join(words[1:]).split(",")]
    return names


def test_the_start_up_probes_import_only_what_an_installed_wheel_has():
    from looplab.lab.planner import local_machine
    from looplab.workers import calibrate

    probes = {"driver": local_machine._DRIVER_START, "job": calibrate._JOB_START}
    names = {k: _imported(code) for k, code in probes.items()}
    assert all(names.values()), names  # the rule read what they import
    foreign = {
        k: [m for m in v if m.split(".")[0] not in ("looplab", "ray", "torch")] for k, v in names.items()
    }
    assert foreign == {"driver": [], "job": []}
    assert _imported("import ray, orchestrator.scheduler; x") == ["ray", "orchestrator.scheduler"]  # can fail
    assert "address='local'" in local_machine._DRIVER_START  # timed as `looplab run` starts its Ray
