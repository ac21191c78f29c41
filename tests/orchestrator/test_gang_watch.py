"""The gang watch (orchestrator/gang_watch.py): a gang whose step stands still past its limit is stopped
whole and failed as the machine's fault; a progressing gang, a one-worker job and the driver's own freeze
are not. The rule on a fake driver (what `check` uses of the scheduler); the stop on the cluster:
tests/cluster/test_faults.py::test_a_gang_with_a_frozen_rank_is_stopped_whole_and_resumes_from_its_checkpoint."""

from __future__ import annotations

import types

import pytest

from looplab.model.errors import ConfigError
from looplab.orchestrator import gang_watch, ray_watch, settings
from looplab.orchestrator.health import HealthSettings, StepClock
from tests.orchestrator.test_ray_watch import Clock, Driver


def booking(workers: int) -> types.SimpleNamespace:
    return types.SimpleNamespace(request=types.SimpleNamespace(workers=workers))


@pytest.fixture
def driver(monkeypatch):
    clock = Clock()
    made = Driver(ray_watch.RayWatch(30.0, probe=lambda: True, clock=clock))
    made.settings.gang_stall_s = 20.0
    made.running = {"gang": (7, 2, booking(2)), "solo": (9, 1, booking(1))}
    made.clocks = {7: StepClock(HealthSettings()), 9: StepClock(HealthSettings())}
    made.killed = []

    def kill(d, ref, job, workers=1) -> str:
        d.killed.append((ref, job, workers))
        return "its placement group 0123456789ab removed"

    monkeypatch.setattr(gang_watch, "kill", kill)
    made.ray_watch.counting_from = 0.0
    return made


def test_a_gang_standing_still_past_its_limit_is_stopped_whole_and_failed_as_the_machines_fault(driver):
    driver.clocks[7].advance(40, 1000.0, 1000.0, 150)
    gang_watch.check(driver, 100.0)  # first seen at step 40
    gang_watch.check(driver, 120.0)  # 20 s: within the limit
    assert driver.killed == [] and driver.collected == []
    gang_watch.check(driver, 120.5)
    assert driver.killed == [("gang", 7, 2)]
    ((job, n, result),) = driver.collected
    assert (job, n, str(result.outcome), str(result.fault)) == (7, 2, "failed", "machine")
    assert result.error == (
        "gang stalled: no step after step 40 for 20 s (limit 20 s): stopped whole, its placement group "
        "0123456789ab removed; retried from its checkpoint"
    ), result.error
    assert "job 7: attempt 2: gang stalled" in driver.said[-1]
    assert list(driver.running) == ["solo"] and driver.ray_watch.gangs == {}


def test_a_progressing_gang_a_one_worker_job_and_the_drivers_own_freeze_are_not_stopped(driver):
    driver.clocks[9].advance(5, 1000.0, 1000.0, 150)  # the one-worker job stands still from here on
    for t in range(0, 100, 10):  # the gang makes a step every 10 s: never 20 s without one
        driver.clocks[7].advance(t // 10 + 1, 1000.0 + t, 1000.0 + t, 150)
        gang_watch.check(driver, 100.0 + t)
    assert driver.killed == [] and driver.collected == []  # nor the job of one worker, still for 90 s
    del driver.running["gang"]
    driver.running["gang2"] = (8, 1, booking(2))
    driver.clocks[8] = StepClock(HealthSettings())
    gang_watch.check(driver, 1000.0)
    gang_watch.check(driver, 1900.0)  # still starting (no step yet) after 900 s: not judged before its first
    assert driver.killed == [] and list(driver.ray_watch.gangs) == []  # the gang that ended is forgotten
    driver.clocks[8].advance(1, 2000.0, 2000.0, 150)
    gang_watch.check(driver, 2000.0)
    driver.ray_watch.counting_from = 2015.0  # the driver stood still (its host paused) until 2015
    gang_watch.check(driver, 2030.0)  # 15 s counted, not 30
    assert driver.killed == []
    gang_watch.check(driver, 2035.5)
    assert [(j, str(r.outcome)) for j, _, r in driver.collected] == [(8, "failed")]
    assert driver.collected[0][2].error.startswith("gang stalled: no step after step 1 for 20 s")


def test_a_slow_gang_gets_its_stall_factor_times_its_median_step(driver):
    for step in range(1, 6):  # 10 s a step: 20 x 10 = 200 s, longer than the 20 s floor
        driver.clocks[7].advance(step, 1000.0 + 10 * step, 1000.0 + 10 * step, 150)
    gang_watch.check(driver, 0.0)
    gang_watch.check(driver, 199.0)
    assert driver.killed == []
    gang_watch.check(driver, 201.0)
    assert driver.killed == [("gang", 7, 2)]


def test_the_gang_stall_setting_is_read_from_the_environment_and_checked(monkeypatch):
    monkeypatch.setenv("LOOPLAB_GANG_STALL_S", "45")
    assert settings.DriverSettings().gang_stall_s == 45.0
    monkeypatch.setenv("LOOPLAB_GANG_STALL_S", "soon")
    with pytest.raises(ConfigError, match="LOOPLAB_GANG_STALL_S"):
        settings.gang_stall_seconds()
    with pytest.raises(ConfigError, match="gang_stall_s"):
        settings.DriverSettings(gang_stall_s=0)
    monkeypatch.delenv("LOOPLAB_GANG_STALL_S")
    assert settings.DriverSettings().gang_stall_s == gang_watch.DEFAULT_GANG_STALL_S
