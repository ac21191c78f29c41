"""The people-facing views (`runs`, `curves`, `depth`, `decode`) on a small hand-made database."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from orchestrator.db import engine, readonly_engine, session
from orchestrator.schema import DecodeBench, DepthEval, GridRow, Job, JobDep, Metric, TrainResult


def _job(id_: int, kind: str, **kw) -> Job:
    return Job(id=id_, kind=kind, config="{}", config_hash=f"h{id_}", created_at=100.0 + id_, **kw)


@pytest.fixture
def filled(db_path):
    with session(engine(str(db_path))) as s:
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
                job_id=5, arch="lean", size="tiny", context_len=128, batch_size=1, ms_per_token=1.5,
                kv_cache_mb=0.5, device="cpu", dtype="float32", cuda_graph=False,
            )
        )  # fmt: skip
    return db_path


def _rows(path, sql):
    with readonly_engine(str(path)).connect() as c:
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
