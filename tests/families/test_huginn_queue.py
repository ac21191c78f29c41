"""The Huginn-style family through the queue (issue 37): one grid of a tiny train job with every
follow-up kind (`then=["depth_sweep", "decode_bench", "eval", "adaptive"]`), submitted and run by
`looplab` subprocesses; the driver (and its local Ray) is SIGKILLed mid-training after a checkpoint, a
new driver resumes the job, its stored curves equal an uninterrupted one-thread run's bit for bit, and
every follow-up runs on the resumed run's checkpoint (the flow of tests/orchestrator/crash.py)."""

from __future__ import annotations

import pytest

from tests.db_rows import rows
from tests.orchestrator import crash
from tests.orchestrator.test_crash_resume import TRAIN as CRASH_TRAIN
from tests.orchestrator.test_real_jobs import one_thread_run

pytestmark = pytest.mark.ray  # `looplab run` starts a local Ray in its subprocess

# tests/families/test_huginn_resume.py's model on test_crash_resume.py's schedule (a checkpoint every 5
# steps), 120 steps (about 5 s) so the driver is killed while the job runs past its first checkpoint
TRAIN = {
    **CRASH_TRAIN,
    "recipe": "fixed4",
    "model": {"loops": 3},
    "family": "families.huginn:factory",
    "family_config": {"d_model": 32, "n_heads": 2, "mlp": 48, "mean_recurrence": 3, "backprop_depth": 2},
    "optimizer": "adamw",
    "seed": 0,
    "tokens": 4 * 32 * 120,
}
# each follow-up as small as its kind allows (the adaptive job with the family's own KV strategies
# beside per_round); the table each one writes its rows to
FOLLOW = {
    "depth_sweep": ({"loops": [1, 3], "eval_tokens": 256, "batch_size": 4}, "depth_evals"),
    "decode_bench": ({"context_lens": [32], "batch_sizes": [1], "warmup": 1, "steps": 2}, "decode_benches"),
    "eval": ({"tasks": ["deduction"], "loops": [1, 3], "n_per_subset": 2}, "task_scores"),
    "adaptive": (
        {
            "rules": {"argmax": [0]},
            "kv_strategies": ["per_round", "full", "latest_per_slot"],
            "eval_tokens": 128,
            "batch_size": 4,
        },
        "adaptive_evals",
    ),
}
GRID_FILE = f"""
from looplab import Grid
grid = Grid("huginn", base={TRAIN!r}, then={list(FOLLOW)!r}, follow={ {k: s for k, (s, _) in FOLLOW.items()}!r})
"""


@pytest.mark.slow  # two `looplab run` drivers (one killed), five jobs, a reference training
def test_a_huginn_grid_resumes_exactly_through_the_queue_and_runs_every_follow_up(tmp_path, looplab_cache):
    env = crash.driver_env(looplab_cache)
    assert "5 added" in crash.submit(tmp_path, GRID_FILE, env)
    q, victim, ckpt, _ = crash.crash_and_recover(tmp_path, env, timeout_s=400)
    jobs = rows(q, "SELECT kind, status FROM jobs ORDER BY kind")
    assert [tuple(j) for j in jobs] == sorted((k, "succeeded") for k in ("train", *FOLLOW))
    assert rows(q, "SELECT kind FROM jobs WHERE id=:j", j=victim) == [("train",)]
    crash.assert_resumed(q, victim, ckpt)

    for kind, (_, table) in FOLLOW.items():
        ((job,),) = rows(q, "SELECT id FROM jobs WHERE kind=:k", k=kind)
        assert rows(q, "SELECT outcome FROM attempts WHERE job_id=:j", j=job) == [("succeeded",)], kind
        assert rows(q, f"SELECT COUNT(*) FROM {table} WHERE job_id=:j", j=job)[0][0] > 0, kind
        # a checkpoint's follow-up waited for the resumed run; the decode bench is of the architecture
        deps = rows(q, "SELECT depends_on FROM job_deps WHERE job_id=:j", j=job)
        assert deps == ([] if kind == "decode_bench" else [(victim,)]), kind
    assert rows(q, "SELECT loops FROM depth_evals ORDER BY loops") == [(1,), (3,)]
    stored = rows(q, "SELECT kv_strategy, kv_mib FROM adaptive_evals WHERE rule = 'argmax' ORDER BY kv_mib")
    assert [(s, m is None) for s, m in stored] == [
        ("per_round", True),
        ("latest_per_slot", False),
        ("full", False),
    ]

    # the resumed curves equal an uninterrupted run's bit for bit, each point once (the queue's worker
    # ran on one thread, and float sums depend on the thread count, so the reference runs on one too)
    (tmp_path / "ref").mkdir()
    ref = one_thread_run(TRAIN, tmp_path / "ref")
    crash.assert_curves_equal(q, victim, ref, ("train_loss", "val_loss"))
    assert [s for s, _ in ref.curve("train_loss")] == list(range(120))  # every step, each once
