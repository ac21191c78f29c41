"""The `unigram` health rule: a validation loss above the training data's unigram cross-entropy (the
metric `unigram_xent` a train run reports at step 0) after warm-up; silent on the demo's curves."""

from __future__ import annotations

import math

import pytest
import sqlalchemy as sa

from looplab.model.errors import ConfigError
from looplab.orchestrator import Grid, jobqueue
from looplab.orchestrator.db import engine
from looplab.orchestrator.health import (
    HOLD,
    STOP,
    WARN,
    HealthSettings,
    HealthWatch,
    Level,
    Rule,
    RunHealth,
    UnigramRule,
)
from looplab.orchestrator.writer import write_events
from looplab.workers.reporter import UNIGRAM_XENT, Event, EventKind
from tests.orchestrator import fake_jobs

BYTE_UNIGRAM = 3.2992  # the offline byte corpus (tests/workers/test_data.py measures it)
# val_loss at steps 19..119 of the demo's 120-step runs, best and worst of its nine (a demo database)
DEMO_VAL = {19: (2.686, 2.815), 39: (2.5, 2.706), 59: (2.319, 2.58), 79: (2.128, 2.423), 99: (1.993, 2.188)}
COLLAPSED_VAL = math.log(256)  # the lr 50 run: 5.545 at every evaluation


def val_findings(values: dict[int, float], settings: HealthSettings, baseline: float | None = BYTE_UNIGRAM):
    run = RunHealth(settings, 256)
    if baseline is not None:
        assert run.observe(UNIGRAM_XENT, 0, baseline) == []
    return [f for step, v in sorted(values.items()) for f in run.observe("val_loss", step, v)]


@pytest.mark.parametrize("which", [0, 1])
def test_the_demos_validation_curves_raise_nothing_by_default(which):
    curve = {step: pair[which] for step, pair in DEMO_VAL.items()} | {119: 2.1, 139: 2.02, 400: 1.75}
    assert val_findings(curve, HealthSettings()) == []


def test_a_validation_loss_above_the_unigram_baseline_after_warm_up_warns_once_per_episode():
    found = val_findings({19: 5.0, 99: 5.0, 119: COLLAPSED_VAL, 139: 5.5}, HealthSettings())
    (f,) = found  # step 19 and 99 are warm-up; 139 is the same episode
    assert (f.rule, f.level, f.action, f.step, f.key, f.value) == (
        Rule.UNIGRAM,
        Level.WARNING,
        WARN,
        119,
        "val_loss",
        COLLAPSED_VAL,
    )
    assert "val_loss 5.545 at step 119 is above the unigram baseline 3.299" in f.message
    assert "a warning; the run goes on" in f.message
    # without the baseline (a run from before it was reported, a job that trains nothing): nothing
    assert val_findings({119: COLLAPSED_VAL}, HealthSettings(), baseline=None) == []
    rule = UnigramRule(0, STOP)
    rule.baseline = 3.0
    steps = [(s, rule.observe(s, v)) for s, v in [(1, 3.5), (2, 3.6), (3, 2.9), (4, 3.1)]]
    assert [s for s, f in steps if f is not None] == [1, 4]  # under it ends the episode
    assert steps[0][1].stops and steps[0][1].level == Level.ERROR


def test_warm_up_and_action_are_set_per_grid_and_refused_naming_the_field():
    s = HealthSettings.of("grid 'g': health", {"unigram_after": 0, "unigram_action": "hold"})
    (f,) = val_findings({5: 4.0}, s)
    assert (f.step, f.action, f.stops) == (5, HOLD, True)
    with pytest.raises(ConfigError, match=r"health\.unigram_action: unknown 'kill'; accepted: warn, stop"):
        HealthSettings.of("grid 'g': health", {"unigram_action": "kill"})
    with pytest.raises(ConfigError, match=r"health\.unigram_after"):
        HealthSettings.of("grid 'g': health", {"unigram_after": -1})
    with pytest.raises(ConfigError, match=r"health\.unigram_after"):
        HealthSettings.of("grid 'g': health", {"unigram_after": "late"})


def metric(key: str, step: int, value: float) -> Event:
    return Event(EventKind.METRIC, 1.0 + step, {"key": key, "step": step, "value": value})


def test_the_finding_is_stored_with_its_step_and_figures_and_a_stop_reaches_the_driver(migrated_db_url):
    eng = engine(migrated_db_url)
    health = {"unigram_after": 10, "unigram_action": "stop"}
    ids, _ = jobqueue.submit(eng, [Grid("u", base={"tokens": 100}, health=health)], fake_jobs)
    job = ids[0]
    assert jobqueue.claim(eng, job, "driver", "/tmp/u") == 1
    watch = HealthWatch()
    points = [metric(UNIGRAM_XENT, 0, BYTE_UNIGRAM), metric("val_loss", 5, 5.5), metric("val_loss", 10, 5.5)]
    write_events(eng, [(job, 1, points)], watch)
    assert [(j, n, f.rule, f.step) for j, n, f in watch.take_stops()] == [(job, 1, Rule.UNIGRAM, 10)]
    with eng.connect() as conn:
        rows = conn.execute(sa.text("SELECT rule, level, step, key, value, attempt FROM health_events")).all()
        baseline = conn.execute(
            sa.text("SELECT step, value FROM metrics WHERE job_id = :j AND key = :k"),
            {"j": job, "k": UNIGRAM_XENT},
        ).all()
    assert [tuple(r) for r in rows] == [("unigram", "error", 10, "val_loss", 5.5, 1)]
    assert [tuple(r) for r in baseline] == [(0, BYTE_UNIGRAM)]  # the baseline is stored with the run


def test_through_the_real_queue_a_run_above_the_baseline_is_warned_with_it(
    tmp_path, ray_cluster, monkeypatch
):
    """lr 50 (the issue's collapse) evaluated at step 10, with the warm-up set to 0 and the chance rule
    out of the way: the trainer reports the corpus's baseline at step 0, the writer's rule warns once
    with the figures, and the job, warned only, succeeds."""
    from looplab import Queue
    from tests.db_rows import rows
    from tests.orchestrator.test_real_jobs import TRAIN

    monkeypatch.setenv("LOOPLAB_ALERTS", str(tmp_path / "none.json"))
    (tmp_path / "none.json").write_text("{}")
    q = Queue(db=tmp_path / "q.db", artifacts=tmp_path / "art")
    base = {**TRAIN, "recipe": "lean", "seed": 0, "lr": 50, "tokens": 4 * 32 * 12, "eval_every": 10}
    (job,) = q.submit(Grid("u", base=base, health={"unigram_after": 0, "chance_window": 1000}))
    q.run(until_empty=True, progress=False, poll_s=0.2, retry_backoff_s=0.05)
    ((baseline,),) = rows(
        q, "SELECT value FROM metrics WHERE job_id=:j AND key='unigram_xent' AND step=0", j=job
    )
    assert 3.25 < baseline < 3.35  # the byte corpus's
    ((rule, level, step, value, message),) = rows(
        q, "SELECT rule, level, step, value, message FROM health_events WHERE job_id=:j", j=job
    )
    assert (rule, level) == ("unigram", "warning") and value > baseline and step >= 9
    assert f"above the unigram baseline {baseline:.4g}" in message
    assert rows(q, "SELECT status FROM jobs WHERE id=:j", j=job) == [("succeeded",)]
