"""The health rules as pure pieces (orchestrator/health.py), their settings (global, per grid, refused
with the field named), and the writer storing their findings with job, attempt, step, figure and rule."""

from __future__ import annotations

import math

import pytest
import sqlalchemy as sa

from looplab.model.errors import ConfigError
from looplab.orchestrator import Grid, jobqueue
from looplab.orchestrator.db import engine
from looplab.orchestrator.health import (
    EvalDivergenceRule,
    HealthSettings,
    HealthWatch,
    Level,
    Rule,
    RunHealth,
    SlowdownRule,
    SpikeRule,
    StepClock,
    non_finite,
)
from looplab.orchestrator.settings import health_settings
from looplab.orchestrator.task import non_finite_of
from looplab.orchestrator.writer import write_events
from looplab.workers.reporter import Event, EventKind
from tests.orchestrator import fake_jobs


def test_non_finite_checks_the_loss_and_grad_norm_only():
    assert non_finite("train_loss", 3, 1.5) is None
    assert non_finite("mfu", 3, math.nan) is None  # not a divergence figure
    found = non_finite("grad_norm", 7, math.inf)
    assert (found.rule, found.level, found.step, found.key) == (Rule.NON_FINITE, Level.ERROR, 7, "grad_norm")
    assert "grad_norm is inf at step 7" in found.message


def test_spike_warns_once_per_episode_against_the_running_median():
    rule = SpikeRule(k=3.0, window=5)
    found = [rule.observe(s, v) for s, v in enumerate([2.0, 2.1, 1.9, 2.0, 2.0, 5.0, 7.0, 6.5, 2.0, 9.0])]
    spikes = [(f.step, f.value) for f in found if f is not None]
    # 7.0 > 3 x 2.0 starts an episode (5.0 does not: 2.5x); 6.5 continues it; 9.0 after a normal point is new
    assert spikes == [(6, 7.0), (9, 9.0)]
    assert rule.points.maxlen == 5 and 7.0 not in rule.points  # the spike did not lift its own median


def test_slowdown_warns_once_per_episode_on_the_windows_rate():
    rule = SlowdownRule(fraction=0.5, window=3)
    found, tokens, wall = [], 0, 0.0
    for step in range(1, 30):
        tokens += 100
        wall += 1.0 if not 12 <= step < 20 else 4.0  # 100 tok/s, then 25 tok/s for a while, then back
        found.append(rule.observe(step, tokens, wall))
    slow = [f for f in found if f is not None]
    assert len(slow) == 1 and slow[0].rule == Rule.SLOWDOWN and slow[0].value < 50
    assert rule.observe(30, tokens, wall) is None  # no time passed: no rate, no finding


def test_eval_divergence_needs_a_rise_past_the_noise_floor_at_each_evaluation():
    rule = EvalDivergenceRule(count=3, noise=0.01)
    assert [rule.observe(s, v) for s, v in enumerate([3.0, 3.001, 3.002, 3.003])] == [None] * 4  # noise
    rule = EvalDivergenceRule(count=3, noise=0.01)
    found = [rule.observe(s, v) for s, v in enumerate([3.0, 2.9, 3.0, 3.1, 3.2, 3.3])]
    assert [f.step for f in found if f is not None] == [4]  # 2.9 -> 3.2 over three rises: once


def test_stall_warns_then_kills_past_the_limit_of_its_median_step_time():
    s = HealthSettings(stall_s=10.0, stall_factor=20.0, stall_kill_factor=2.0)
    clock = StepClock(s)
    assert clock.check(1e6) == (None, False)  # no step yet: building data or compiling is no stall
    for step in range(5):
        clock.advance(step, 100.0 + step * 2.0)  # 2 s a step: limit max(10, 40) = 40 s
    assert clock.limit() == 40.0
    assert clock.check(108.0 + 39) == (None, False)
    warn, kill = clock.check(108.0 + 41)
    assert warn.rule == Rule.STALL and warn.level == Level.WARNING and not kill and warn.step == 4
    assert clock.check(108.0 + 50) == (None, False)  # warned once
    stop, kill = clock.check(108.0 + 81)
    assert kill and stop.level == Level.ERROR and "killed" in stop.message
    clock.restart()  # a resumed attempt: its clock waits for its own first step
    assert clock.check(1e6) == (None, False)


def test_each_phase_of_progress_has_its_own_clock():
    """A train job on fresh data reports its preparation in bytes, then its steps: the steps, all below the
    byte count, still advance the clock (they were ignored, and a healthy run was called stalled)."""
    clock = StepClock(HealthSettings(stall_s=10.0, stall_factor=20.0))
    for done in (400_000, 800_000, 1_200_000):
        clock.advance(done, now=100.0, total=1_582_616)  # preparing: bytes of the corpus
    clock.advance(1_582_616, now=101.0, total=1_582_616)  # done: building the model is no stall
    assert clock.step is None and clock.check(1e6) == (None, False)
    for step in range(1, 6):
        clock.advance(step, now=200.0 + step, total=120)  # training: steps
    assert (clock.step, clock.total, clock.limit()) == (5, 120, 20.0)  # 1 s a step, its own pace
    assert clock.check(205.0 + 19) == (None, False)
    warn, _ = clock.check(205.0 + 21)
    assert warn is not None and warn.step == 5 and "after step 5 " in warn.message


def test_step_times_come_from_the_workers_clock_not_the_drivers_batches():
    clock = StepClock(HealthSettings(stall_s=1.0, stall_factor=10.0))
    for step in range(1, 11):  # reported every 3 s, drained together by the driver at one time
        clock.advance(step, now=500.0, ts=100.0 + 3.0 * step)
    assert clock.limit() == 30.0  # 10 x 3 s a step, not 10 x 0 s


def test_settings_name_the_field_and_what_is_accepted(monkeypatch):
    assert HealthSettings.of("g", {"stall_s": 60}).stall_s == 60.0
    with pytest.raises(ConfigError, match=r"g: health.*unknown.*stal_s"):
        HealthSettings.of("g: health", {"stal_s": 60})
    with pytest.raises(ConfigError, match=r"g.slow_fraction: must be < 1.0"):
        HealthSettings.of("g", {"slow_fraction": 1.5})
    with pytest.raises(ConfigError, match=r"g.retry_non_finite: expected true or false"):
        HealthSettings.of("g", {"retry_non_finite": "yes"})
    monkeypatch.setenv("LOOPLAB_HEALTH", '{"spike_k": 5}')
    assert health_settings().spike_k == 5.0 and health_settings().stall_s == HealthSettings().stall_s
    monkeypatch.setenv("LOOPLAB_HEALTH", "spike_k=5")
    with pytest.raises(ConfigError, match=r"\$LOOPLAB_HEALTH: expected a JSON object"):
        health_settings()


def test_a_grid_with_bad_health_is_refused_whole(migrated_db_url):
    eng = engine(migrated_db_url)
    bad = Grid("g", base={"tokens": 100}, health={"spike_k": 0.5})
    with pytest.raises(ConfigError, match=r"grid 'g': health.spike_k: must be > 1.0"):
        jobqueue.submit(eng, [bad], fake_jobs)
    # a valid one keeps its health settings with the grid (not in the job's identity)
    plain = jobqueue.submit(eng, [Grid("g", base={"tokens": 100})], fake_jobs)[0]
    watched = jobqueue.submit(eng, [Grid("g", base={"tokens": 100}, health={"spike_k": 4})], fake_jobs)[0]
    assert plain == watched


def test_run_health_counts_each_point_once():
    run = RunHealth(HealthSettings(spike_window=2))
    assert run.observe("train_loss", 1, 1.0) == [] and run.observe("train_loss", 2, 1.0) == []
    assert [f.rule for f in run.observe("train_loss", 3, 9.0)] == [Rule.LOSS_SPIKE]
    assert run.observe("train_loss", 3, 9.0) == []  # the same point again (a replayed spool)
    assert [f.rule for f in run.observe("val_loss", 3, math.nan)] == [Rule.NON_FINITE]


def test_the_trainers_non_finite_error_becomes_a_finding():
    from looplab.workers.train.trainer import NonFiniteError

    try:
        try:
            raise NonFiniteError("train_loss", 12, math.nan)
        except FloatingPointError as inner:
            raise RuntimeError("a rank failed") from inner
    except RuntimeError as e:
        found = non_finite_of(e)
    assert (found.rule, found.step, found.key) == (Rule.NON_FINITE, 12, "train_loss")
    assert math.isnan(found.value)
    assert non_finite_of(ValueError("x")) is None


def test_the_writer_stores_findings_with_job_attempt_step_figure_and_rule(migrated_db_url):
    eng = engine(migrated_db_url)
    ids, _ = jobqueue.submit(eng, [Grid("w", base={"tokens": 100}, health={"spike_window": 3})], fake_jobs)
    assert jobqueue.claim(eng, ids[0], "driver", "/tmp/w") == 1
    seen = []
    watch = HealthWatch(on_finding=lambda conn, job, n, f: seen.append((job, n, f.rule)))
    values = [2.0, 2.0, 2.0, 8.0, math.nan]
    events = [
        Event(EventKind.METRIC, 1.0 + s, {"key": "train_loss", "step": s, "value": v})
        for s, v in enumerate(values)
    ]
    write_events(eng, [(ids[0], 1, events)], watch)
    with eng.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT job_id, attempt, step, rule, level, key, value, figure FROM health_events ORDER BY id"
            )
        ).all()
    assert [tuple(r) for r in rows] == [
        (ids[0], 1, 3, "loss_spike", "warning", "train_loss", 8.0, "8.0"),
        (ids[0], 1, 4, "non_finite", "error", "train_loss", None, "nan"),
    ]
    assert seen == [(ids[0], 1, Rule.LOSS_SPIKE), (ids[0], 1, Rule.NON_FINITE)]
    # an attempt that no longer owns the job stores nothing
    write_events(
        eng,
        [(ids[0], 2, [Event(EventKind.METRIC, 9.0, {"key": "train_loss", "step": 9, "value": 99.0})])],
        watch,
    )
    with eng.connect() as conn:
        assert conn.execute(sa.text("SELECT COUNT(*) FROM health_events")).scalar_one() == 2


def test_each_attempt_preempted_at_the_same_step_is_an_event_of_its_own(migrated_db_url):
    """Found by the SLURM test: a job released by two allocations at the same checkpoint's step (it
    resumed there and was released again before its next checkpoint) had two preempted attempts and one
    event, as if the second release were a replayed point."""
    from looplab.orchestrator import health

    eng = engine(migrated_db_url)
    ids, _ = jobqueue.submit(eng, [Grid("p", base={"tokens": 100})], fake_jobs)
    release = health.Finding(Rule.PREEMPTED, health.Level.WARNING, 40, None, None, "slurm time limit")
    with eng.begin() as conn:
        stored = [health.store(conn, ids[0], n, release) for n in (1, 1, 2)]
        spike = health.Finding(Rule.LOSS_SPIKE, health.Level.WARNING, 40, "train_loss", 8.0, "spike")
        replayed = [health.store(conn, ids[0], n, spike) for n in (1, 2)]  # a replayed point: one event
    assert stored[0] and stored[1] is None and stored[2]  # once per attempt
    assert replayed[0] and replayed[1] is None


@pytest.mark.parametrize("retry", [False, True])
def test_a_non_finite_attempt_is_final_unless_the_grid_asks_for_retries(migrated_db_url, retry):
    from looplab.orchestrator.scheduler import Scheduler
    from looplab.orchestrator.states import AttemptOutcome
    from looplab.orchestrator.task import TaskResult

    eng = engine(migrated_db_url)
    health = {"retry_non_finite": True} if retry else None
    ids, _ = jobqueue.submit(
        eng, [Grid("nf", base={"tokens": 100}, max_attempts=3, health=health)], fake_jobs
    )
    assert jobqueue.claim(eng, ids[0], "driver", "/tmp/nf") == 1
    sched = Scheduler(eng, kinds=fake_jobs, progress=False)
    found = non_finite("train_loss", 5, math.nan)
    sched._record(ids[0], 1, TaskResult(AttemptOutcome.FAILED, found.message, finding=found))
    with eng.connect() as conn:
        status = conn.execute(sa.text("SELECT status FROM jobs WHERE id = :j"), {"j": ids[0]}).scalar_one()
        stored = conn.execute(sa.text("SELECT rule, step, attempt FROM health_events")).all()
    assert status == ("queued" if retry else "failed")
    assert [tuple(r) for r in stored] == [("non_finite", 5, 1)]


def test_spikes_that_stop_a_run_fail_it_once_without_a_retry(migrated_db_url):
    """The trainer's SpikeError (rewinds used up), pickled as a gang's rank sends it, becomes a final
    finding: a retry would replay the same spikes, whatever attempts are left."""
    import pickle

    from looplab.orchestrator.scheduler import Scheduler
    from looplab.orchestrator.states import AttemptOutcome
    from looplab.orchestrator.task import TaskResult, spikes_of
    from looplab.workers.train.rewind import SpikeError

    error = pickle.loads(pickle.dumps(SpikeError("loss spike at step 9: ...; 3 rewind(s) used", 9, 7.5)))
    try:
        raise RuntimeError("a rank failed") from error
    except RuntimeError as e:
        found = spikes_of(e)
    assert (found.rule, found.level, found.step, found.value) == (Rule.REWIND, Level.ERROR, 9, 7.5)
    assert found.message == "loss spikes stopped the run: loss spike at step 9: ...; 3 rewind(s) used"
    assert spikes_of(ValueError("x")) is None
    eng = engine(migrated_db_url)
    ids, _ = jobqueue.submit(eng, [Grid("sp", base={"tokens": 100}, max_attempts=3)], fake_jobs)
    assert jobqueue.claim(eng, ids[0], "driver", "/tmp/sp") == 1
    Scheduler(eng, kinds=fake_jobs, progress=False)._record(
        ids[0], 1, TaskResult(AttemptOutcome.FAILED, found.message, finding=found)
    )
    with eng.connect() as conn:
        status = conn.execute(sa.text("SELECT status FROM jobs WHERE id = :j"), {"j": ids[0]}).scalar_one()
    assert status == "failed"


def test_a_resumed_run_gets_a_window_of_its_own_points_before_it_is_stopped_again(migrated_db_url):
    """A run held at chance and resumed by a person (`looplab retry`) replays its points up to its
    checkpoint: the replayed stop is not a new one, and the rule trips again only after a whole window
    of the resumed attempt's own points at chance (issue 50: it tripped at the first replayed point after
    the old stop, so the retry bought one step)."""
    eng = engine(migrated_db_url)
    ids, _ = jobqueue.submit(eng, [Grid("c", base={"tokens": 100})], fake_jobs)
    settings = HealthSettings(chance_after=10, chance_window=5, chance_action="hold")
    watch = HealthWatch()
    watch._settings[ids[0]] = settings
    at_chance = math.log(256)

    def points(steps):
        return [
            Event(EventKind.METRIC, 1.0 + s, {"key": "train_loss", "step": s, "value": at_chance})
            for s in steps
        ]

    def stops(n, events):
        if ids[0] not in watch.runs or watch.runs[ids[0]][0] != n:  # a fake job states no vocabulary
            watch.runs[ids[0]] = (n, RunHealth(settings, vocab=256))
        with eng.begin() as conn:
            watch.observe(conn, ids[0], n, events)
        return [(a, f.step) for _, a, f in watch.take_stops()]

    # held at step 10; its checkpoint at 20 (a busy run goes on for a while): more than a window after it
    assert stops(1, points(range(0, 20))) == [(1, 10)]
    resumed = Event(EventKind.RESUMED, 30.0, {"step": 20})
    assert stops(2, [*points(range(0, 20)), resumed, *points(range(20, 24))]) == []  # replay, 4 new points
    assert stops(2, points(range(24, 30))) == [(2, 25)]  # the fifth step after its own first point
