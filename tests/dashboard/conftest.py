"""A small results database with known numbers, shared by the page tests (AppTest, browser, SQL).

Contents (grid "study", size tiny, 1M-token budget):
- four variants, each × seeds 0, 1: parcae (sampled loops), lean (fixed 4), `lean · loops=8` (a second
  variant of the recipe lean) and plain (no loop); succeeded train jobs with metric curves (val_loss@N
  at each evaluation too) and a train_results row each, with FLOPs (plain's are the stored FLOPs per
  token only, as for a run stored before FLOPs were counted);
- a depth sweep (succeeded) per parcae/lean run with depth_evals (with a far-copy split) and
  round_deltas (with change ratios and a bf16 resolution);
- one decode bench job per variant: context 128/512 × batch 1/8;
- a running train job with progress and a tokens/s in latest_metrics; a failed one with a traceback;
- an iso-time pair: lean seed 0 retrained with the time of parcae seed 0.

Expected values (`EXPECTED`) are worked out by hand from the numbers below.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.pg import BACKENDS, Databases

# variant key -> (recipe, model overrides, architecture as stored at submission, FLOPs per token)
ARCH = dict(
    n_prelude=2,
    n_recurrent=2,
    n_coda=2,
    d_model=64,
    injection="diagonal",
    n_params=300_000,
    n_once=100_000,
    n_rec=80_000,
)
VARIANTS = {
    "parcae": ("parcae", {}, dict(ARCH, effective_depth=20.0), 2.0e6),
    "lean": ("lean", {}, dict(ARCH, effective_depth=12.0), 1.0e6),
    "lean8": ("lean", {"loops": 8}, dict(ARCH, effective_depth=20.0), 1.96e6),
    "plain": ("plain", {}, dict(ARCH, n_recurrent=2, injection="none", effective_depth=6.0), 0.4e6),
}
# how each variant loops, as the queue stores it at submission (jobs.loop_sampler, jobs.loops)
LOOPS = {"parcae": ("poisson_seq", 8), "lean": ("fixed", 4), "lean8": ("fixed", 8), "plain": ("fixed", 1)}
# depth sweep losses per (variant, seed): parcae best at 8 (seed 0) and 12 (seed 1)
DEPTH = {
    ("parcae", 0): {1: 4.0, 2: 3.6, 4: 3.3, 8: 3.10, 12: 3.11, 16: 3.15},
    ("parcae", 1): {1: 4.1, 2: 3.7, 4: 3.35, 8: 3.13, 12: 3.12, 16: 3.14},
    ("lean", 0): {1: 3.9, 2: 3.5, 4: 3.105, 8: 3.2},
    ("lean", 1): {1: 3.9, 2: 3.5, 4: 3.125, 8: 3.2},
}
FINAL_VAL = {
    ("parcae", 0): 3.20,
    ("parcae", 1): 3.22,
    ("lean", 0): 3.15,
    ("lean", 1): 3.16,
    ("lean8", 0): 3.05,
    ("lean8", 1): 3.07,
    ("plain", 0): 3.30,
    ("plain", 1): 3.34,
}
# far-copy split of every depth row (`_far`), and the bf16 resolution of every round: rel_change
# 0.5 / r (+ 0.01 at seed 1) is below 0.07 from round 8 at seed 0 and never at seed 1
FAR_SHARE, FAR_LEAN_EXTRA, BF16_RESOLUTION = 0.05, 0.02, 0.07
# val_loss@N during training = val_loss + this offset (0 at the trained count)
DEPTH_OFFSETS = {
    "parcae": {1: 0.9, 2: 0.5, 4: 0.15, 8: 0.0},
    "lean": {1: 0.8, 2: 0.4, 4: 0.0, 8: 0.05},
    "lean8": {1: 0.7, 2: 0.3, 4: 0.1, 8: 0.0},
    "plain": {1: 0.0},
}
TOKENS_PER_S = {"parcae": 1000.0, "lean": 1500.0, "lean8": 800.0, "plain": 2000.0}
DECODE_MS = {"parcae": 4.0, "lean": 2.0, "lean8": 3.0, "plain": 1.0}
EXPECTED = {
    "parcae_mean": 3.11,  # (3.10 + 3.12) / 2, best loops 8/12
    "lean_mean": 3.115,  # (3.105 + 3.125) / 2 at its trained 4 loops -> diff +0.005 -> noise
    "lean8_mean": 3.06,  # (3.05 + 3.07) / 2, final val at 8 loops (no sweep) -> diff -0.05 -> better
    "plain_mean": 3.32,  # final val, diff +0.21 -> worse
    "lean_throughput_ratio": 1.5,
    "iso_time_diff": -0.07,  # lean iso-time run 3.13 vs parcae seed 0 final 3.20
    "running_progress": 0.3,
    "failure_line": "RuntimeError: CUDA out of memory (fixture)",
    # iso-FLOP: parcae 2.0e6 x 1M = 2.0e12 and lean · loops=8 1.96e6 x 1M = 1.96e12 are within 5 %
    "iso_flop_flops": (2 * 2.0e12 + 2 * 1.96e12) / 4,
    "iso_flop_lean8_diff": -0.05,  # 3.06 - 3.11
    "plain_train_flops": 0.4e6 * 1_000_000,  # FLOPs per token x tokens (no stored total)
    "lean_last_val_loss_at_1": 3.15 + 0.8,  # lean seed 0's last evaluation at 1 loop
    # noise floor: the four variants' two seeds at 1M tokens, sample variances 0.0002 (parcae, lean,
    # lean8: 0.02 apart) and 0.0008 (plain: 0.04 apart), pooled over 4 degrees of freedom
    "noise_sigma": ((3 * 0.0002 + 0.0008) / 4) ** 0.5,
    "noise_dof": 4,
}
ISO_TIME_LOSS = 3.13
LEAN8_LABEL = "lean · loops=8"


def variant_columns(key: str | None) -> dict:
    """The jobs columns of a variant, as `orchestrator.variants` fills them at submission."""
    from looplab.orchestrator.variants import variant_id, variant_label

    if key is None:
        return {}
    recipe, overrides, arch, fpt = VARIANTS[key]
    sampler, loops = LOOPS[key]
    return dict(
        variant_id=variant_id(recipe, "tiny", overrides),
        variant_label=variant_label(recipe, overrides),
        loop_sampler=sampler,
        loops=loops,
        flops_per_token=fpt,
        **arch,
    )


def build_fixture_db(path) -> str:
    """Create the database at `path` (migrated by orchestrator.db.engine) and fill it; return the URL."""
    from looplab.orchestrator import schema
    from looplab.orchestrator.db import engine, resolve_url, session
    from looplab.orchestrator.states import JobStatus
    from looplab.orchestrator.writer import reindex_curves

    url = resolve_url(str(path))
    eng = engine(url)
    now = time.time()
    n = iter(range(1, 10_000))

    def job(kind, key=None, seed=None, status=JobStatus.SUCCEEDED, budget=None, **kw):
        recipe, overrides = (VARIANTS[key][0], VARIANTS[key][1]) if key else (None, {})
        cfg = {"recipe": recipe, "size": "tiny", "seed": seed, "model": overrides, "kind": kind, "n": next(n)}
        return schema.Job(
            grid_id=1,
            kind=kind,
            config=json.dumps(cfg, sort_keys=True),
            config_hash=f"h{cfg['n']}",
            recipe=recipe,
            size="tiny" if recipe else None,
            seed=seed,
            status=status,
            budget=json.dumps(budget) if budget else None,
            created_at=now - 1000,
            started_at=now - 900,
            finished_at=now - 100 if status in (JobStatus.SUCCEEDED, JobStatus.FAILED) else None,
            **variant_columns(key),
            **kw,
        )

    def result(job_id, key, tokens, final, **kw):
        fpt = VARIANTS[key][3] if key != "plain" else None  # plain: stored before FLOPs were counted
        flops = dict(flops_per_token=fpt, train_flops=fpt * tokens) if fpt else {}
        return schema.TrainResult(job_id=job_id, steps=50, tokens=tokens, final_val_loss=final, **flops, **kw)

    with session(eng) as s:
        s.add(schema.GridRow(id=1, name="study", spec="{}", spec_hash="g1", created_at=now - 1000))
        s.flush()
        trains = {}
        for key in ("parcae", "lean", "lean8", "plain"):
            for seed in (0, 1):
                j = job("train", key, seed, budget={"tokens": 1_000_000}, budget_tokens=1_000_000)
                s.add(j)
                s.flush()
                trains[(key, seed)] = j
                final = FINAL_VAL[(key, seed)]
                _curves(
                    s,
                    schema,
                    j.id,
                    final,
                    secs_per_step=1.0 + 0.5 * (key == "parcae"),
                    depth=DEPTH_OFFSETS[key],
                )
                s.add(
                    result(
                        j.id,
                        key,
                        1_000_000,
                        final,
                        train_seconds=100.0,
                        tokens_per_s=TOKENS_PER_S[key],
                        final_train_loss=final - 0.1,
                    )
                )
        for (key, seed), losses in DEPTH.items():
            sw = job("depth_sweep", key, seed)
            s.add(sw)
            s.flush()
            s.add(schema.JobDep(job_id=sw.id, depends_on=trains[(key, seed)].id))
            for loops, loss in losses.items():
                s.add(schema.DepthEval(job_id=sw.id, loops=loops, val_loss=loss, **_far(key, seed, loss)))
            for r in range(1, 9):
                rel = 0.5 / r + 0.01 * seed
                ratio = None if r == 1 else rel / (0.5 / (r - 1) + 0.01 * seed)
                s.add(
                    schema.RoundDelta(
                        job_id=sw.id,
                        loops=8,
                        round=r,
                        rel_change=rel,
                        change_ratio=ratio,
                        bf16_resolution=BF16_RESOLUTION,
                    )
                )
        for key, ms in DECODE_MS.items():
            dec = job("decode_bench", key)
            s.add(dec)
            s.flush()
            for ctx in (128, 512):
                for batch in (1, 8):
                    s.add(
                        schema.DecodeBench(
                            job_id=dec.id,
                            arch=VARIANTS[key][0],
                            size="tiny",
                            context_len=ctx,
                            batch_size=batch,
                            ms_per_token=ms * ctx / 128,
                            ms_p10=ms,
                            ms_p90=ms * 1.2,
                            kv_cache_mb=ms * ctx / 64 * batch,
                            device="cpu",
                            dtype="float32",
                        )
                    )
        ref = trains[("parcae", 0)]
        iso = job("train", "lean", 0, budget={"match_time_of": ref.id}, budget_time_s=100.0)
        s.add(iso)
        s.flush()
        s.add(schema.JobDep(job_id=iso.id, depends_on=ref.id))
        _curves(s, schema, iso.id, ISO_TIME_LOSS, secs_per_step=1.0)
        s.add(
            result(
                iso.id,
                "lean",
                1_500_000,
                ISO_TIME_LOSS,
                train_seconds=99.0,
                tokens_per_s=1500.0,
                time_budget_s=100.0,
            )
        )
        run = job(
            "train",
            "lean",
            2,
            status=JobStatus.RUNNING,
            budget={"tokens": 1_000_000},
            budget_tokens=1_000_000,
            progress_done=30.0,
            progress_total=100.0,
            eta_s=125.0,
            heartbeat_at=now,
        )
        s.add(run)
        s.flush()
        _curves(s, schema, run.id, 3.5, secs_per_step=1.0, steps=15)
        s.add(
            schema.LatestMetric(
                job_id=run.id, key="tokens_per_s", step=15, tokens=300_000, wall_s=15.0, value=1234.0
            )
        )
        s.add(
            job(
                "train",
                "parcae",
                2,
                status=JobStatus.FAILED,
                budget={"tokens": 1_000_000},
                budget_tokens=1_000_000,
                error='Traceback (most recent call last):\n  File "train.py", line 1\n'
                + EXPECTED["failure_line"],
            )
        )
        s.add(job("depth_sweep", "lean", 2, status=JobStatus.QUEUED))
    # the points went in through the ORM, not the writer: give them the levels and counts it keeps
    reindex_curves(eng)
    eng.dispose()
    from looplab.orchestrator.db import dispose_all

    dispose_all()
    return url


def _far(key: str, seed: int, loss: float) -> dict:
    """The far-copy columns of a depth row: far copies cost 1.0 more than the mean, lean's a further
    FAR_LEAN_EXTRA + 0.01 × seed (so lean − parcae is 0.02 at seed 0, 0.03 at seed 1); near tokens
    0.05 less."""
    extra = FAR_LEAN_EXTRA + 0.01 * seed if key == "lean" else 0.0
    return dict(
        far_copy_loss=loss + 1.0 + extra,
        near_loss=loss - 0.05,
        far_share=FAR_SHARE,
        far_distance=500,
        far_definition=2,
    )


def _curves(
    s, schema, job_id: int, final: float, secs_per_step: float, steps: int = 50, depth: dict | None = None
) -> None:
    """train_loss every step, val_loss every 10 steps, ending at `final`; 20k tokens per step; with
    `depth`, val_loss@N = val_loss + depth[N] at each evaluation."""
    extra = {f"val_loss@{n}": offset for n, offset in (depth or {}).items()}
    for step in range(1, steps + 1):
        tok, wall = step * 20_000, step * secs_per_step
        s.add(
            schema.Metric(
                job_id=job_id,
                key="train_loss",
                step=step,
                tokens=tok,
                wall_s=wall,
                value=final - 0.1 + 2.0 / step,
            )
        )
        if step % 10 == 0 or step == steps:
            val = final + (steps - step) * 0.01
            for key, offset in {"val_loss": 0.0, **extra}.items():
                s.add(
                    schema.Metric(
                        job_id=job_id, key=key, step=step, tokens=tok, wall_s=wall, value=val + offset
                    )
                )
    for key, offset in {"val_loss": 0.0, **extra}.items():
        s.add(
            schema.LatestMetric(
                job_id=job_id,
                key=key,
                step=steps,
                tokens=steps * 20_000,
                wall_s=steps * secs_per_step,
                value=final + offset,
            )
        )


@pytest.fixture(scope="session")
def fixture_db(tmp_path_factory):
    """(url, path) of the filled fixture database."""
    path = tmp_path_factory.mktemp("dashboard_db") / "looplab.db"
    url = build_fixture_db(path)
    return url, path


@pytest.fixture(scope="session", params=BACKENDS)
def fixture_url(request, tmp_path_factory):
    """URL of the filled fixture database, on SQLite and on PostgreSQL (ids [sqlite] / [postgresql]): the
    tests of orchestrator.frames and of the pages (AppTest) run on both. The browser and launch tests keep
    `fixture_db`, SQLite only (a Streamlit server and a browser per backend would double minutes)."""
    if request.param == "sqlite":
        yield request.getfixturevalue("fixture_db")[0]
        return
    server = request.getfixturevalue("pg_server")
    if server is None:
        pytest.skip("no PostgreSQL server here (apt-get install -y postgresql)")
    databases = Databases("postgresql", tmp_path_factory.mktemp("dashboard_pg"), server)
    yield build_fixture_db(databases.new())
    databases.close()


@pytest.fixture(scope="session")
def empty_db(tmp_path_factory):
    """(url, path) of a migrated database with no job."""
    from looplab.orchestrator.db import dispose_all, engine, resolve_url

    path = tmp_path_factory.mktemp("dashboard_empty") / "looplab.db"
    url = resolve_url(str(path))
    engine(url)
    dispose_all()
    return url, path


# ---------------------------------------------------------------- one server, one browser


@pytest.fixture(scope="session")
def dashboard_server(fixture_db):
    """The session's Streamlit server (its base URL), serving the fixture database; a test of another
    database opens its page with `?db=` (tests.dashboard.browser.page_url)."""
    from tests.dashboard.browser import require_chromium, streamlit_server

    require_chromium()  # a server nobody can look at is not started
    with streamlit_server(fixture_db[0]) as base:
        yield base
