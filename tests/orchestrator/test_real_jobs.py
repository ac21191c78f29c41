"""The queue with the real workers (tiny models): a train job with its depth sweep and decode bench,
and a derived iso-time budget resolved from the reference's measured training time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from looplab import Grid, Queue
from tests.db_rows import rows

TRAIN = {
    "size": "tiny",
    "seq_len": 32,
    "batch_size": 4,
    "eval_every": 8,
    "eval_tokens": 256,
    "ckpt_every": 8,
    "data": {"tokenizer": "byte"},
}


def one_thread_run(spec: dict, art):
    """A real train spec run whole in this process on one torch thread, as the queue's one-CPU Ray tasks
    run it (float sums depend on the thread count); its MemoryReporter."""
    import torch

    from looplab.workers import jobs
    from looplab.workers.reporter import MemoryReporter

    ref, threads = MemoryReporter(), torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        jobs.run("train", jobs.validate("train", dict(spec)), ref, art)
    finally:
        torch.set_num_threads(threads)
    return ref


@pytest.mark.slow
def test_real_grid_with_follow_ups_and_iso_time(tmp_path, ray_cluster):
    q = Queue(db=tmp_path / "q.db", artifacts=tmp_path / "art")
    # 48 steps, about 3 s: the follower's 10 % is some steps, even with another test on the other core
    main = Grid(
        "real",
        base={**TRAIN, "recipe": "lean", "seed": 0, "tokens": 4 * 32 * 48},
        then=["depth_sweep", "decode_bench"],
        follow={
            "depth_sweep": {"loops": [1, 2, 4], "eval_tokens": 256, "batch_size": 4},
            "decode_bench": {"context_lens": [32], "batch_sizes": [1], "warmup": 1, "steps": 2},
        },
    )
    iso = Grid(
        "real-iso",
        base={
            **TRAIN,
            "recipe": "parcae",
            "seed": 0,
            "budget": {"match_time_of": {"recipe": "lean", "seed": 0}},
        },
    )
    train, sweep, bench, follower = q.submit([main, iso])
    # one job at a time: both trainings see the same machine, as an iso-time comparison needs
    q.run(until_empty=True, progress=False, poll_s=0.2, max_concurrent=1)
    st = q.status().set_index("id")
    assert set(st["status"]) == {"succeeded"}, st[["kind", "status", "error"]]
    assert [
        r[0] for r in rows(q, "SELECT loops FROM depth_evals WHERE job_id=:j ORDER BY loops", j=sweep)
    ] == [1, 2, 4]
    assert rows(q, "SELECT COUNT(*) FROM decode_benches WHERE job_id=:j", j=bench)[0][0] >= 1
    assert len(q.results("runs")) == 2  # the view reads what the queue wrote
    # the trainer wrote its attempt's final weights, the driver made them the job's when it recorded
    # the success (docs/guarantees.md, promise 11), and the "final" retention kept final.pt alone
    from looplab.workers import checkpoint as ckpt

    (art,) = rows(q, "SELECT artifact_dir FROM jobs WHERE id=:j", j=train)[0]
    assert ckpt.load(Path(art) / "final.pt")["attempt"] == 1 and not list(Path(art).glob("final-a*.pt"))

    (secs,) = rows(q, "SELECT train_seconds FROM train_results WHERE job_id=:j", j=train)[0]
    budget, resolved = rows(q, "SELECT budget, budget_time_s FROM jobs WHERE id=:j", j=follower)[0]
    assert json.loads(budget) == {"match_time_of": train} and resolved == secs
    (cfg,) = rows(q, "SELECT config FROM jobs WHERE id=:j", j=follower)[0]
    assert json.loads(cfg)["time_s"] is None  # stored as derived; the worker got time_s=resolved
    (real, budget_s) = rows(
        q, "SELECT train_seconds, time_budget_s FROM train_results WHERE job_id=:j", j=follower
    )[0]
    assert budget_s == pytest.approx(secs)
    assert abs(real - secs) <= 0.1 * secs, (real, secs)
