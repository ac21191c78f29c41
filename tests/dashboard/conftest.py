"""A small results database with known numbers, shared by the page tests (AppTest, browser, SQL).

Contents (grid "study", size tiny, 1M-token budget):
- parcae (sampled loops), lean (fixed 4), plain (no loop) × seeds 0, 1: succeeded train jobs with
  metric curves and a train_results row each;
- a depth sweep (succeeded) per parcae/lean run with depth_evals and round_deltas;
- one decode bench job: parcae/lean/plain × context 128/512 × batch 1/8;
- a running train job with progress and a tokens/s in latest_metrics; a failed one with a traceback;
- an iso-time pair: lean seed 0 retrained with the time of parcae seed 0.

Expected values (`EXPECTED`) are worked out by hand from the numbers below.
"""

from __future__ import annotations

import json
import time

import pytest

# depth sweep losses per (recipe, seed): parcae best at 8 (seed 0) and 12 (seed 1)
DEPTH = {
    ("parcae", 0): {1: 4.0, 2: 3.6, 4: 3.3, 8: 3.10, 12: 3.11, 16: 3.15},
    ("parcae", 1): {1: 4.1, 2: 3.7, 4: 3.35, 8: 3.13, 12: 3.12, 16: 3.14},
    ("lean", 0): {1: 3.9, 2: 3.5, 4: 3.105, 8: 3.2},
    ("lean", 1): {1: 3.9, 2: 3.5, 4: 3.125, 8: 3.2},
}
FINAL_VAL = {("parcae", 0): 3.20, ("parcae", 1): 3.22, ("lean", 0): 3.15, ("lean", 1): 3.16,
             ("plain", 0): 3.30, ("plain", 1): 3.34}  # fmt: skip
TOKENS_PER_S = {"parcae": 1000.0, "lean": 1500.0, "plain": 2000.0}
EXPECTED = {
    "parcae_mean": 3.11,  # (3.10 + 3.12) / 2, best loops 8/12
    "lean_mean": 3.115,  # (3.105 + 3.125) / 2 at its trained 4 loops -> diff +0.005 -> noise
    "plain_mean": 3.32,  # final val, diff +0.21 -> worse
    "lean_throughput_ratio": 1.5,
    "iso_time_diff": -0.07,  # lean iso-time run 3.13 vs parcae seed 0 final 3.20
    "running_progress": 0.3,
    "failure_line": "RuntimeError: CUDA out of memory (fixture)",
}
ISO_TIME_LOSS = 3.13
# how each recipe loops, as the queue stores it at submission (jobs.loop_sampler, jobs.loops)
LOOPS = {"parcae": ("poisson_seq", 8), "lean": ("fixed", 4), "plain": ("fixed", 1)}


def build_fixture_db(path) -> str:
    """Create the database at `path` (migrated by orchestrator.db.engine) and fill it; return the URL."""
    from orchestrator import schema
    from orchestrator.db import engine, resolve_url, session
    from orchestrator.states import JobStatus

    url = resolve_url(str(path))
    eng = engine(url)
    now = time.time()
    n = iter(range(1, 10_000))

    def job(kind, recipe=None, seed=None, status=JobStatus.SUCCEEDED, budget=None, **kw):
        cfg = {"recipe": recipe, "size": "tiny", "seed": seed, "model": {}, "kind": kind, "n": next(n)}
        sampler, loops = LOOPS.get(recipe, (None, None)) if kind in ("train", "depth_sweep") else (None, None)
        return schema.Job(grid_id=1, kind=kind, config=json.dumps(cfg, sort_keys=True),
                          config_hash=f"h{cfg['n']}", recipe=recipe, size="tiny" if recipe else None, seed=seed,
                          status=status, budget=json.dumps(budget) if budget else None, created_at=now - 1000,
                          started_at=now - 900, loop_sampler=sampler, loops=loops,
                          finished_at=now - 100 if status in (JobStatus.SUCCEEDED, JobStatus.FAILED) else None,
                          **kw)  # fmt: skip

    with session(eng) as s:
        s.add(schema.GridRow(id=1, name="study", spec="{}", spec_hash="g1", created_at=now - 1000))
        s.flush()
        trains = {}
        for recipe in ("parcae", "lean", "plain"):
            for seed in (0, 1):
                j = job("train", recipe, seed, budget={"tokens": 1_000_000}, budget_tokens=1_000_000)
                s.add(j)
                s.flush()
                trains[(recipe, seed)] = j
                _curves(
                    s, schema, j.id, FINAL_VAL[(recipe, seed)], secs_per_step=1.0 + 0.5 * (recipe == "parcae")
                )
                s.add(schema.TrainResult(job_id=j.id, steps=50, tokens=1_000_000, train_seconds=100.0,
                                    tokens_per_s=TOKENS_PER_S[recipe], final_train_loss=FINAL_VAL[(recipe, seed)] - 0.1,
                                    final_val_loss=FINAL_VAL[(recipe, seed)]))  # fmt: skip
        for (recipe, seed), losses in DEPTH.items():
            sw = job("depth_sweep", recipe, seed)
            s.add(sw)
            s.flush()
            s.add(schema.JobDep(job_id=sw.id, depends_on=trains[(recipe, seed)].id))
            for loops, loss in losses.items():
                s.add(schema.DepthEval(job_id=sw.id, loops=loops, val_loss=loss))
            for r in range(1, 9):
                s.add(schema.RoundDelta(job_id=sw.id, loops=8, round=r, rel_change=0.5 / r + 0.01 * seed))
        dec = job("decode_bench", "parcae")
        s.add(dec)
        s.flush()
        for arch, ms in (("parcae", 4.0), ("lean", 2.0), ("plain", 1.0)):
            for ctx in (128, 512):
                for batch in (1, 8):
                    s.add(schema.DecodeBench(job_id=dec.id, arch=arch, size="tiny", context_len=ctx, batch_size=batch,
                                        ms_per_token=ms * ctx / 128, ms_p10=ms, ms_p90=ms * 1.2,
                                        kv_cache_mb=ms * ctx / 64 * batch, device="cpu", dtype="float32"))  # fmt: skip
        ref = trains[("parcae", 0)]
        iso = job("train", "lean", 0, budget={"match_time_of": ref.id}, budget_time_s=100.0)
        s.add(iso)
        s.flush()
        s.add(schema.JobDep(job_id=iso.id, depends_on=ref.id))
        _curves(s, schema, iso.id, ISO_TIME_LOSS, secs_per_step=1.0)
        s.add(schema.TrainResult(job_id=iso.id, steps=50, tokens=1_500_000, train_seconds=99.0, tokens_per_s=1500.0,
                            final_val_loss=ISO_TIME_LOSS, time_budget_s=100.0))  # fmt: skip
        run = job("train", "lean", 2, status=JobStatus.RUNNING, budget={"tokens": 1_000_000}, budget_tokens=1_000_000,
                  progress_done=30.0, progress_total=100.0, eta_s=125.0, heartbeat_at=now)  # fmt: skip
        s.add(run)
        s.flush()
        _curves(s, schema, run.id, 3.5, secs_per_step=1.0, steps=15)
        s.add(
            schema.LatestMetric(
                job_id=run.id, key="tokens_per_s", step=15, tokens=300_000, wall_s=15.0, value=1234.0
            )
        )
        s.add(job("train", "parcae", 2, status=JobStatus.FAILED, budget={"tokens": 1_000_000}, budget_tokens=1_000_000,
                  error="Traceback (most recent call last):\n  File \"train.py\", line 1\n"
                        + EXPECTED["failure_line"]))  # fmt: skip
        s.add(job("depth_sweep", "lean", 2, status=JobStatus.QUEUED))
    eng.dispose()
    from orchestrator.db import dispose_all

    dispose_all()
    return url


def _curves(s, schema, job_id: int, final: float, secs_per_step: float, steps: int = 50) -> None:
    """train_loss every step, val_loss every 10 steps, ending at `final`; 20k tokens per step."""
    for step in range(1, steps + 1):
        tok, wall = step * 20_000, step * secs_per_step
        s.add(schema.Metric(job_id=job_id, key="train_loss", step=step, tokens=tok, wall_s=wall,
                       value=final - 0.1 + 2.0 / step))  # fmt: skip
        if step % 10 == 0 or step == steps:
            s.add(schema.Metric(job_id=job_id, key="val_loss", step=step, tokens=tok, wall_s=wall,
                           value=final + (steps - step) * 0.01))  # fmt: skip
    s.add(schema.LatestMetric(job_id=job_id, key="val_loss", step=steps, tokens=steps * 20_000,
                         wall_s=steps * secs_per_step, value=final))  # fmt: skip


@pytest.fixture(scope="session")
def fixture_db(tmp_path_factory):
    """(url, path) of the filled fixture database."""
    path = tmp_path_factory.mktemp("dashboard_db") / "looplab.db"
    url = build_fixture_db(path)
    return url, path


@pytest.fixture(scope="session")
def empty_db(tmp_path_factory):
    """(url, path) of a migrated database with no job."""
    from orchestrator.db import dispose_all, engine, resolve_url

    path = tmp_path_factory.mktemp("dashboard_empty") / "looplab.db"
    url = resolve_url(str(path))
    engine(url)
    dispose_all()
    return url, path
