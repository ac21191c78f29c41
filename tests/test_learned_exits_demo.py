"""`looplab demo --study learned-exits --fast` in a fresh directory (a real local Ray, a SQLite file, real
training): lean trained with each gate objective and without a gate, every job succeeds, the frontier
tables hold learned and post-hoc rules side by side, and the gate at threshold 1 is the fixed depth."""

from __future__ import annotations

import os
import time

import pytest

from tests.test_adaptive_demo import fast_demo, sql
from tests.test_end_to_end import ROOT

pytestmark = [pytest.mark.demo, pytest.mark.ray, pytest.mark.slow]


def test_the_fast_learned_exits_demo_end_to_end(tmp_path, looplab_cache):
    env = {**os.environ, "LOOPLAB_CACHE": str(looplab_cache), "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    db = tmp_path / "looplab.db"
    t0 = time.monotonic()
    out = fast_demo("learned-exits", tmp_path, db, env, timeout=1800)
    print(f"demo --study learned-exits --fast: {time.monotonic() - t0:.0f} s")  # docs/adaptive.md's time
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "rounds saved at equal loss" in out.stdout and "whole demo" in out.stdout
    demo = (db, out.stdout, env)
    states = sql(demo, "SELECT kind, status, COUNT(*) AS n FROM jobs GROUP BY kind, status ORDER BY kind")
    assert states == [
        {"kind": k, "status": "succeeded", "n": 4} for k in ("adaptive", "depth_sweep", "train")
    ]
    cells = sql(demo, "SELECT adaptive_job_id, config, rule, threshold, val_loss, mean_rounds FROM adaptive")
    by_job: dict = {}
    for c in cells:
        by_job.setdefault(c["adaptive_job_id"], {})[c["config"]] = c
    gated = [job for job in by_job.values() if any(c["rule"] == "gate" for c in job.values())]
    assert len(gated) == 3 and len(by_job) == 4  # one per objective; the gate-less model has none
    for job in gated:
        fixed, one = job["fixed | per_round"], job["gate>=1 | per_round"]
        assert one["val_loss"] == fixed["val_loss"] and one["mean_rounds"] == fixed["mean_rounds"]
        rounds = [
            c["mean_rounds"]
            for c in sorted(job.values(), key=lambda c: c["threshold"] or 0)
            if c["rule"] == "gate"
        ]
        assert rounds == sorted(rounds)  # the thresholds sweep monotonically in mean rounds
        assert {c["rule"] for c in job.values()} == {"fixed", "state", "kl", "entropy", "argmax", "gate"}
