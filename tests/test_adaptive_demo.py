"""`looplab demo --study adaptive --fast` in a fresh directory (a real local Ray, a SQLite file, real
training): every job succeeds, the frontier tables are printed, and the database the queue wrote holds
cells whose fixed-depth loss is the depth sweep's at the same depth, exactly."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.test_end_to_end import LOOPLAB, ROOT

pytestmark = [pytest.mark.demo, pytest.mark.ray]  # `looplab demo` runs the queue on a local Ray


@pytest.fixture(scope="module")
def demo(tmp_path_factory, looplab_cache):
    import os

    work = tmp_path_factory.mktemp("adaptive_demo")
    db = work / "looplab.db"
    env = {**os.environ, "LOOPLAB_CACHE": str(looplab_cache), "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    out = fast_demo("adaptive", work, db, env, timeout=1200)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return db, out.stdout, env


def fast_demo(study: str, work, db, env: dict, timeout: float) -> subprocess.CompletedProcess:
    """`looplab --db DB demo --study STUDY --fast` run in `work`, its output captured."""
    return subprocess.run(
        [*LOOPLAB, "--db", str(db), "demo", "--study", study, "--fast"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def sql(demo, query: str) -> list[dict]:
    db, _, env = demo
    out = subprocess.run(
        [*LOOPLAB, "--db", str(db), "sql", "--json", query],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


@pytest.mark.slow
def test_the_fast_adaptive_demo_end_to_end(demo):
    _, stdout, _ = demo
    assert "rounds saved at equal loss" in stdout and "the frontier under per_round" in stdout
    assert "whole demo" in stdout and "page Adaptive" in stdout
    states = sql(demo, "SELECT kind, status, COUNT(*) AS n FROM jobs GROUP BY kind, status ORDER BY kind")
    assert states == [
        {"kind": k, "status": "succeeded", "n": 2} for k in ("adaptive", "depth_sweep", "train")
    ]
    cells = sql(
        demo, "SELECT recipe, config, rule, kv_strategy, max_rounds, val_loss, mean_rounds FROM adaptive"
    )
    assert {c["recipe"] for c in cells} == {"parcae", "fixed4"}
    assert len(cells) == 2 * 4 * (1 + 4)  # 2 models x 4 strategies x (fixed + 4 rules at one threshold)
    depth = {
        (d["recipe"], d["loops"]): d["val_loss"]
        for d in sql(demo, "SELECT recipe, loops, val_loss FROM depth")
    }
    for cell in cells:
        if (
            cell["config"] == "fixed | per_round"
        ):  # the same forward on the same tokens and seeds as the sweep
            assert cell["val_loss"] == depth[(cell["recipe"], cell["max_rounds"])]
            assert cell["mean_rounds"] == cell["max_rounds"]
    assert {c["max_rounds"] for c in cells if c["recipe"] == "parcae"} == {8}  # its trained loop count
    counts = sql(
        demo, "SELECT config, split, SUM(count) AS n FROM exit_rounds GROUP BY adaptive_job_id, config, split"
    )
    assert {c["n"] for c in counts} == {1024}  # every validation token once per split
    decodes = sql(demo, "SELECT mode, mean_step_rounds, ms_per_token FROM adaptive_decode")
    assert {d["mode"] for d in decodes} == {"masked", "batch_stop"} and all(
        d["ms_per_token"] > 0 for d in decodes
    )
    tasks = sql(demo, "SELECT task, n FROM adaptive_tasks WHERE subset = 'all'")
    assert tasks and {t["task"] for t in tasks} == {"deduction"}
