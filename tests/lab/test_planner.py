"""The planner: estimates from known throughputs (hand-computed), the source of each row, the FLOP-model
fallback, memory flagging, the finish time on 2 parallel slots, and `looplab plan` writing nothing.
No Ray and no calibration run: the database is filled by hand and calibrations are given."""

from __future__ import annotations

import dataclasses
import json
import time

import pytest
import sqlalchemy as sa

from looplab import Grid, Queue
from looplab.lab.cli import main
from looplab.lab.planner import Calibration, ForecastJob, simulate
from looplab.model.errors import ConfigError
from looplab.model.flops import step_flops, training_flops
from looplab.model.presets import preset
from tests.orchestrator import fake_jobs

TABLES = ("grids", "jobs", "job_deps", "attempts", "train_results", "decode_benches", "metrics")
# lean tiny at batch 4 x seq_len 32: 128 tokens per step; one evaluation and one checkpoint per run
TRAIN = {
    "recipe": "lean",
    "size": "tiny",
    "batch_size": 4,
    "seq_len": 32,
    "eval_every": 1000,
    "ckpt_every": 1000,
    "eval_tokens": 64,
    "data": {"corpus": "offline", "tokenizer": "byte"},
}
# the finished run: 10 steps, 12.8 s training (100 tokens/s), 2 s evaluation, 0.5 s checkpoint, 18.3 s wall
FINISHED = {
    "steps": 10,
    "tokens": 1280,
    "train_seconds": 12.8,
    "tokens_per_s": 100.0,
    "eval_seconds": 2.0,
    "ckpt_seconds": 0.5,
}
WALL = 18.3
CAL = Calibration(device="cpu", flops_per_s=1e9, decode_layer_s=1e-4, save_bytes_per_s=1e12, startup_s=2.0)


@pytest.fixture
def q(tmp_path, monkeypatch):
    monkeypatch.setenv("LOOPLAB_CACHE", str(tmp_path / "cache"))  # no cached calibration of this machine
    return Queue(db=tmp_path / "q.db", artifacts=tmp_path / "art")


def exec_sql(q: Queue, sql: str, **params) -> None:
    with q.eng.begin() as conn:
        conn.execute(sa.text(sql), params)


def counts(q: Queue) -> dict[str, int]:
    with q.eng.connect() as conn:
        return {t: conn.execute(sa.text(f"SELECT COUNT(*) FROM {t}")).scalar_one() for t in TABLES}


def finished_run(q: Queue, seed: int = 0) -> int:
    """A lean tiny run of 1280 tokens marked succeeded with FINISHED's numbers."""
    (job_id,) = q.submit(Grid(f"done{seed}", base={**TRAIN, "seed": seed, "tokens": 1280}))
    exec_sql(
        q,
        "UPDATE jobs SET status='succeeded', attempts=1, started_at=100, finished_at=:end WHERE id=:j",
        j=job_id,
        end=100 + WALL,
    )
    exec_sql(
        q,
        "INSERT INTO attempts (job_id, n, started_at, ended_at, outcome) VALUES (:j, 1, 100, :end, "
        "'succeeded')",
        j=job_id,
        end=100 + WALL,
    )
    cols = ", ".join(FINISHED)
    exec_sql(
        q,
        f"INSERT INTO train_results (job_id, {cols}, device) VALUES (:j, "
        f"{', '.join(':' + c for c in FINISHED)}, 'cpu')",
        j=job_id,
        **FINISHED,
    )
    return job_id


def test_measured_estimates_totals_and_finish_time_on_two_slots(q):
    finished_run(q)
    # a job already queued, with the estimate stored at its submission: it goes first
    (ahead,) = q.submit(Grid("ahead", base={**TRAIN, "recipe": "plain", "tokens": 1280}))
    exec_sql(q, "UPDATE jobs SET planned_seconds=10.0, planned_source='measured' WHERE id=:j", j=ahead)
    before = counts(q)
    report = q.plan(
        Grid("more", base={**TRAIN, "tokens": 2560}, sweep={"seed": [1, 2, 3]}),
        num_cpus=2,
        num_gpus=0,
        calibration=None,
    )
    assert counts(q) == before  # planning writes nothing
    new = report.new_jobs()
    assert [j.estimate.source for j in new] == ["measured"] * 3
    # 3 s start-up (18.3 - 12.8 - 2 - 0.5) + 2560 tokens / 100 tokens/s + the same evaluation and checkpoint
    for job in new:
        assert job.estimate.seconds == pytest.approx(3.0 + 25.6 + 2.0 + 0.5)
        assert job.estimate.train_s == pytest.approx(25.6)
    # 2 slots: the queued job (10 s) and the first new one start at 0; the second at 10, the third at 31.1,
    # both in a worker process an earlier job left idle: without the 3 s start-up (28.1 s), ending at
    # 38.1 and 59.2
    assert [(j.key, j.start_s) for j in report.jobs] == [
        (f"#{ahead}", 0.0),
        ("+0", 0.0),
        ("+1", pytest.approx(10.0)),
        ("+2", pytest.approx(31.1)),
    ]
    assert [j.end_s for j in report.jobs] == pytest.approx([10.0, 31.1, 38.1, 59.2])
    assert report.makespan_s == pytest.approx(59.2)
    assert report.totals()["all"] == pytest.approx(10.0 + 3 * 31.1)
    assert report.finish_at == pytest.approx(report.now + 59.2)
    text = report.text()
    assert (
        "measured" in text and "3 new job(s) behind 1 queued/running" in text and "estimated finish" in text
    )


def test_other_batch_size_falls_back_to_the_flop_model(q):
    finished_run(q)
    grid = Grid("b8", base={**TRAIN, "batch_size": 8, "tokens": 2560, "seed": 4})
    (job,) = q.plan(grid, num_cpus=1, num_gpus=0, calibration=CAL).new_jobs()
    # the FLOP model, times this machine's factor: the finished run (batch 4) trained at 100 tokens/s where
    # the FLOP model says 1e9 FLOP/s / its FLOPs per token
    assert job.estimate.source == "flop_fit"
    cfg = preset("lean", "tiny", seq_len=32)
    factor = 1e9 / training_flops(cfg, 4).total / 100.0
    assert job.estimate.factor.value == pytest.approx(factor, rel=1e-3) and job.estimate.factor.jobs == 1
    steps = 2560 // (8 * 32)
    train_flops = steps * 8 * 32 * training_flops(cfg, 8).total
    # one evaluation: 64 tokens at the trained loop count (4) and at 1, 2, 8 (the default eval loops)
    eval_flops = 64 * sum(step_flops(cfg, n).forward for n in (4, 1, 2, 8))
    assert job.estimate.flops == pytest.approx(train_flops + eval_flops)
    # start-up: the finished run's overhead (3 s) beats the calibration's; checkpoints cost ~nothing here
    assert job.estimate.seconds == pytest.approx(3.0 + factor * (train_flops + eval_flops) / 1e9, rel=1e-3)


def test_source_per_row_without_history_or_calibration(q):
    grid = Grid(
        "g",
        base={**TRAIN, "tokens": 1280},
        sweep={"seed": [0]},
        then=["depth_sweep", "decode_bench"],
        follow={"decode_bench": {"context_lens": [64], "batch_sizes": [1], "warmup": 1, "steps": 3}},
    )
    with_cal = q.plan(grid, num_cpus=2, num_gpus=0, calibration=CAL).new_jobs()
    assert [(j.kind, j.estimate.source) for j in with_cal] == [
        ("train", "flop_model"),
        ("depth_sweep", "flop_model"),
        ("decode_bench", "flop_model"),
    ]
    train, sweep, decode = (j.estimate for j in with_cal)
    assert train.startup_s == CAL.startup_s and train.seconds > CAL.startup_s
    # the depth sweep waits for its train job, the exclusive decode bench for an empty node: each starts
    # in a worker process other jobs left idle, so no start-up is charged
    assert sweep.startup_s == decode.startup_s == 0.0 and sweep.seconds > 0 and decode.seconds > 0
    alone = Grid(
        "alone",
        job="decode_bench",
        base={"recipe": "lean", "size": "tiny", **grid.follow["decode_bench"]},
        resources={"exclusive": False},  # it may start first, in a fresh worker process
    )
    (fresh,) = (j.estimate for j in q.plan(alone, num_cpus=2, num_gpus=0, calibration=CAL).new_jobs())
    assert fresh.startup_s == CAL.startup_s and fresh.seconds == pytest.approx(decode.seconds + CAL.startup_s)
    assert [j.exclusive for j in with_cal] == [False, False, True]  # decode benches: the node to themselves
    without = q.plan(grid, num_cpus=2, num_gpus=0, calibration=None)
    assert {j.estimate.source for j in without.new_jobs()} == {"unknown"}
    assert all(j.estimate.seconds is None and j.estimate.flops for j in without.new_jobs())
    assert "at the earliest" in without.text() and "no estimate for 3 job(s)" in without.text()


def test_time_budget_and_iso_time_copy_the_reference_training_time(q):
    finished_run(q)
    ref = Grid("ref", base={**TRAIN, "tokens": 2560, "seed": 7})
    iso = Grid("iso", base={**TRAIN, "recipe": "lean", "seed": 8, "budget": {"match_time_of": {"seed": 7}}})
    ref_job, iso_job = q.plan([ref, iso], num_cpus=2, num_gpus=0, calibration=None).new_jobs()
    assert ref_job.estimate.train_s == pytest.approx(25.6)
    # the follower trains 25.6 s after a calibration of max(6 steps, 5 % of 25.6 s) + 2 warm-up steps
    step_s = 128 / 100.0
    steps = int(25.6 / step_s)
    assert steps == 20
    assert iso_job.estimate.seconds == pytest.approx(3.0 + 8 * step_s + 25.6 + 2.0 + 0.5)
    assert ref_job.exclusive and iso_job.exclusive  # an iso-time pair: timings that are compared
    assert iso_job.start_s == pytest.approx(ref_job.end_s)


def test_memory_flagged_against_the_device(q):
    grid = Grid("m", base={**TRAIN, "tokens": 1280})
    (small,) = q.plan(grid, num_cpus=1, num_gpus=0, calibration=CAL, device_memory_bytes=1e5).new_jobs()
    (roomy,) = q.plan(grid, num_cpus=1, num_gpus=0, calibration=CAL, device_memory_bytes=1e12).new_jobs()
    assert small.fits is False and roomy.fits is True
    cfg = preset("lean", "tiny", seq_len=32)
    from looplab.model.counts import param_count

    params = param_count(cfg)["total"]
    assert small.estimate.peak_mem_bytes > 16 * params  # weights, gradients and optimizer state at least
    (bigger,) = q.plan(
        Grid("m8", base={**TRAIN, "batch_size": 8, "tokens": 1280}),
        num_cpus=1,
        num_gpus=0,
        calibration=CAL,
        device_memory_bytes=1e12,
    ).new_jobs()
    assert bigger.estimate.peak_mem_bytes > small.estimate.peak_mem_bytes  # activations grow with the batch
    text = q.plan(grid, num_cpus=1, num_gpus=0, calibration=CAL, device_memory_bytes=1e5).text()
    assert "WILL NOT FIT" in text and "will not fit their device's memory: +0" in text


def test_plan_dedups_a_shared_decode_bench_and_marks_present_jobs(q):
    grid = Grid(
        "d",
        base={**TRAIN, "tokens": 1280},
        sweep={"seed": [0, 1]},
        then=["decode_bench"],
        follow={"decode_bench": {"context_lens": [64], "batch_sizes": [1], "warmup": 1, "steps": 3}},
    )
    assert [j.kind for j in q.plan(grid, calibration=CAL, num_cpus=2, num_gpus=0).new_jobs()] == [
        "train",
        "decode_bench",
        "train",
    ]
    q.submit(Grid("d", base={**TRAIN, "tokens": 1280, "seed": 0}))
    report = q.plan(grid, calibration=CAL, num_cpus=2, num_gpus=0)
    assert [(j.kind, j.status) for j in report.jobs] == [
        ("train", "queued"),
        ("decode_bench", "new"),
        ("train", "new"),
    ]


def test_schedule_keeps_exclusive_jobs_alone_and_respects_priority():
    def job(key, seconds, exclusive=False, priority=0, deps=()):
        return ForecastJob(
            key,
            "train",
            key,
            "new",
            estimate=None,
            priority=priority,
            order=int(key[1:]),
            deps=list(deps),
            exclusive=exclusive,
            remaining_s=seconds,
        )

    # +1 (exclusive) becomes ready at 10, while +2 still runs
    jobs = [job("+0", 10), job("+1", 4, exclusive=True, deps=["+0"]), job("+2", 20), job("+3", 10)]
    assert simulate(jobs, cpus=2, gpus=0) == pytest.approx(24.0)
    # equal priority: +3 fills the gap; the exclusive job starts when the node is empty, alone
    assert {j.key: j.start_s for j in jobs} == {"+0": 0.0, "+2": 0.0, "+3": 10.0, "+1": 20.0}
    jobs = [
        job("+0", 10),
        job("+1", 4, exclusive=True, priority=1, deps=["+0"]),
        job("+2", 20),
        job("+3", 10),
    ]
    assert simulate(jobs, cpus=2, gpus=0) == pytest.approx(34.0)
    # higher priority: once it is ready the node drains for it, and nothing starts beside it
    assert {j.key: j.start_s for j in jobs} == {"+0": 0.0, "+2": 0.0, "+1": 20.0, "+3": 24.0}


def test_cli_plan_prints_and_writes_nothing(q, tmp_path, capsys):
    finished_run(q)
    before = counts(q)
    f = tmp_path / "study.py"
    f.write_text(
        f"from looplab import Grid\nTRAIN = {TRAIN!r}\n"
        "g = Grid('study', base={**TRAIN, 'tokens': 2560}, sweep={'seed': [1, 2]})\n"
    )
    assert main(["--db", q.url, "plan", str(f), "--num-cpus", "2", "--num-gpus", "0", "--no-calibrate"]) == 0
    out = capsys.readouterr().out
    assert out.count("measured") == 2 and "estimated finish: in 0m31s" in out
    assert counts(q) == before
    assert main(["--db", q.url, "plan", str(f), "--num-cpus", "0", "--no-calibrate"]) == 2
    assert "--num-cpus" in capsys.readouterr().err
    assert main(["--db", q.url, "status", "--num-gpus", "-1"]) == 2  # the same check on status
    assert "--num-gpus" in capsys.readouterr().err


def test_submit_stores_the_estimate_and_status_shows_the_finish(q, capsys):
    finished_run(q)
    ids = q.submit(Grid("s", base={**TRAIN, "tokens": 2560}, sweep={"seed": [1, 2]}))
    with q.eng.connect() as conn:
        stored = conn.execute(
            sa.text("SELECT planned_seconds, planned_source FROM jobs WHERE id IN (:a, :b)"),
            {"a": ids[0], "b": ids[1]},
        ).all()
    assert [(pytest.approx(s), src) for s, src in stored] == [(pytest.approx(31.1), "measured")] * 2
    assert main(["--db", q.url, "status", "--num-cpus", "1", "--num-gpus", "0"]) == 0
    assert "queue: 2 job(s) left, estimated finish in 1m02s" in capsys.readouterr().out


def test_a_job_the_schedule_starts_warm_is_stored_without_the_start_up(q, monkeypatch):
    """On two CPUs the third of three equal jobs starts in a worker process one of the first two left
    idle: its stored plan is the estimate less the start-up it does not pay (charging every job a fresh
    process's start-up put a grid's train jobs at half their plan, docs/planning.md)."""
    monkeypatch.setattr("looplab.lab.planner.jobs.os.cpu_count", lambda: 2)  # as a local run gets them
    finished_run(q)
    grid = Grid("s", base={**TRAIN, "tokens": 2560}, sweep={"seed": [1, 2, 3]})
    est = q.plan(grid, num_cpus=2, num_gpus=0, calibration=None).new_jobs()[0].estimate
    assert est.startup_s > 1.0  # the finished run's overhead, measured
    ids = q.submit(grid)
    with q.eng.connect() as conn:
        stored = dict(
            conn.execute(
                sa.select(sa.column("id"), sa.column("planned_seconds"))
                .select_from(sa.table("jobs"))
                .where(sa.column("id").in_(ids))
            ).all()
        )
    assert [stored[i] for i in ids] == [
        pytest.approx(est.seconds),
        pytest.approx(est.seconds),
        pytest.approx(est.seconds - est.startup_s),
    ]


def test_exclusive_resource_is_validated_and_iso_pairs_are_exclusive(tmp_path):
    fq = Queue(db=tmp_path / "f.db", kinds=fake_jobs)
    with pytest.raises(ConfigError, match=r"resources.exclusive: expected true or false"):
        fq.submit(Grid("x", job="noop", resources={"exclusive": "yes"}))
    main_grid = Grid("main", base={"recipe": "lean", "tokens": 100}, sweep={"seed": [0, 1]})
    iso = Grid("iso", base={"recipe": "parcae", "budget": {"match_time_of": {"recipe": "lean", "seed": 0}}})
    opted = Grid("opt", job="noop", resources={"exclusive": False})
    ref, other, follower, noop = fq.submit([main_grid, iso, opted])
    with fq.eng.connect() as conn:
        res = dict(conn.execute(sa.text("SELECT id, resources FROM jobs")).all())
    assert json.loads(res[ref]) == {"exclusive": True} and json.loads(res[follower]) == {"exclusive": True}
    assert res[other] is None and json.loads(res[noop]) == {"exclusive": False}


def test_planned_against_actual_and_contention_flags(q):
    import pandas as pd

    from looplab.analysis import timing
    from looplab.orchestrator.frames import planned_vs_actual

    finished_run(q)
    (job,) = q.submit(Grid("s", base={**TRAIN, "tokens": 2560, "seed": 1}))  # planned 31.1 s (measured)
    exec_sql(q, "UPDATE jobs SET status='succeeded' WHERE id=:j", j=job)
    exec_sql(
        q,
        "INSERT INTO attempts (job_id, n, started_at, ended_at, outcome) VALUES (:j, 1, 0, 46.65, "
        "'succeeded')",
        j=job,
    )
    exec_sql(
        q,
        "INSERT INTO train_results (job_id, steps, tokens, train_seconds, concurrent_jobs) "
        "VALUES (:j, 20, 2560, 40, 1)",
        j=job,
    )
    df = planned_vs_actual(q.eng)
    assert list(df["job_id"]) == [job]  # the finished run of the fixture had no estimate stored
    row = df.iloc[0]
    assert row["source"] == "measured" and row["grid"] == "s" and row["concurrent_jobs"] == 1
    assert row["ratio"] == pytest.approx(46.65 / 31.1)

    assert timing.contended([0, 0]) is False and timing.contended([0, 2]) is True
    assert timing.contended([None, 0]) is None and timing.contended([float("nan"), 3]) is True
    runs = pd.DataFrame({"job_id": [1, 2, 3], "concurrent_jobs": [0, 0, 2]})
    pairs = pd.DataFrame({"job_id": [2, 3], "ref_job_id": [1, 1]})
    assert list(timing.mark_pairs(pairs, runs)["contended"]) == [False, True]
    where = {"variant_id": "v", "size": "tiny", "context_len": 64, "device": "cpu", "dtype": "float32"}
    rows = pd.DataFrame(
        [
            {**where, "batch_size": 1, "concurrent_jobs": 0},
            {**where, "batch_size": 4, "concurrent_jobs": 1},
            {**where, "batch_size": 4, "concurrent_jobs": 0},
        ]
    )
    table = pd.DataFrame(
        [{**where, "batch_size": 1, "ms_per_token": 2.0}, {**where, "batch_size": 4, "ms_per_token": 3.0}]
    )
    assert list(timing.mark_decode(table, rows)["contended"]) == [False, True]


def test_dashboard_shows_plan_error_and_contended_decode_timings(q, monkeypatch):
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    finished_run(q)
    (job,) = q.submit(Grid("s", base={**TRAIN, "tokens": 2560, "seed": 1}))
    exec_sql(q, "UPDATE jobs SET status='succeeded' WHERE id=:j", j=job)
    exec_sql(
        q,
        "INSERT INTO attempts (job_id, n, started_at, ended_at, outcome) VALUES (:j, 1, 0, 62.2, "
        "'succeeded')",
        j=job,
    )
    (bench,) = q.submit(Grid("d", job="decode_bench", base={"recipe": "lean", "size": "tiny"}))
    exec_sql(q, "UPDATE jobs SET status='succeeded' WHERE id=:j", j=bench)
    exec_sql(
        q,
        "INSERT INTO decode_benches (job_id, arch, size, context_len, batch_size, ms_per_token, "
        "kv_cache_mb, device, dtype, cuda_graph, concurrent_jobs) VALUES (:j, 'lean', 'tiny', 128, 1, "
        "2.0, 0.5, 'cpu', 'float32', 0, 1)",
        j=bench,
    )
    monkeypatch.setenv("LOOPLAB_DB", q.url)
    app = str(Path(__file__).resolve().parents[2] / "dashboard" / "app.py")
    at = AppTest.from_file(app, default_timeout=60)
    at.run()
    at.switch_page("views/plan.py").run()
    assert not at.exception, [e.message for e in at.exception]
    jobs = next(d.value for d in at.dataframe if "ratio" in d.value.columns)
    assert list(jobs["job_id"]) == [job] and jobs["ratio"].iloc[0] == pytest.approx(2.0)
    summary = next(d.value for d in at.dataframe if "median_ratio" in d.value.columns)
    assert summary["source"].tolist() == ["measured"] and summary["median_ratio"].iloc[0] == pytest.approx(
        2.0
    )
    at.switch_page("views/decode.py").run()
    assert not at.exception, [e.message for e in at.exception]
    decode = next(d.value for d in at.dataframe if "ms_ratio" in d.value.columns)
    assert decode["contended"].tolist() == [True]
    assert any("beside other jobs" in w.value for w in at.warning)


def test_sweep_and_decode_bench_scale_finished_runs_of_their_variant_by_flops():
    """A depth sweep or decode bench like a finished one of the same variant (same device for decode
    benches) takes its wall time scaled by the ratio of FLOP-model times (a sweep's: of FLOPs at one
    width); without one, the FLOP model decides."""
    from looplab.lab.planner import TimeModel
    from looplab.lab.planner.history import variant_of

    planner = TimeModel(None, CAL)
    sweep, past_sweep = {"loops": [1, 2, 4]}, {"loops": [1]}
    bench = {"recipe": "lean", "size": "tiny", "context_lens": [64], "batch_sizes": [2], "steps": 3}
    past_bench = {**bench, "batch_sizes": [1]}
    assert planner.estimate("depth_sweep", sweep, trained=("train", TRAIN)).source == "flop_model"
    assert planner.estimate("decode_bench", bench).source == "flop_model"
    planner.history = [
        {
            "kind": "depth_sweep",
            "variant_id": variant_of(TRAIN, "train"),
            "spec": past_sweep,
            "trained": ("train", TRAIN),
            "wall": 10.0,
            "device": "cpu",
        },
        {
            "kind": "decode_bench",
            "variant_id": variant_of(bench, "decode_bench"),
            "spec": past_bench,
            "wall": 4.0,
            "device": "cpu",
        },
        {
            "kind": "decode_bench",
            "variant_id": variant_of(bench, "decode_bench"),
            "spec": past_bench,
            "wall": 999.0,
            "device": "cuda",
        },
    ]
    trained = ("train", TRAIN)
    sweep_ratio = (
        planner.forward_cost("depth_sweep", sweep, trained).flops
        / planner.forward_cost("depth_sweep", past_sweep, trained).flops
    )
    # a decode bench at another batch: by the FLOP model's time (each step's fixed cost per layer
    # application is the same at batch 1 and 2), not by FLOPs, which doubles
    bench_flops_ratio = (
        planner.forward_cost("decode_bench", bench).flops
        / planner.forward_cost("decode_bench", past_bench).flops
    )
    bench_ratio = planner._forward_seconds(planner.forward_cost("decode_bench", bench)) / (
        planner._forward_seconds(planner.forward_cost("decode_bench", past_bench))
    )
    assert sweep_ratio > 1 and 1 < bench_ratio < bench_flops_ratio
    estimate = planner.estimate("depth_sweep", sweep, trained=trained)
    assert (estimate.source, estimate.seconds) == ("finished", pytest.approx(10.0 * sweep_ratio))
    estimate = planner.estimate("decode_bench", bench)
    assert (estimate.source, estimate.seconds) == ("finished", pytest.approx(4.0 * bench_ratio))
    assert TimeModel(None, None).estimate("decode_bench", bench).source == "unknown"


def test_a_kind_is_priced_by_its_declaration_alone(monkeypatch):
    """A kind the planner has never heard of, declared with the depth sweep's cost model, is priced as a
    depth sweep on the train job it follows (TRAIN has no budget yet, as a match-time one: its model is
    still known); declared without one, by its finished jobs' wall time."""
    from looplab.lab.planner import TimeModel
    from looplab.workers import jobs

    sweep, trained = {"loops": [1, 2]}, ("train", TRAIN)
    monkeypatch.setitem(jobs.KINDS, "probe", dataclasses.replace(jobs.KINDS["depth_sweep"], module=__name__))
    planner = TimeModel(None, CAL)
    probe = planner.estimate("probe", sweep, trained=trained)
    real = planner.estimate("depth_sweep", sweep, trained=trained)
    assert probe.source == "flop_model" and (probe.seconds, probe.flops) == (real.seconds, real.flops)
    assert planner.estimate("probe", sweep).source == "unknown"  # about no known checkpoint: nothing to go on
    assert (
        planner.estimate("probe", sweep, trained=("import", TRAIN)).source == "unknown"
    )  # not priced as training

    monkeypatch.setitem(jobs.KINDS, "probe", dataclasses.replace(jobs.KINDS["depth_sweep"], cost=None))
    planner.history = [{"kind": "probe", "wall": w, "spec": sweep} for w in (4.0, 6.0, 9.0)]
    estimate = planner.estimate("probe", sweep, trained=trained)
    assert (estimate.source, estimate.seconds) == ("finished", 6.0)


def test_flop_model_splits_gradient_free_rounds_and_adds_the_optimizer_step(q):
    """parcae's gradient-free rounds run at the forward rate, the rest at the training rate, and every
    step pays the optimizer's per-parameter cost: hand-computed from the FLOP breakdown."""
    from looplab.model.counts import param_count
    from looplab.model.flops import BACKWARD_FACTOR

    cal = dataclasses.replace(CAL, forward_flops_per_s=3e9, opt_s_per_param={"parcae": 2e-8, "adamw": 1e-8})
    spec = {**TRAIN, "recipe": "parcae", "batch_size": 8, "tokens": 2560, "seed": 0}
    (job,) = q.plan(Grid("p", base=spec), num_cpus=1, num_gpus=0, calibration=cal).new_jobs()
    cfg = preset("parcae", "tiny", seq_len=32)
    flops = training_flops(cfg, 8)
    grad = flops.backward * (1 + 1 / BACKWARD_FACTOR)  # the forward and backward of the parts with autograd
    no_grad = flops.total - grad
    assert 0 < no_grad < flops.forward  # parcae runs rounds without autograd; lean would have none
    steps, tokens_per_step = 2560 // (8 * 32), 8 * 32
    step_s = tokens_per_step * (grad / 1e9 + no_grad / 3e9) + 2e-8 * param_count(cfg)["total"]
    eval_flops = 64 * sum(step_flops(cfg, n).forward for n in (8, 1, 2, 4))
    assert job.estimate.train_s == pytest.approx(steps * step_s, rel=1e-6)
    assert job.estimate.seconds == pytest.approx(CAL.startup_s + steps * step_s + eval_flops / 3e9, rel=1e-4)
    # an optimizer the calibration did not time costs the median of those it did
    assert cal.optimizer_s("torch_muon", 1000) == pytest.approx(1.5e-8 * 1000)


def test_plan_on_an_idle_queue_includes_the_driver_start(q):
    cal = dataclasses.replace(CAL, driver_start_s=4.0)
    grid = Grid("d", base={**TRAIN, "tokens": 1280}, sweep={"seed": [0, 1]})
    without = q.plan(grid, num_cpus=2, num_gpus=0, calibration=CAL)
    report = q.plan(grid, num_cpus=2, num_gpus=0, calibration=cal)
    assert report.driver_start_s == 4.0
    assert report.makespan_s == pytest.approx(without.makespan_s + 4.0)
    assert [j.start_s for j in report.new_jobs()] == [4.0, 4.0]
    assert "of which 4 s to start the queue" in report.text()
    # a queue with a running job has its driver up: no start-up added
    (running,) = q.submit(Grid("r", base={**TRAIN, "recipe": "plain", "tokens": 1280}))
    exec_sql(
        q, "UPDATE jobs SET status='running', attempts=1, started_at=:t WHERE id=:j", j=running, t=time.time()
    )
    assert q.plan(grid, num_cpus=2, num_gpus=0, calibration=cal).driver_start_s == 0.0


def test_cached_calibration_expires_and_warns_when_measured_under_load(q):
    from looplab.lab.planner import local_machine as planner

    planner._save_calibration(dataclasses.replace(CAL, host="h", measured_at=time.time() - 60, load=2.5))
    cached = planner.cached_calibration("cpu")
    assert cached is not None and cached.contended and cached.flops_per_s == CAL.flops_per_s
    report = q.plan(Grid("w", base={**TRAIN, "tokens": 1280}), num_cpus=1, num_gpus=0, calibration="cached")
    assert "measured under load (2.5 per CPU)" in report.text() and "--recalibrate" in report.text()
    planner._save_calibration(
        dataclasses.replace(CAL, measured_at=time.time() - planner.CALIBRATION_MAX_AGE_S - 1)
    )
    assert planner.cached_calibration("cpu") is None  # a week old: measured again by "auto"
    quiet = q.plan(Grid("w", base={**TRAIN, "tokens": 1280}), num_cpus=1, num_gpus=0, calibration=CAL)
    assert "measured under load" not in quiet.text()


def test_schedule_reserves_for_a_higher_priority_job_that_does_not_fit_yet():
    """A 2-CPU job of priority 1 waits for a running 1-CPU job; the 1-CPU jobs of priority 0 behind it
    may not take the freed CPU (the scheduler's reservation), so it starts as soon as the CPU is free."""
    running = ForecastJob(
        key="#1",
        kind="train",
        what="r",
        status="running",
        estimate=None,
        priority=0,
        order=1,
        cpus=1,
        remaining_s=5.0,
    )
    big = ForecastJob(
        key="+0",
        kind="train",
        what="big",
        status="new",
        estimate=None,
        priority=1,
        order=2,
        cpus=2,
        remaining_s=10.0,
    )
    small = [
        ForecastJob(
            key=f"+{i}",
            kind="train",
            what="s",
            status="new",
            estimate=None,
            priority=0,
            order=2 + i,
            cpus=1,
            remaining_s=3.0,
        )
        for i in (1, 2, 3)
    ]
    makespan = simulate([running, big, *small], cpus=2, gpus=0)
    assert big.start_s == 5.0  # not delayed by the small ones
    assert [j.start_s for j in small] == [15.0, 15.0, 18.0]
    assert makespan == 21.0


def test_sweep_flops_count_the_geometry_and_interaction_forwards():
    """Per depth n: the loss forward plus the geometry forward (no head) of the eval tokens; per
    interaction depth m: m headless forwards of the interaction tokens (one plain, m - 1 skipping a round)."""
    from looplab.lab.planner import TimeModel
    from looplab.model.flops import head_flops

    cfg = preset("lean", "tiny", seq_len=32)
    fwd = {n: step_flops(cfg, n).forward for n in (1, 2, 3, 4)}
    head = head_flops(cfg)
    planner = TimeModel(None, CAL)
    spec = {"loops": [1, 2, 4], "eval_tokens": 128, "interaction_loops": [3], "interaction_tokens": 64}
    flops = planner.forward_cost("depth_sweep", spec, ("train", TRAIN)).flops
    want = 128 * sum(2 * fwd[n] - head for n in (1, 2, 4)) + 64 * 3 * (fwd[3] - head)
    assert flops == pytest.approx(want)
    no_interactions = planner.forward_cost(
        "depth_sweep", {**spec, "interaction_loops": []}, ("train", TRAIN)
    ).flops
    assert no_interactions == pytest.approx(128 * sum(2 * fwd[n] - head for n in (1, 2, 4)))
    # the test split adds one loss forward of as many tokens per loop count
    with_test = planner.forward_cost("depth_sweep", {**spec, "test_split": True}, ("train", TRAIN)).flops
    assert with_test == pytest.approx(want + 128 * sum(fwd[n] for n in (1, 2, 4)))


def test_calibrated_rates_interpolate_between_widths_and_never_extrapolate(q):
    cal = dataclasses.replace(CAL, width_rates=[[64, 1e9, 2e9], [128, 4e9, 8e9]])
    assert cal.rates(64) == (1e9, 2e9) and cal.rates(128) == (4e9, 8e9)
    assert cal.rates(32) == (1e9, 2e9) and cal.rates(768) == (4e9, 8e9)  # the nearest measured width
    assert cal.rates(64 * 2**0.5) == (pytest.approx(2e9), pytest.approx(4e9))  # log-log halfway
    assert CAL.rates(512) == (1e9, 1e9)  # one rate: the training one for both
    # a small (d_model 128) lean job is timed at the wide rate
    spec = {**TRAIN, "size": "small", "seq_len": 32, "batch_size": 8, "tokens": 2560, "seed": 0}
    (job,) = q.plan(Grid("wide", base=spec), num_cpus=1, num_gpus=0, calibration=cal).new_jobs()
    from looplab.model.flops import BACKWARD_FACTOR
    from looplab.orchestrator.variants import resolve

    cfg = resolve("train", spec).cfg  # the queue's model: the byte tokenizer sets the vocabulary
    assert cfg.d_model == 128
    flops = training_flops(cfg, 8)
    grad = flops.backward * (1 + 1 / BACKWARD_FACTOR)
    steps, per_step = 2560 // (8 * 32), 8 * 32
    want = steps * per_step * (grad / 4e9 + (flops.total - grad) / 8e9)
    assert job.estimate.train_s == pytest.approx(want)


def test_follow_ups_of_a_train_job_are_described_by_its_model(q):
    """A depth sweep's and an eval's row say which trained model they are about (the eval spec itself
    names none): both follow-ups that read the train job's checkpoint are handled alike."""
    grid = Grid("f", base={**TRAIN, "tokens": 1280, "seed": 3}, then=["depth_sweep", "eval"])
    jobs = q.plan(grid, num_cpus=2, num_gpus=0, calibration=CAL).new_jobs()
    assert [j.kind for j in jobs] == ["train", "depth_sweep", "eval"]
    assert jobs[0].what and {j.what for j in jobs} == {jobs[0].what}


def test_eval_cost_counts_exactly_the_forwards_the_scorer_runs():
    """An eval job's FLOPs by its cost model (workers/evaluate/eval.py) against the (batch, width) of every forward
    the real scorer runs on a tiny model with the byte tokenizer: the same sum, batch by batch."""
    import torch

    from looplab.families.looped.model import LoopedLM
    from looplab.workers.data.tokenizer import Tokenizer
    from looplab.workers.evaluate import eval as eval_job
    from looplab.workers.tasks.likelihood import LoopedScorer
    from looplab.workers.tasks.scoring import score_items
    from looplab.workers.train.cost import cost as train_cost
    from looplab.workers.train.spec import Spec as TrainSpec

    spec = eval_job.Spec.from_dict(
        {"tasks": ["deduction", "kinship"], "n_per_subset": 1, "loops": [1, 3], "batch_size": 5, "limit": 7}
    )
    # the train job it follows: seq_len shorter than most items (the cut to seq_len is counted too)
    trained = train_cost(TrainSpec.from_dict({**TRAIN, "seq_len": 48, "tokens": 1280}))
    cfg = trained.cfg
    model = LoopedLM(cfg).eval()
    shapes: list[tuple[int, int, int]] = []
    loops_now = []
    model.register_forward_pre_hook(lambda _m, args: shapes.append((*args[0].shape, loops_now[-1])))
    for loops in spec.loops:
        loops_now.append(loops)
        scorer = LoopedScorer(
            model, Tokenizer(), loops=loops, h0_seed=0, batch_size=spec.batch_size, device=torch.device("cpu")
        )
        for entry in spec.tasks:
            items = eval_job.GENERATORS[entry].generate(spec.n_per_subset, spec.task_seed)[: spec.limit]
            score_items(items, scorer.loglikelihood)
    ran = sum(b * t * step_flops(cfg, n, seq_len=t).forward for b, t, n in shapes)
    cost = eval_job.cost(spec, trained)
    assert trained.tokenizer == "byte" and cost.flops == pytest.approx(ran, rel=1e-9)
    assert cost.flops > 0 and cost.memory["cpu"] == cost.memory["cuda"]
    # a BPE token holds several bytes of text: shorter sequences, fewer FLOPs
    assert eval_job.cost(spec, dataclasses.replace(trained, tokenizer="bpe")).flops < cost.flops
    assert (
        eval_job.cost(eval_job.Spec.from_dict({"tasks": ["harness:sciq"]}), trained) is None
    )  # unknown items
