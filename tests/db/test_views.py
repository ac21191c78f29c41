"""The people-facing views (`runs`, `curves`, `depth`, `decode`) on a small hand-made database, on SQLite and
on PostgreSQL (`db_url`)."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from looplab.orchestrator.db import engine, readonly_engine, session
from looplab.orchestrator.schema import (
    DecodeBench,
    DepthEval,
    GridRow,
    Job,
    JobDep,
    Metric,
    RoundDelta,
    RoundInteraction,
    TrainResult,
)


def _job(id_: int, kind: str, **kw) -> Job:
    return Job(id=id_, kind=kind, config="{}", config_hash=f"h{id_}", created_at=100.0 + id_, **kw)


@pytest.fixture
def filled(db_url):
    with session(engine(db_url)) as s:
        s.add(GridRow(id=1, name="g1", spec="{}", spec_hash="g", created_at=1.0))
        s.flush()
        s.add_all(
            [
                _job(
                    1,
                    "train",
                    grid_id=1,
                    recipe="lean",
                    size="tiny",
                    seed=0,
                    status="succeeded",
                    budget_tokens=1000,
                    finished_at=1_800_000_000.5,
                ),
                _job(2, "train", grid_id=1, recipe="lean", size="tiny", seed=1, status="running"),
                _job(3, "depth_sweep", grid_id=1, status="succeeded"),
                _job(4, "depth_sweep", grid_id=1, status="succeeded"),
                _job(5, "decode_bench", recipe="lean", size="tiny", status="succeeded"),
            ]
        )
        s.flush()
        s.add_all([JobDep(job_id=3, depends_on=1), JobDep(job_id=4, depends_on=1)])
        s.add(
            TrainResult(
                job_id=1, steps=10, tokens=1000, train_seconds=2.0, tokens_per_s=500.0, final_val_loss=3.0
            )
        )
        # two sweeps of run 1: the best loop count is taken over both
        s.add_all(
            [
                DepthEval(job_id=3, loops=1, val_loss=3.5),
                DepthEval(job_id=3, loops=4, val_loss=3.1),
                DepthEval(job_id=4, loops=8, val_loss=2.9),
                DepthEval(job_id=4, loops=16, val_loss=2.9),  # a tie: the smaller loop count wins
            ]
        )
        s.add_all(
            [
                Metric(job_id=1, key="train_loss", step=i, tokens=100 * i, wall_s=0.1 * i, value=5.0 - i)
                for i in range(3)
            ]
        )
        s.add(
            DecodeBench(
                job_id=5,
                arch="lean",
                size="tiny",
                context_len=128,
                batch_size=1,
                ms_per_token=1.5,
                kv_cache_mb=0.5,
                device="cpu",
                dtype="float32",
                cuda_graph=False,
            )
        )
    return db_url


def _rows(url, sql):
    with readonly_engine(url).connect() as c:
        return [dict(r._mapping) for r in c.execute(text(sql))]


def test_runs_has_one_row_per_training_job_with_best_loops(filled):
    rows = {r["job_id"]: r for r in _rows(filled, "SELECT * FROM runs")}
    assert set(rows) == {1, 2}
    r = rows[1]
    assert (r["grid"], r["recipe"], r["size"], r["seed"], r["status"]) == (
        "g1",
        "lean",
        "tiny",
        0,
        "succeeded",
    )
    assert (r["tokens"], r["steps"], r["train_seconds"], r["tokens_per_s"]) == (1000, 10, 2.0, 500.0)
    assert (r["final_val_loss"], r["budget_tokens"]) == (3.0, 1000)
    assert (r["best_loops"], r["best_loop_val_loss"]) == (8, 2.9)
    assert rows[2]["best_loops"] is None and rows[2]["tokens"] is None


def test_curves_depth_decode(filled):
    curves = _rows(filled, "SELECT * FROM curves ORDER BY step")
    assert [(c["recipe"], c["seed"], c["key"], c["step"], c["value"]) for c in curves] == [
        ("lean", 0, "train_loss", i, 5.0 - i) for i in range(3)
    ]
    depth = _rows(filled, "SELECT * FROM depth ORDER BY sweep_job_id, loops")
    assert [(d["sweep_job_id"], d["train_job_id"], d["recipe"], d["seed"], d["loops"]) for d in depth] == [
        (3, 1, "lean", 0, 1),
        (3, 1, "lean", 0, 4),
        (4, 1, "lean", 0, 8),
        (4, 1, "lean", 0, 16),
    ]
    decode = _rows(filled, "SELECT * FROM decode")
    assert [(d["job_id"], d["status"], d["arch"], d["ms_per_token"]) for d in decode] == [
        (5, "succeeded", "lean", 1.5)
    ]


def test_views_show_iso_times_the_grid_of_every_run_and_recipe_in_decode(filled):
    """A person at `looplab sql` reads times, not epoch floats, and tells runs of two grids apart in
    every view; `decode` calls the recipe `recipe` like every other view (keeping `arch`), and the epoch
    columns stay for programs (lab/export reads `finished_at`)."""
    runs = {r["job_id"]: r for r in _rows(filled, "SELECT * FROM runs")}
    assert (runs[1]["created"], runs[1]["finished"]) == ("1970-01-01T00:01:41Z", "2027-01-15T08:00:00Z")
    assert (runs[1]["created_at"], runs[1]["finished_at"]) == (101.0, 1_800_000_000.5)
    assert runs[2]["finished"] is None  # still running: no time made up
    assert {r["grid"] for r in _rows(filled, "SELECT grid FROM curves")} == {"g1"}
    assert {
        (d["sweep_job_id"], d["grid"]) for d in _rows(filled, "SELECT sweep_job_id, grid FROM depth")
    } == {
        (3, "g1"),
        (4, "g1"),
    }
    for view in ("geometry", "interactions", "tasks", "task_categories", "adaptive", "adaptive_decode"):
        assert "grid" in _rows_columns(filled, view), view
    (bench,) = _rows(filled, "SELECT grid, recipe, arch FROM decode")
    assert bench == {"grid": None, "recipe": "lean", "arch": "lean"}  # a bench outside any grid


def _rows_columns(url, view):
    with readonly_engine(url).connect() as c:
        return list(c.execute(text(f"SELECT * FROM {view} WHERE 1 = 0")).keys())


# ---------------------------------------------------------------- variants


def test_two_variants_of_one_recipe_are_two_rows_in_every_view(db_url, tmp_path):
    """fixed4 at loops 4 and at loops 8, same seed, submitted through the queue (which fills the variant
    columns): every view keeps them apart by variant_id, while two seeds of one variant share an id."""
    from looplab import Grid, Queue

    q = Queue(db=db_url, artifacts=tmp_path / "art")
    grid = Grid(
        "v",
        base={"recipe": "fixed4", "tokens": 1000},
        then=["depth_sweep", "decode_bench"],
        sweep={"model.loops": [4, 8], "seed": [0, 1]},
    )
    q.submit(grid)
    with q.eng.connect() as conn:
        jobs = conn.execute(text("SELECT id, kind, loops, seed FROM jobs ORDER BY id")).all()
    with session(q.eng) as s:
        for job_id, kind, loops, seed in jobs:
            loss = 3.0 + loops / 100 + (seed or 0) / 1000  # a decode bench has no seed
            if kind == "train":
                s.add(
                    TrainResult(
                        job_id=job_id,
                        steps=10,
                        tokens=1000,
                        train_seconds=2.0,
                        final_val_loss=loss,
                        flops_per_token=1e6,
                        train_flops=1e9,
                        achieved_flops_per_s=5e8,
                    )
                )
                s.add(Metric(job_id=job_id, key="val_loss", step=10, tokens=1000, wall_s=2.0, value=loss))
            elif kind == "depth_sweep":
                s.add_all([DepthEval(job_id=job_id, loops=n, val_loss=loss + n / 10) for n in (1, 2)])
                s.add_all(
                    [
                        RoundDelta(
                            job_id=job_id,
                            loops=2,
                            round=r,
                            rel_change=0.5 / r,
                            angle=0.1 * r,
                            state_var=float(r),
                        )
                        for r in (1, 2)
                    ]
                )
                s.add(RoundInteraction(job_id=job_id, loops=2, skipped=1, round=2, interaction=loss))
            else:
                s.add(
                    DecodeBench(
                        job_id=job_id,
                        arch="fixed4",
                        size="tiny",
                        context_len=128,
                        batch_size=1,
                        ms_per_token=float(loops),
                        kv_cache_mb=0.5,
                        device="cpu",
                        dtype="float32",
                    )
                )
    path = db_url
    for view, loops_column, per_variant in (
        ("runs", "loops", 2),
        ("curves", "loops", 2),
        ("depth", "trained_loops", 4),
        ("decode", "loops", 1),
    ):
        got = _rows(
            path,
            f"SELECT variant_id, variant_label, {loops_column} AS trained, effective_depth, "
            f"d_model, n_recurrent FROM {view}",
        )
        by_variant: dict[str, list[dict]] = {}
        for r in got:
            by_variant.setdefault(r["variant_id"], []).append(r)
        assert len(by_variant) == 2, view
        assert sorted(len(v) for v in by_variant.values()) == [per_variant, per_variant], view
        described = {
            (v[0]["trained"], v[0]["variant_label"], v[0]["effective_depth"]) for v in by_variant.values()
        }
        assert described == {(4, "fixed4", 2 + 2 * 4 + 2.0), (8, "fixed4 · loops=8", 2 + 2 * 8 + 2.0)}, view
        assert all(
            len({(r["trained"], r["d_model"], r["n_recurrent"]) for r in v}) == 1 for v in by_variant.values()
        )
    # the depth views: effective depth at the evaluated loop count beside the trained one
    depth = _rows(path, "SELECT trained_loops, loops, inference_depth, trained_depth FROM depth")
    assert {(r["trained_loops"], r["loops"], r["inference_depth"], r["trained_depth"]) for r in depth} == {
        (4, 1, 2 + 2 * 1 + 2, 12.0),
        (4, 2, 2 + 2 * 2 + 2, 12.0),
        (8, 1, 6, 20.0),
        (8, 2, 8, 20.0),
    }
    geometry = _rows(
        path,
        "SELECT variant_label, trained_depth, loops, inference_depth, round, rel_change, angle, "
        "state_var FROM geometry ORDER BY trained_depth, seed, round",
    )
    assert len(geometry) == 8 and geometry[0]["variant_label"] == "fixed4"
    assert [(r["round"], r["angle"], r["state_var"], r["inference_depth"]) for r in geometry[:2]] == [
        (1, 0.1, 1.0, 8),
        (2, 0.2, 2.0, 8),
    ]
    inter = _rows(
        path,
        "SELECT variant_label, seed, loops, skipped, round, interaction FROM interactions "
        "ORDER BY interaction",
    )
    assert [(r["variant_label"], r["seed"], r["skipped"], r["round"]) for r in inter] == [
        ("fixed4", 0, 1, 2),
        ("fixed4", 1, 1, 2),
        ("fixed4 · loops=8", 0, 1, 2),
        ("fixed4 · loops=8", 1, 1, 2),
    ]
    assert inter[0]["interaction"] == pytest.approx(3.04)
    runs = _rows(
        path,
        "SELECT seed, loops, variant_id, n_params, n_once, n_rec, flops_per_token, train_flops, "
        "achieved_flops_per_s, mfu FROM runs ORDER BY loops, seed",
    )
    assert [(r["seed"], r["loops"]) for r in runs] == [(0, 4), (1, 4), (0, 8), (1, 8)]
    assert runs[0]["variant_id"] == runs[1]["variant_id"] != runs[2]["variant_id"] == runs[3]["variant_id"]
    assert all(r["n_params"] > r["n_once"] + r["n_rec"] > 0 for r in runs)
    assert {(r["flops_per_token"], r["train_flops"], r["achieved_flops_per_s"], r["mfu"]) for r in runs} == {
        (1e6, 1e9, 5e8, None)
    }
