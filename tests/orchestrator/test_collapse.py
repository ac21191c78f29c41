"""The rules for failures that do not raise (a loss at chance, a loss that stopped moving), their
settings and actions; a finding stored once however often it is given (a replayed spool); one incident,
one alert (a job failed by a rule sends that rule's message only); and whose fault a failed attempt is
(a program error is final, a machine's retried)."""

from __future__ import annotations

import errno
import json
import math
import random

import pytest
import sqlalchemy as sa

from looplab.model.errors import ConfigError
from looplab.orchestrator import Grid, alerts, faults, jobqueue
from looplab.orchestrator.db import engine
from looplab.orchestrator.health import (
    HOLD,
    STOP,
    WARN,
    ChanceRule,
    Finding,
    HealthSettings,
    HealthWatch,
    Level,
    PlateauRule,
    Rule,
    RunHealth,
)
from looplab.orchestrator.writer import write_events
from looplab.workers.reporter import Event, EventKind
from tests.orchestrator import fake_jobs
from tests.orchestrator.alert_servers import http_receiver

LN256 = math.log(256)
# the lr 50 run: the loss falls, jumps, then sits at ln 256 from step 9 to the end (120 steps)
COLLAPSED = [5.82, 5.1, 4.7, 5.08, 5.3, 5.73, 5.6, 5.7, 5.3] + [5.54518] * 111


def healthy(steps: int, seed: int = 0) -> list[float]:
    """A learning run's minibatch losses: from ln V down towards 2.6, with a few percent of noise."""
    rng = random.Random(seed)
    return [(2.6 + 3.2 * math.exp(-s / 8)) * (1 + 0.04 * rng.uniform(-1, 1)) for s in range(steps)]


def findings(values: list[float], settings: HealthSettings, vocab: int | None = 256) -> list[Finding]:
    run = RunHealth(settings, vocab)
    return [f for s, v in enumerate(values) for f in run.observe("train_loss", s, v)]


def test_a_collapse_to_chance_is_stopped_by_default_with_its_step_and_figures():
    (found,) = findings(COLLAPSED, HealthSettings())
    assert (found.rule, found.level, found.action, found.step) == (Rule.AT_CHANCE, Level.ERROR, STOP, 59)
    assert found.value == 5.54518 and found.stops
    assert "at chance, ln V = 5.54518" in found.message and "since step 9" in found.message
    assert "stopped and the job failed" in found.message
    # the plateau rule leaves a loss at chance to the chance rule: one incident, one finding


@pytest.mark.parametrize("seed", range(5))
def test_healthy_runs_of_the_demos_lengths_raise_nothing_by_default(seed):
    for steps in (10, 48, 120, 400):  # the fast demo, the test grids, the demo, the studies
        assert findings(healthy(steps, seed), HealthSettings()) == []


def test_chance_needs_a_vocabulary_the_window_and_the_warm_up():
    assert ChanceRule(None, 0.01, 5, 0, STOP).observe(10, LN256) is None  # no vocabulary: no ln V
    rule = ChanceRule(256, 0.01, 5, 20, WARN)
    assert [rule.observe(s, LN256) for s in range(0, 20)] == [None] * 20  # before step 20
    found = rule.observe(20, LN256 * 1.005)  # within 1 %
    assert found is not None and (found.level, found.action) == (Level.WARNING, WARN)
    assert "a warning; the run goes on" in found.message
    assert rule.observe(40, LN256) is None  # once per attempt
    rule = ChanceRule(256, 0.01, 5, 0, HOLD)
    values = [LN256] * 4 + [LN256 * 0.9] + [LN256] * 5  # a point away from chance restarts the window
    assert all(rule.observe(s, v) is None for s, v in enumerate(values))
    held = rule.observe(10, LN256)
    assert (held.level, held.action, held.stops) == (Level.ERROR, HOLD, True)
    assert "since step 5" in held.message and "held for a person" in held.message


def test_a_loss_that_stopped_moving_warns_once_per_episode():
    rule = PlateauRule(1e-3, 10, 0, WARN)
    flat = [rule.observe(s, 3.0 + 1e-5 * (s % 2), False) for s in range(30)]
    assert [f.step for f in flat if f is not None] == [10]
    assert "stopped moving" in flat[10].message and flat[10].rule == Rule.PLATEAU
    moving = [rule.observe(30 + s, 3.0 * (1 + 0.05 * (s % 2)), False) for s in range(12)]
    assert all(f is None for f in moving)  # the episode ended
    again = [rule.observe(42 + s, 2.0, False) for s in range(12)]
    assert [f.step for f in again if f is not None] == [52]
    at_chance = PlateauRule(1e-3, 10, 0, WARN)
    assert all(at_chance.observe(s, LN256, True) is None for s in range(30))


def test_actions_and_windows_are_set_per_grid_and_refused_naming_the_field():
    s = HealthSettings.of(
        "grid 'g': health", {"chance_action": "hold", "plateau_action": "stop", "chance_window": 5}
    )
    assert (s.chance_action, s.plateau_action, s.chance_window) == (HOLD, STOP, 5)
    with pytest.raises(
        ConfigError, match=r"health\.chance_action: unknown 'kill'; accepted: warn, stop, hold"
    ):
        HealthSettings.of("grid 'g': health", {"chance_action": "kill"})
    with pytest.raises(ConfigError, match=r"health\.plateau_rel"):
        HealthSettings.of("grid 'g': health", {"plateau_rel": 0})
    with pytest.raises(ConfigError, match=r"health\.retry_program_errors: expected true or false"):
        HealthSettings.of("grid 'g': health", {"retry_program_errors": "yes"})


def metric(step: int, value: float) -> Event:
    return Event(EventKind.METRIC, 1.0 + step, {"key": "train_loss", "step": step, "value": value})


def test_a_replayed_point_is_one_event_and_a_stop_reaches_the_driver_once(migrated_db_url):
    eng = engine(migrated_db_url)
    health = {"chance_after": 0, "chance_window": 3, "spike_window": 2}
    ids, _ = jobqueue.submit(eng, [Grid("c", base={"tokens": 100}, health=health)], fake_jobs)
    job = ids[0]
    with eng.begin() as conn:  # a fake job trains nothing: give it the vocabulary a train job has
        conn.execute(sa.text("UPDATE jobs SET vocab_size = 256 WHERE id = :j"), {"j": job})
    assert jobqueue.claim(eng, job, "driver", "/tmp/c") == 1
    seen = []
    watch = HealthWatch(on_finding=lambda conn, j, n, f: seen.append((j, n, f.rule)))
    points = [metric(0, 1.0), metric(1, 1.0), metric(2, 9.0)] + [metric(s, LN256) for s in range(3, 7)]
    write_events(eng, [(job, 1, points)], watch)
    assert [f.rule for *_, f in watch.take_stops()] == [Rule.AT_CHANCE] and watch.take_stops() == []
    # attempt 2 resumes and replays the spool's points: the same findings are not stored or sent again
    assert jobqueue.finish(eng, job, 1, "interrupted") == "queued"
    assert jobqueue.claim(eng, job, "driver", "/tmp/c") == 2
    resumed = Event(EventKind.RESUMED, 50.0, {"step": 7})  # after the replay, as QueueReporter.resumed
    write_events(eng, [(job, 2, [*points, resumed])], watch)
    with eng.connect() as conn:
        rows = conn.execute(sa.text("SELECT rule, step, attempt FROM health_events ORDER BY id")).all()
    assert [tuple(r) for r in rows] == [("loss_spike", 2, 1), ("at_chance", 6, 1)]
    assert seen == [(job, 1, Rule.LOSS_SPIKE), (job, 1, Rule.AT_CHANCE)]
    assert watch.take_stops() == []
    # the resumed run (a person's retry of a held job) still at chance is stopped again once a whole
    # window (3) of its own points says so, not at its first point (RunHealth.fresh)
    write_events(eng, [(job, 2, [metric(s, LN256) for s in range(7, 10)])], watch)
    assert watch.take_stops() == []
    write_events(eng, [(job, 2, [metric(10, LN256)])], watch)
    assert [(j, n, f.rule, f.step) for j, n, f in watch.take_stops()] == [(job, 2, Rule.AT_CHANCE, 10)]


def test_a_job_failed_by_a_rule_sends_that_rules_alert_only(migrated_db_url, monkeypatch, tmp_path):
    from looplab.orchestrator.scheduler import Scheduler
    from looplab.orchestrator.task import TaskResult

    eng = engine(migrated_db_url)
    ids, _ = jobqueue.submit(eng, [Grid("one", base={"tokens": 100}, sweep={"seed": [0, 1]})], fake_jobs)
    for j in ids:
        assert jobqueue.claim(eng, j, "driver", f"/tmp/one{j}") == 1
    with http_receiver() as (url, hook):
        # a channel for failed jobs only still hears of the failure a finding caused
        channel = {"name": "pager", "type": "webhook", "url": url, "topics": ["job_failed", "queue_done"]}
        (tmp_path / "alerts.json").write_text(json.dumps({"channels": [channel]}))
        monkeypatch.setenv("LOOPLAB_ALERTS", str(tmp_path / "alerts.json"))
        sched = Scheduler(eng, kinds=fake_jobs, progress=False)
        nan = Finding(Rule.NON_FINITE, Level.ERROR, 5, "train_loss", math.nan, "train_loss is nan at step 5")
        sched._record(ids[0], 1, TaskResult("failed", nan.message, finding=nan))
        sched._record(ids[1], 1, TaskResult("failed", "Traceback ...\nOSError: node gone", fault="machine"))
        assert alerts.flush(eng, sched.alerts, 5)["left"] == 0
    by_job = {}
    for _, body in hook.requests:
        by_job.setdefault(body["job_id"], []).append((body["topic"], body["rule"]))
    assert by_job == {ids[0]: [("health", "non_finite")]}  # the machine's fault: retried, no alert yet


def test_two_databases_never_share_an_alert_id(tmp_path):
    cfg = alerts.AlertConfig((alerts.channel("c", {"type": "webhook", "url": "http://127.0.0.1:9/x"}),))
    got = []
    for name in ("a", "b"):
        eng = engine(f"sqlite:///{tmp_path / name}.db")
        first = alerts.ensure_identity(eng)
        assert alerts.ensure_identity(eng) == first  # stored: the same on every use
        got.append(
            alerts.notify(eng, cfg, "job_failed", "job 1 failed", "boom", group="job_failed:1:1", now=1e9)
        )
    assert got[0] != got[1] and all(got)


# ---------------------------------------------------------------- whose fault


def _chain(outer: BaseException, inner: BaseException) -> BaseException:
    try:
        try:
            raise inner
        except BaseException as e:
            raise outer from e
    except BaseException as e:
        return e


def test_a_program_error_is_told_from_a_machine_fault():
    from looplab.orchestrator.task import _disk_full, _errors, _out_of_memory

    def fault(e: BaseException):
        return faults.classify(_errors(e), _out_of_memory(e) or _disk_full(e))

    shape = RuntimeError("The size of tensor a (128) must match the size of tensor b (64) at dimension 1")
    assert fault(shape) == faults.Fault.PROGRAM
    assert fault(IndexError("index out of range in self")) == faults.Fault.PROGRAM
    assert fault(ConfigError("lr: expected a number > 0, got 'x'")) == faults.Fault.PROGRAM
    assert fault(_chain(RuntimeError("a rank failed"), TypeError("bad operand"))) == faults.Fault.PROGRAM
    assert fault(OSError(errno.ENOSPC, "No space left on device")) == faults.Fault.MACHINE
    assert fault(RuntimeError("CUDA out of memory. Tried to allocate 2 GiB")) == faults.Fault.MACHINE
    assert fault(MemoryError()) == faults.Fault.MACHINE
    assert fault(ConnectionRefusedError(111, "refused")) == faults.Fault.MACHINE
    assert fault(type("OperationalError", (Exception,), {})("server closed the connection")) == "machine"
    assert fault(_chain(ValueError("bad"), OSError(errno.ENOSPC, "full"))) == faults.Fault.MACHINE
    assert fault(RuntimeError("something else")) is None  # unknown: retried, as before


def test_a_program_error_is_final_and_says_so_unless_the_grid_asks(migrated_db_url):
    from looplab.orchestrator.scheduler import Scheduler
    from looplab.orchestrator.task import TaskResult

    eng = engine(migrated_db_url)
    grids = [
        Grid("p", base={"tokens": 100}, max_attempts=3),
        Grid("q", base={"tokens": 101}, max_attempts=3, health={"retry_program_errors": True}),
    ]
    ids, _ = jobqueue.submit(eng, grids, fake_jobs)
    sched = Scheduler(eng, kinds=fake_jobs, progress=False)
    error = IndexError("index out of range in self")
    note = faults.program_note(error)
    assert note.startswith("IndexError: index out of range in self (a program error:")
    for j in ids:
        assert jobqueue.claim(eng, j, "driver", f"/tmp/p{j}") == 1
        sched._record(j, 1, TaskResult("failed", note + "Traceback ...", fault=faults.Fault.PROGRAM))
    assert jobqueue.statuses(eng, ids) == {ids[0]: "failed", ids[1]: "queued"}
    with eng.connect() as conn:
        err = conn.execute(sa.text("SELECT error FROM jobs WHERE id = :j"), {"j": ids[0]}).scalar_one()
    assert err.splitlines()[0].startswith("IndexError: index out of range in self")
    assert faults.retried(None, faults.Fault.MACHINE, HealthSettings()) is True
    assert faults.retried(None, None, HealthSettings()) is True
