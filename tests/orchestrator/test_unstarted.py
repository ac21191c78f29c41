"""A job whose Ray task is not started launch after launch (orchestrator/ray_watch.py `unstarted`): seen
in the soak of seed 2026, where a depth sweep was launched, not started, ended and queued again ten
times and more until the soak gave up. The rule on the fakes of tests/orchestrator/test_ray_watch.py (a clock of
the test's, a driver that collects what it is handed), and `placed` on a real local Ray."""

from __future__ import annotations

import re
import threading
import time
import types

from looplab.orchestrator import faults, ray_watch
from looplab.orchestrator.health import HealthSettings, Level, Rule
from tests.orchestrator.test_ray_watch import ONE, Clock, Driver

WHERE = "Ray lists it PENDING_NODE_ASSIGNMENT on node 5a1f"


def driver_with(monkeypatch, clock: Clock) -> Driver:
    import ray

    monkeypatch.setattr(ray_watch, "placed", lambda ref: WHERE, raising=False)  # the state API
    cancelled: list = []  # (Ray's own cancel would start a local Ray for a fake ref)
    monkeypatch.setattr(ray, "cancel", lambda ref, force: cancelled.append((ref, force)))
    driver = Driver(ray_watch.RayWatch(30.0, probe=lambda: True, clock=clock))
    driver.findings = []  # the scheduler's: the driver's own findings, waiting for the database
    driver.running = {}
    driver.cancelled = cancelled
    return driver


def no_start(driver: Driver, clock: Clock, job: int, n: int):
    """Launch attempt `n` of `job`, let 60 s and a bit pass without a start, run the rule; its result."""
    ref = f"ref-{job}-{n}"
    driver.running[ref] = (job, n, ONE)
    driver.ray_watch.launched(job)
    clock.t += 61
    ray_watch.unstarted(driver, clock.t)
    assert ref not in driver.running and driver.cancelled[-1] == (ref, True)
    got_job, got_n, result = driver.collected[-1]
    assert (got_job, got_n) == (job, n)
    return result


def test_a_job_not_started_again_and_again_warns_at_the_second_and_fails_at_the_fourth(monkeypatch):
    clock = Clock()
    driver = driver_with(monkeypatch, clock)
    first = no_start(driver, clock, 7, 1)
    assert str(first.outcome) == "interrupted" and driver.findings == []  # once: a lease lost, as before
    assert WHERE in first.error and WHERE in driver.said[-1]  # where Ray put it, named
    for n in (2, 3):
        result = no_start(driver, clock, 7, n)
        assert str(result.outcome) == "interrupted"  # still queued again, and costs no attempt
        job, attempt, finding = driver.findings[-1]
        assert (job, attempt, finding.rule, finding.level) == (7, n, Rule.UNSTARTED, Level.WARNING)
        assert f"{n} launches in a row" in finding.message and "ray status" in finding.message
    assert len(driver.findings) == 2
    last = no_start(driver, clock, 7, 4)
    assert str(last.outcome) == "failed" and last.fault == faults.Fault.MACHINE
    assert last.finding.rule == Rule.UNSTARTED and last.finding.level == Level.ERROR
    assert "looplab retry 7" in last.error and "ray status" in last.error and WHERE in last.error
    # the finding stops it: no retry of a launch that would wait the same way
    assert faults.retried(last.finding, last.fault, HealthSettings()) is False
    assert len(driver.findings) == 2  # the end's finding is the result's own, not a second one
    assert "the job failed" in driver.said[-1] and 7 not in driver.ray_watch.no_starts


def test_a_task_that_started_ends_the_count_and_other_jobs_have_their_own(monkeypatch):
    clock = Clock()
    driver = driver_with(monkeypatch, clock)
    no_start(driver, clock, 7, 1)
    no_start(driver, clock, 9, 1)
    assert driver.ray_watch.no_starts == {7: 1, 9: 1}
    driver.running["ref-7-2"] = (7, 2, ONE)
    driver.ray_watch.launched(7)
    driver.ray_watch.started(7)  # its task said it started: the count ends
    del driver.running["ref-7-2"]
    assert driver.ray_watch.no_starts == {9: 1}
    outcomes = [str(no_start(driver, clock, 7, n).outcome) for n in (3, 4, 5)]
    assert outcomes == ["interrupted"] * 3  # three in a row since the start: under the bound of four
    assert str(no_start(driver, clock, 9, 2).outcome) == "interrupted"  # job 9: its second
    assert str(no_start(driver, clock, 7, 6).outcome) == "failed"


def test_placed_names_the_free_resources_the_state_and_node_and_never_waits_past_its_bound():
    def free():
        return "Ray's cluster has free: CPU 0 of 2"

    task = types.SimpleNamespace(state="PENDING_NODE_ASSIGNMENT", node_id=None)
    said = ray_watch.placed("ref", get=lambda ref: task, free=free)
    assert (
        said
        == "Ray's cluster has free: CPU 0 of 2; Ray lists it PENDING_NODE_ASSIGNMENT on no node yet (waiting for one with room)"
    )
    task = types.SimpleNamespace(state="PENDING_ARGS_AVAIL", node_id="abcd")
    assert ray_watch.placed("ref", get=lambda ref: [task], free=free).endswith(
        "Ray lists it PENDING_ARGS_AVAIL on node abcd"
    )
    assert "does not know" in ray_watch.placed("ref", get=lambda ref: None, free=free)

    def refuses(*ref):
        raise ConnectionError("no dashboard")

    said = ray_watch.placed("ref", get=refuses, free=refuses)
    assert said == (
        "Ray's free resources unknown (ConnectionError: no dashboard); "
        "where Ray put it is unknown (its state API: ConnectionError: no dashboard)"
    )
    never = threading.Event()
    t0 = time.monotonic()
    said = ray_watch.placed(
        "ref", wait_s=0.3, get=lambda ref: never.wait(30), free=free
    )  # a head that never answers
    assert (
        time.monotonic() - t0 < 2
        and said == "Ray's cluster has free: CPU 0 of 2; (no answer from Ray in 0.3 s)"
    )
    never.set()


def test_placed_on_a_real_ray_task_that_cannot_start_answers_within_its_bound(ray_cluster):
    """A task asking for a resource no node has waits for ever, as job 51's did; the session's Ray runs
    without the dashboard, so the state API cannot say where: that is what is said, within the bound."""
    ray = ray_cluster

    @ray.remote(resources={"no-such-node": 1}, num_cpus=0)
    def never() -> int:
        return 1

    ref = never.remote()
    try:
        t0 = time.monotonic()
        said = ray_watch.placed(ref, wait_s=3.0)
        assert time.monotonic() - t0 < 3.5, said
        # the session's Ray: 2 CPUs and 2 logical GPUs (what other tests of the session hold aside)
        assert re.match(r"Ray's cluster has free: CPU [\d.]+ of 2, GPU [\d.]+ of 2; ", said), said
        assert "where Ray put it is unknown" in said or "Ray lists it" in said, said
    finally:
        ray.cancel(ref, force=True)


def test_a_job_whose_task_ray_never_starts_ends_failed_after_four_launches_with_its_findings(
    tmp_path, ray_cluster, monkeypatch
):
    """The real driver, database and Ray: a placement group holds every CPU of the session's Ray aside
    (what a gang's group left behind would do) while the driver's admission, which counts the cluster's
    CPUs, believes one free. The job's task waits each time; the driver ends it failed at the 4th
    no-start instead of queueing it again for ever, and says why."""
    from ray.util.placement_group import placement_group, remove_placement_group

    from looplab.orchestrator import Grid, Queue, scheduler
    from tests.db_rows import rows
    from tests.orchestrator import fake_jobs

    ray = ray_cluster
    placements: list = []  # the strategy each launch asked Ray for (ray_watch.relaunch_strategy)

    def launch(*args):
        placements.append(args[8] if len(args) > 8 else None)
        return real_launch(*args)

    real_launch = scheduler.launch
    monkeypatch.setattr(scheduler, "launch", launch)
    group = placement_group([{"CPU": ray.cluster_resources()["CPU"]}])
    ray.get(group.ready(), timeout=120)
    try:
        q = Queue(db=tmp_path / "q.db", artifacts=tmp_path / "art", kinds=fake_jobs)
        (job,) = q.submit(Grid("never", job="noop", max_attempts=10))
        t = threading.Thread(
            target=q.run,
            kwargs=dict(until_empty=True, progress=False, poll_s=0.1, ray_start_s=1.0),
            daemon=True,
        )
        t.start()
        t.join(180)
        assert not t.is_alive(), "the driver still loops"
    finally:
        remove_placement_group(group)
    ((status, error),) = rows(q, "SELECT status, error FROM jobs WHERE id=:j", j=job)
    assert status == "failed" and "4 launches in a row" in error and f"looplab retry {job}" in error
    assert "Ray's cluster has free: CPU 0 of " in error  # what held it: no CPU free, though none was booked
    outcomes = rows(q, "SELECT n, outcome FROM attempts WHERE job_id=:j ORDER BY n", j=job)
    assert outcomes == [(1, "interrupted"), (2, "interrupted"), (3, "interrupted"), (4, "failed")]
    found = rows(q, "SELECT attempt, rule, level FROM health_events WHERE job_id=:j ORDER BY id", j=job)
    assert found == [(2, "unstarted", "warning"), (3, "unstarted", "warning"), (4, "unstarted", "error")]
    # the first launch takes Ray's default; each after a no-start asks through a class of its own: a
    # soft affinity to the session's one node (a wedged lease request of the default class is bypassed)
    node = ray.get_runtime_context().get_node_id()
    assert placements[0] is None and len(placements) == 4, placements
    assert [(p.node_id, p.soft) for p in placements[1:]] == [(node, True)] * 3


def test_a_relaunch_after_a_no_start_asks_through_a_scheduling_class_of_its_own():
    """The launch after the `times`th no-start in a row: Ray's default when none; else a soft affinity
    to the live nodes with CPUs in turn (dead and CPU-less nodes, the head of a GPU-less split, skipped),
    so consecutive relaunches do not queue behind one lease request; no node list leaves the default."""
    nodes = [
        {"NodeID": "c" * 56, "Alive": True, "Resources": {"CPU": 2.0}},
        {"NodeID": "a" * 56, "Alive": True, "Resources": {"CPU": 1.0}},
        {"NodeID": "b" * 56, "Alive": False, "Resources": {"CPU": 4.0}},
        {"NodeID": "d" * 56, "Alive": True, "Resources": {"CPU": 0.0, "GPU": 1.0}},
    ]
    assert ray_watch.relaunch_strategy(0, nodes) is None
    chosen = [ray_watch.relaunch_strategy(t, nodes) for t in (1, 2, 3)]
    assert [(s.node_id, s.soft) for s in chosen] == [("a" * 56, True), ("c" * 56, True), ("a" * 56, True)]
    assert ray_watch.relaunch_strategy(1, [nodes[2], nodes[3]]) is None  # no live node with CPUs
    assert ray_watch.relaunch_strategy(1, [{"NodeID": "x"}]) is None  # a node Ray lists without state
