"""The driver's watch on its Ray head (orchestrator/ray_watch.py): the rule on a clock of the test's, and
the probe thread on a probe that blocks as a call to an unreachable head does. The driver cut off
from the head on the namespace cluster is tests/cluster/test_faults.py's."""

from __future__ import annotations

import threading
import time
import types

import pytest

from looplab.model.errors import ConfigError
from looplab.orchestrator import ray_watch, settings


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_the_cluster_is_lost_only_after_the_bound_without_an_answer():
    clock = Clock()
    watch = ray_watch.RayWatch(5.0, probe=lambda: True, clock=clock)
    for _ in range(10):  # answers every second: never lost
        clock.t += 1
        watch.beat(clock.t)
        watch.observe(True)
        assert watch.lost(clock.t) is None
    for _ in range(5):  # the head answers no more (or lists this node dead): 5 s are within the bound
        clock.t += 1
        watch.beat(clock.t)
        watch.observe(False, "ConnectionError: head unreachable")
        assert watch.lost(clock.t) is None
    clock.t += 1
    watch.beat(clock.t)
    why = watch.lost(clock.t)
    assert why is not None and why.startswith("Ray cluster lost") and "head unreachable" in why


def test_a_driver_that_stood_still_does_not_take_its_freeze_for_a_lost_cluster():
    clock = Clock()
    watch = ray_watch.RayWatch(5.0, probe=lambda: True, clock=clock)
    watch.beat(clock.t)
    clock.t += 60  # the host paused for a minute: the loop and the probe thread stood still together
    watch.beat(clock.t)
    assert watch.lost(clock.t) is None  # the count starts again from the resume
    for _ in range(10):  # 5 s of running (a pass every half second) with no answer: within the bound
        clock.t += 0.5
        watch.beat(clock.t)
    assert watch.lost(clock.t) is None
    clock.t += 0.5
    watch.beat(clock.t)
    assert watch.lost(clock.t) is not None  # 5.5 s of running: lost


def test_a_probe_blocked_on_an_unreachable_head_makes_the_cluster_lost_within_the_bound():
    answer = threading.Event()
    answer.set()
    calls = []

    def probe() -> bool:
        calls.append(time.monotonic())
        answer.wait()  # blocks while the head does not answer, as a GCS call does
        return True

    watch = ray_watch.RayWatch(0.6, every_s=0.05, probe=probe).start()
    try:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 0.5:
            watch.beat(time.monotonic())
            assert watch.lost(time.monotonic()) is None
            time.sleep(0.05)
        answer.clear()  # the head stops answering
        cut = time.monotonic()
        while (why := watch.lost(time.monotonic())) is None:
            watch.beat(time.monotonic())
            assert time.monotonic() - cut < 3, "never lost"
            time.sleep(0.05)
        # the bound, counted from the last answer (at most one probe period before the cut), plus one period
        assert 0.6 - 0.05 <= time.monotonic() - cut < 0.6 + 1.0, why
        assert len(calls) >= 5
    finally:
        answer.set()
        watch.stop()


def test_the_bound_is_a_setting_named_in_its_error(monkeypatch):
    monkeypatch.setenv("LOOPLAB_RAY_LOST_S", "12")
    assert settings.ray_lost_seconds() == 12
    monkeypatch.setenv("LOOPLAB_RAY_LOST_S", "0")
    with pytest.raises(ConfigError, match="LOOPLAB_RAY_LOST_S"):
        settings.ray_lost_seconds()
    monkeypatch.delenv("LOOPLAB_RAY_LOST_S")
    assert settings.ray_lost_seconds() == ray_watch.DEFAULT_LOST_AFTER_S


ONE = types.SimpleNamespace(request=types.SimpleNamespace(workers=1))  # an attempt's booking: one worker


class Driver:
    """What `released` uses of the scheduler: its running attempts (what each booked), their step clocks,
    the outcomes it records, its log."""

    def __init__(self, watch: ray_watch.RayWatch, write_fails: Exception | None = None) -> None:
        self.ray_watch, self.write_fails = watch, write_fails
        self.running = {"ref-a": (7, 2, ONE), "ref-b": (9, 1, ONE)}
        self.clocks: dict = {}
        self.held = types.SimpleNamespace(outcomes=[])
        self.settings = types.SimpleNamespace(ray_start_s=60.0, gang_stall_s=600.0)
        self.collected: list = []
        self.recorded: list = []
        self.said: list[str] = []

    def _write_held(self) -> None:
        if self.write_fails is not None:
            raise self.write_fails
        self.recorded, self.held.outcomes = self.held.outcomes, []

    def _say(self, message: str) -> None:
        self.said.append(message)

    def _collect(self, ref, dropped) -> None:
        job, n, _ = self.running.pop(ref)
        self.collected.append((job, n, dropped))


def test_a_lost_cluster_releases_every_running_attempt_as_interrupted_and_stops_the_driver():
    clock = Clock()
    driver = Driver(ray_watch.RayWatch(5.0, probe=lambda: True, clock=clock))
    clock.t += 1
    assert ray_watch.released(driver) is False and len(driver.running) == 2  # within the bound
    driver.ray_watch.observe(False, "TimeoutError: the head did not answer")
    clock.t += 1  # the watch's clock is the real monotonic one in `released`: move it past the bound
    driver.ray_watch.last_ok = driver.ray_watch.counting_from = time.monotonic() - 6
    driver.ray_watch.last_beat = time.monotonic()
    assert ray_watch.released(driver) is True and driver.ray_watch.gone
    assert driver.running == {}
    assert [(j, n, str(r.outcome)) for j, n, r in driver.recorded] == [
        (7, 2, "interrupted"),
        (9, 1, "interrupted"),
    ]
    assert all(r.error.startswith("Ray cluster lost") for *_, r in driver.recorded)  # costs no max_attempts
    assert "released its 2 running job(s) [7, 9]" in driver.said[-1]


def test_a_lost_cluster_with_the_database_away_too_leaves_the_jobs_to_a_takeover():
    import sqlalchemy as sa

    refused = type("OperationalError", (Exception,), {})("connection refused")  # as the driver's client says
    down = sa.exc.OperationalError("SELECT 1", {}, refused)
    driver = Driver(ray_watch.RayWatch(5.0, probe=lambda: True), write_fails=down)
    driver.ray_watch.last_ok = driver.ray_watch.counting_from = time.monotonic() - 6
    driver.ray_watch.last_beat = time.monotonic()
    assert ray_watch.released(driver) is True
    assert "a takeover after the grace will" in driver.said[-1]
    boom = Driver(ray_watch.RayWatch(5.0, probe=lambda: True), write_fails=ValueError("a bug"))
    boom.ray_watch.last_ok = boom.ray_watch.counting_from = time.monotonic() - 6
    boom.ray_watch.last_beat = time.monotonic()
    with pytest.raises(ValueError):  # anything but an outage is not swallowed
        ray_watch.released(boom)


def test_an_attempt_whose_task_never_started_is_ended_after_the_bound_and_one_that_started_is_not(
    monkeypatch,
):
    import ray

    # Ray's own cancel of a fake ref would start a local Ray in this process (ray.init by itself), and
    # a later test's session Ray (conftest ray_cluster) would then refuse to start
    cancelled: list = []
    monkeypatch.setattr(ray, "cancel", lambda ref, force: cancelled.append(ref))
    monkeypatch.setattr(ray_watch, "placed", lambda ref: "where Ray put it is unknown")
    clock = Clock()
    driver = Driver(ray_watch.RayWatch(30.0, probe=lambda: True, clock=clock))
    driver.ray_watch.launched(7)
    driver.ray_watch.launched(9)
    clock.t += 10
    driver.ray_watch.started(9)  # job 9's task said it started
    ray_watch.unstarted(driver, clock.t + 50)  # 60 s after the launch: within the bound
    assert driver.collected == []
    ray_watch.unstarted(driver, clock.t + 51)
    assert [(j, n, str(r.outcome)) for j, n, r in driver.collected] == [(7, 2, "interrupted")]
    assert driver.collected[0][2].error.startswith("Ray did not start its task within 60 s")
    assert cancelled == ["ref-a"]  # job 7's task, cancelled
    assert list(driver.running.values()) == [(9, 1, ONE)] and "job 7: attempt 2" in driver.said[-1]
    ray_watch.unstarted(driver, clock.t + 500)  # job 9 started: never ended by this rule
    assert len(driver.collected) == 1
