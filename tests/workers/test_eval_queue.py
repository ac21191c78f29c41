"""A grid with `eval` follow-ups through the queue on local Ray: a tiny model trains a few steps, its eval
scores the generated tasks at two loop counts, and the `tasks` view labels every row with the trained
variant. A bad task file in a follow-up is refused at submission, with nothing stored."""

from __future__ import annotations

import json

import pytest

from looplab import Grid, Queue
from looplab.model.errors import ConfigError
from tests.db_rows import rows

TRAIN = {
    "recipe": "lean",
    "size": "tiny",
    "seq_len": 64,
    "batch_size": 4,
    "tokens": 4 * 64 * 6,
    "eval_every": 1000,
    "eval_tokens": 256,
    "ckpt_every": 1000,
    "data": {"tokenizer": "byte"},
}
EVAL = {"tasks": ["deduction", "kinship"], "loops": [1, 2], "n_per_subset": 2, "batch_size": 8}


@pytest.mark.slow
def test_grid_with_eval_follow_ups_runs_end_to_end(tmp_path, ray_cluster):
    q = Queue(db=tmp_path / "q.db", artifacts=tmp_path / "art")
    grid = Grid(
        "tasks",
        base={**TRAIN, "seed": 0},
        sweep={"model.loops": [2, 3]},
        then=["eval"],
        follow={"eval": EVAL},
    )
    ids = q.submit([grid])
    assert q.submit([grid]) == ids  # idempotent: the evals are known by their train job's hash
    kinds = dict(rows(q, "SELECT id, kind FROM jobs"))
    evals = [i for i in ids if kinds[i] == "eval"]
    assert len(evals) == 2
    q.run(until_empty=True, progress=False, poll_s=0.2, max_concurrent=1)
    st = q.status().set_index("id")
    assert set(st["status"]) == {"succeeded"}, st[["kind", "status", "error"]]

    for eval_id in evals:
        (cfg,) = rows(q, "SELECT config FROM jobs WHERE id=:j", j=eval_id)[0]
        assert "checkpoint" not in json.loads(cfg)  # set by the queue at launch, not stored
        got = rows(
            q,
            "SELECT task, loops, n FROM task_scores WHERE job_id=:j AND subset='all' ORDER BY task, loops",
            j=eval_id,
        )
        assert got == [("deduction", 1, 12), ("deduction", 2, 12), ("kinship", 1, 18), ("kinship", 2, 18)]
        subsets = rows(
            q, "SELECT COUNT(DISTINCT subset) FROM task_scores WHERE job_id=:j AND task='kinship'", j=eval_id
        )
        assert subsets[0][0] == 1 + 9  # all + chain lengths 2..10

    view = q.results("tasks")
    assert set(view["eval_job_id"]) == set(evals) and view["train_job_id"].notna().all()
    assert sorted(view.drop_duplicates("eval_job_id")["trained_loops"]) == [2, 3]
    assert view["variant_label"].str.startswith("lean").all() and view["variant_id"].nunique() == 2
    assert set(view["category"]) == {"reasoning"}
    # the eval copies its train job's variant, as a depth sweep does
    for eval_id in evals:
        (train_id,) = rows(q, "SELECT depends_on FROM job_deps WHERE job_id=:j", j=eval_id)[0]
        assert rows(q, "SELECT variant_id FROM jobs WHERE id=:j", j=eval_id) == rows(
            q, "SELECT variant_id FROM jobs WHERE id=:j", j=train_id
        )


def test_a_bad_task_file_refuses_the_grid_and_stores_nothing(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"context": "x", "choices": ["a", "b"], "gold": 0}\n{"context": "y", "choices": ["a"], "gold": 0}\n'
    )
    q = Queue(db=tmp_path / "q.db", artifacts=tmp_path / "art")
    grid = Grid("bad", base={**TRAIN, "seed": 0}, then=["eval"], follow={"eval": {"tasks": [str(bad)]}})
    with pytest.raises(ConfigError, match=f"grid 'bad': {bad}:2: choices: expected a list of at least 2"):
        q.submit([grid])
    with pytest.raises(ConfigError, match="follow.eval.checkpoint: set by the queue"):
        q.submit([Grid("ck", base={**TRAIN, "seed": 0}, then=["eval"], follow={"eval": {"checkpoint": "x"}})])
    assert rows(q, "SELECT COUNT(*) FROM jobs")[0][0] == 0
