"""The soak cannot pass without testing (tests/cluster/soak_verdict.py): each rule that fails it, shown
failing, without a cluster (the soak itself is tests/cluster/test_soak.py). The refused writes are
counted from the lines the queue really logs: a takeover made on a SQLite queue, the replaced attempt's
events and outcome refused."""

from __future__ import annotations

import logging
import time
from collections import Counter

import sqlalchemy as sa

from looplab.orchestrator import Grid, jobqueue, recovery
from looplab.orchestrator.db import engine
from looplab.orchestrator.drivers import DriverId
from looplab.orchestrator.states import AttemptOutcome
from looplab.orchestrator.writer import write_events
from looplab.workers.reporter import Event
from tests.cluster import soak, soak_verdict
from tests.cluster.soak import Fault
from tests.orchestrator import fake_jobs


def fault(kind="kill", target="worker1", met=1, attempts=(), fence=False) -> Fault:
    return Fault(kind, target, 1.0, 1.0, met=met, met_attempts=list(attempts), fence=fence)


def test_every_schedule_has_one_fence_fault_long_enough_for_a_takeover():
    for seed in (41, 7, 4242):
        got = soak.plan(seed, 12)
        fences = [f for f in got if f.fence]
        assert len(got) == 12 and len(fences) == 1
        assert (fences[0].kind, fences[0].target, fences[0].hold_s) == ("pause", "driver2", soak.FENCE_HOLD_S)
        assert soak.FENCE_HOLD_S > 2 * soak.GRACE_S  # the grace, then the other driver's recovery poll
        assert {f.kind for f in got if not f.fence} == set(soak.TARGETS)
    assert [f.fence for f in soak.plan(3, 1)] == [True]


def test_a_fault_is_armed_by_a_job_on_its_own_target():
    nodes = {"aaaaaaaaaaaa": "worker1", "bbbbbbbbbbbb": "worker2"}
    on = soak_verdict.on_target
    assert on("kill", "worker1", "aaaaaaaaaaaa:41", "head", nodes)
    assert not on("kill", "worker1", "bbbbbbbbbbbb:41", "head", nodes)  # the other worker's job
    assert not on("pause", "worker2", "driver@head:9", "head", nodes)  # claimed, not yet started
    assert on("cut", "worker2/head", "bbbbbbbbbbbb:7", "head", nodes)
    assert on("pause", "driver2", "cccccccccccc:5", "driver2", nodes)
    assert not on("cut", "driver2/pg", "aaaaaaaaaaaa:5", "head", nodes)  # the head's driver's job
    assert on("cut", "head/pg", "aaaaaaaaaaaa:5", "head", nodes)
    assert on("postgres", "pg", "x:1", "driver2", nodes) and on("disk", "shared", None, None, nodes)
    # a gang's worker names its controller's node (here the head's); its ranks are where Ray Train put them
    gang = "dddddddddddd:3 (2 workers)"
    assert not on("pause", "worker2", gang, "head", nodes)  # no rank there: not met
    assert on("pause", "worker2", gang, "head", nodes, frozenset({"worker1", "worker2"}))
    assert not on("kill", "worker1", "bbbbbbbbbbbb:41", "head", nodes, frozenset({"worker1"}))  # not a gang


def test_the_soak_fails_when_a_fault_met_nothing_or_the_fence_was_never_exercised():
    fence = fault("pause", "driver2", attempts=[(5, 1)], fence=True)
    ok = [fault(), fence]
    refused = Counter({(5, 1): 2})
    assert soak_verdict.problems(ok, 1, refused) == []
    assert soak_verdict.problems([fault(met=0), fence], 1, refused) == [
        "fault 1 (kill worker1) met no running job"
    ]
    assert soak_verdict.problems(ok, 0, refused)[0] == "no takeover: the fence was never exercised"
    assert soak_verdict.problems(ok, 1, Counter()) == ["no late write refused: the fence was never exercised"]
    # the fence fault's own attempts are reported, not binding (another takeover exercised the fence)
    assert soak_verdict.fence_notes(ok, refused, {(5, 1)}) == []
    assert soak_verdict.fence_notes(ok, Counter({(6, 2): 1}), {(5, 1)}) == [
        "fault 2 (fence): no late write of job 5 attempt 1 was refused"
    ]
    assert soak_verdict.fence_notes(ok, refused, set()) == [
        "fault 2 (fence): job 5 attempt 1 was not taken over"
    ]


def test_a_late_log_line_of_an_attempt_taken_over_is_found():
    taken = [(5, 1, 100.0)]
    fine = [(5, 1, 99.0), (5, 1, 100.5), (5, 2, 300.0), (6, 1, 500.0)]
    assert soak_verdict.late_logs(taken, fine) == []
    assert soak_verdict.late_logs(taken, [*fine, (5, 1, 140.0)]) == [(5, 1, 140.0)]


def test_the_refused_writes_are_counted_per_attempt_from_the_queues_own_lines(tmp_path, caplog):
    eng = engine(f"sqlite:///{tmp_path}/q.db")
    (jid,) = jobqueue.submit(eng, [Grid("v", job="noop")], fake_jobs)[0]
    assert jobqueue.claim(eng, jid, "driver2", "") == 1
    with eng.begin() as conn:
        conn.execute(sa.text("UPDATE jobs SET heartbeat_at = heartbeat_at - 1000"))
    assert recovery.recover_stale(eng, grace_s=8) == [jid]
    assert jobqueue.claim(eng, jid, "head", "") == 2
    caplog.set_level(logging.WARNING)
    late = Event("log", time.time(), {"level": "INFO", "message": "late"})
    write_events(eng, [(jid, 1, [late, late])])  # the paused driver comes back: refused
    jobqueue.finish(eng, jid, 1, AttemptOutcome.FAILED, "cancelled")  # and its outcome: refused
    write_events(eng, [(jid, 2, [late])])  # the owner's: written
    assert soak_verdict.refusals(caplog.text) == Counter({(jid, 1): 2})
    with eng.connect() as conn:
        logs = [tuple(r) for r in conn.execute(sa.text("SELECT job_id, attempt, ts FROM job_logs"))]
        taken = [
            tuple(r) for r in conn.execute(sa.text("SELECT job_id, n, ended_at FROM attempts WHERE n = 1"))
        ]
    assert soak_verdict.late_logs(taken, logs) == []


class FakeLab:
    """What `Soak.arm` asks of the cluster, on a local SQLite queue: its SQL, the worker hosts' Ray node
    ids, drivers and Ray nodes that stay up."""

    class Up:
        def poll(self):
            return None

    def __init__(self, eng) -> None:
        self.eng = eng
        self.ray = {h: self.Up() for h in soak.WORKERS}

    def query(self, sql: str) -> list[list]:
        with self.eng.connect() as conn:
            return [list(r) for r in conn.execute(sa.text(sql))]

    def node_id(self, host: str) -> str:
        return {"worker1": "a", "worker2": "b"}[host] * 56


def test_a_fault_waits_for_a_job_on_its_target_and_counts_those_it_meets(tmp_path):
    eng = engine(f"sqlite:///{tmp_path}/q.db")
    ids = jobqueue.submit(eng, [Grid("a", job="noop", sweep={"tag": [1, 2, 3]})], fake_jobs)[0]
    for jid, worker, driver in zip(
        ids, ["a" * 12 + ":7", "c" * 12 + ":8"], ["head", "driver2"], strict=False
    ):
        jobqueue.claim(eng, jid, driver, "", DriverId(driver, 1, 0.0))
        with eng.begin() as conn:
            jobqueue.record_started(conn, jid, 1, worker, None)
    run = soak.Soak(FakeLab(eng), [], 3, drivers={"head": FakeLab.Up()}, arm_timeout_s=0)
    met = {}
    for kind, target in [("kill", "worker1"), ("pause", "worker2"), ("pause", "driver2"), ("postgres", "pg")]:
        f = fault(kind, target, met=None)
        run.arm(f)
        met[target] = (f.met, f.met_attempts)
    assert met == {
        "worker1": (1, [(ids[0], 1)]),
        "worker2": (0, []),  # nothing runs there: with no time to wait, it meets none
        "driver2": (1, [(ids[1], 1)]),
        "pg": (2, [(ids[0], 1), (ids[1], 1)]),
    }
    assert any("no job running on worker2 after 0 s: it meets none" in e for e in run.events)
    assert soak_verdict.problems([fault("pause", "worker2", met=0)], 1, Counter({(1, 1): 1})) != []
