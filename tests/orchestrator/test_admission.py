"""The admission rule (orchestrator/admission.py) without Ray: gangs start whole or wait whole, an
oversized job is refused naming what it asks and what the cluster has, reservations protect a job of
higher effective priority, an exclusive job drains the cluster, a lost claim books nothing, the early exit,
aging, GPU packing; and the planner's simulation replays it (refused jobs, early exit, aging, gangs)."""

from __future__ import annotations

import dataclasses
import time

import pytest
import sqlalchemy as sa

from looplab.lab.planner import Estimate, Forecast, ForecastJob, simulate
from looplab.model.errors import ConfigError
from looplab.orchestrator import Grid, Queue, jobkinds, jobqueue
from looplab.orchestrator.admission import (
    Admission,
    Candidate,
    Node,
    Preempt,
    Refuse,
    Request,
    Running,
    Start,
    Stop,
    admit,
    effective_priority,
    place,
)
from tests.orchestrator import fake_jobs

GPU = Request(cpus=1, gpus=1)


def ready(*jobs: tuple[str, int, Request]) -> list[Candidate]:
    return [Candidate(name, priority, request) for name, priority, request in jobs]


def started(p) -> list[str]:
    return [s.job for s in p.starts]


def counted(candidates: list[Candidate], seen: list[str]):
    """The candidates as a lazy stream that records what the admission read."""
    for c in candidates:
        seen.append(c.job)
        yield c


# ---------------------------------------------------------------- gangs


@pytest.mark.parametrize("nodes", [[Node(8, (1.0, 1.0, 1.0))], [Node(2, (1.0,))] * 3], ids=["1x3", "3x1"])
def test_two_2_worker_jobs_on_3_worker_slots_never_start_partially(nodes):
    gang = Request(cpus=1, gpus=1, workers=2)
    first = admit(ready(("a", 0, gang), ("b", 0, gang)), nodes)
    assert started(first) == ["a"] and [c.job for c in first.reserved] == ["b"]
    (a,) = first.starts
    assert len(a.placement.bundles) == 2 and len({(b.node, b.gpus) for b in a.placement.bundles}) == 2
    # while a runs, b still waits whole: one slot is free, it asks for two
    again = admit(ready(("b", 0, gang)), nodes, [a.running])
    assert started(again) == [] and [c.job for c in again.reserved] == ["b"]
    # the free slot goes to a one-worker job of b's priority (gap filling), never to half of b
    fill = admit(ready(("b", 0, gang), ("c", 0, GPU)), nodes, [a.running])
    assert started(fill) == ["c"]
    assert admit(ready(("b", 1, gang), ("c", 0, GPU)), nodes, [a.running]).starts == []  # b reserves it
    # once a has ended, b starts with both workers at once
    assert started(admit(ready(("b", 0, gang)), nodes)) == ["b"]


def test_gang_bundles_each_fit_one_node_and_may_share_one():
    two_gpu_worker = Request(cpus=1, gpus=2, workers=2)
    nodes = [Node(4, (1.0, 1.0)), Node(4, (1.0, 1.0))]
    (s,) = admit(ready(("g", 0, two_gpu_worker)), nodes).starts
    assert [b.node for b in s.placement.bundles] == [0, 1]
    assert s.placement.devices() == "gpu0,gpu1,node1:gpu0,node1:gpu1"
    half = Request(cpus=1, gpus=0.5, workers=2)
    (s,) = admit(ready(("h", 0, half)), [Node(4, (1.0, 1.0))]).starts
    assert [b.gpus for b in s.placement.bundles] == [((0, 0.5),), ((0, 0.5),)]  # packed on one device


# ---------------------------------------------------------------- refusals


def test_an_oversized_job_is_refused_naming_what_it_asks_and_what_the_cluster_has():
    cluster = [Node.with_gpus(2, 2)]
    p = admit(ready(("big", 0, Request(cpus=1, gpus=4)), ("ok", 0, GPU)), cluster)
    (refused,) = p.refused
    assert refused.job == "big" and refused.reason == (
        "needs {'num_cpus': 1.0, 'num_gpus': 4.0} but the cluster has {'CPU': 2.0, 'GPU': 2.0}: change the "
        "grid's resources or add machines"
    )
    assert started(p) == ["ok"]  # the pass goes on after a refusal
    (gang,) = admit(ready(("g", 0, Request(cpus=1, gpus=1, workers=3))), cluster).refused
    assert "3 workers of {'num_cpus': 1.0, 'num_gpus': 1.0} at once (3 CPUs, 3 GPUs in all)" in gang.reason
    # each worker must fit on one node: 2 GPUs in all, but no node has 2
    (split,) = admit(ready(("s", 0, Request(cpus=1, gpus=2))), [Node(2, (1.0,)), Node(2, (1.0,))]).refused
    assert "the cluster has {'CPU': 4.0, 'GPU': 2.0} in 2 nodes, each at most {'CPU': 2.0, 'GPU': 1.0}" in (
        split.reason
    )
    (cpu_only,) = admit(ready(("c", 0, GPU)), [Node.with_gpus(4, 0)]).refused
    assert "the cluster has {'CPU': 4.0, 'GPU': 0.0}" in cpu_only.reason


# ---------------------------------------------------------------- reservations, exclusive jobs


def test_a_reservation_protects_a_big_job_from_lower_priorities():
    cluster = [Node(4, (1.0, 1.0))]
    holder = Running(GPU, place(cluster, [], GPU))  # one GPU busy, one free
    big = Request(cpus=1, gpus=2)
    p = admit(
        ready(("big", 2, big), ("same", 2, GPU), ("low", 1, GPU), ("cpu", 1, Request(cpus=1, gpus=0))),
        cluster,
        [holder],
    )
    # its own priority may fill the gap; a lower one may not take the GPU it waits for, but may take CPUs
    assert started(p) == ["same", "cpu"] and [c.job for c in p.reserved] == ["big", "low"]
    assert started(admit(ready(("big", 2, big), ("low", 1, GPU)), cluster, [holder])) == []


def test_an_exclusive_job_drains_the_cluster_and_runs_alone():
    cluster = [Node(4, (1.0, 1.0))]
    busy = [Running(GPU, place(cluster, [], GPU))]
    alone = Request(cpus=1, gpus=1, exclusive=True)
    p = admit(ready(("x", 1, alone), ("peer", 1, GPU), ("low", 0, GPU)), cluster, busy)
    assert started(p) == ["peer"] and p.stopped is Stop.DRAINING  # "low" waits for the drain
    p = admit(ready(("x", 1, alone), ("other", 1, GPU)), cluster)  # empty cluster: it starts, alone
    assert started(p) == ["x"] and p.stopped is Stop.EXCLUSIVE_RUNS
    seen: list[str] = []
    p = admit(counted(ready(("next", 0, GPU)), seen), cluster, [p.starts[0].running])
    assert (started(p), p.stopped, seen) == ([], Stop.EXCLUSIVE_RUNS, [])  # nothing read beside it


# ---------------------------------------------------------------- preemption


def busy(cluster, *jobs: tuple[str, int, bool]) -> list[Running]:
    """Running one-GPU jobs (name, priority, preemptible now), placed one after the other."""
    out: list[Running] = []
    for name, priority, preemptible in jobs:
        out.append(Running(GPU, place(cluster, out, GPU), name, priority, preemptible))
    return out


def test_an_urgent_job_preempts_the_fewest_lowest_priority_preemptible_jobs_and_waits():
    cluster = [Node(4, (1.0, 1.0, 1.0))]
    running = busy(cluster, ("mid", 5, True), ("low", 0, True), ("pinned", 0, False))
    p = admit(ready(("urgent", 20, GPU)), cluster, running)
    assert [(d.job, d.victims) for d in p.preempts] == [("urgent", ("low",))]
    assert started(p) == [] and [c.job for c in p.reserved] == ["urgent"]  # it waits for the stop
    two = Request(cpus=1, gpus=2)
    p = admit(ready(("urgent", 20, two)), cluster, running)
    assert [d.victims for d in p.preempts] == [("low", "mid")]  # lowest first, as many as it needs
    p = admit(ready(("urgent", 20, Request(cpus=1, gpus=3))), cluster, running)
    assert p.preempts == []  # stopping every preemptible job would not make room: none is stopped


def test_preemption_needs_the_gap_an_eligible_job_and_counts_what_already_stops():
    cluster = [Node(4, (1.0,))]
    low = busy(cluster, ("low", 0, True))
    assert admit(ready(("near", 9, GPU)), cluster, low).preempts == []  # under PREEMPT_GAP (10)
    assert [d.victims for d in admit(ready(("far", 10, GPU)), cluster, low).preempts] == [("low",)]
    assert admit(ready(("far", 4, GPU)), cluster, low, preempt_gap=4).preempts != []  # the gap is a setting
    fresh = busy(cluster, ("low", 0, False))  # not checkpointed yet, or preempted lately: not now
    assert admit(ready(("far", 50, GPU)), cluster, fresh).preempts == []
    stopping = [dataclasses.replace(low[0], stopping=True)]  # asked already: nothing more to ask
    p = admit(ready(("far", 50, GPU)), cluster, stopping)
    assert p.preempts == [] and [c.job for c in p.reserved] == ["far"]
    # two urgent jobs in one pass do not both take the same victim
    cluster2 = [Node(4, (1.0, 1.0))]
    two = busy(cluster2, ("a", 0, True), ("b", 0, True))
    p = admit(ready(("u1", 30, GPU), ("u2", 30, GPU)), cluster2, two)
    assert [d.victims for d in p.preempts] == [("a",), ("b",)]
    assert all(isinstance(d, Preempt) for d in p.preempts)


def test_an_admin_s_urgent_job_may_stop_a_job_that_did_not_opt_in_and_a_member_s_may_not():
    cluster = [Node(4, (1.0,))]
    pinned = [dataclasses.replace(r, stoppable=True) for r in busy(cluster, ("pinned", 0, False))]
    assert admit(ready(("member's", 50, GPU)), cluster, pinned).preempts == []  # its owner did not opt in
    by_admin = [dataclasses.replace(c, by_admin=True) for c in ready(("admin's", 50, GPU))]
    assert [d.victims for d in admit(by_admin, cluster, pinned).preempts] == [("pinned",)]
    fresh = busy(
        cluster, ("fresh", 0, False)
    )  # not checkpointed (or preempted lately): not even for an admin
    assert admit(by_admin, cluster, fresh).preempts == []
    near = [dataclasses.replace(c, priority=9) for c in by_admin]  # the gap holds for an admin too
    assert admit(near, cluster, pinned).preempts == []


# ---------------------------------------------------------------- the incremental API


def test_a_lost_claim_or_failed_launch_books_nothing():
    cluster = [Node(2, (1.0,))]
    admission = Admission(ready(("lost", 0, GPU), ("won", 0, GPU), ("late", 0, GPU)), cluster)
    first = next(admission)
    assert isinstance(first, Start) and first.job == "lost"
    with pytest.raises(RuntimeError, match="confirm the start of 'lost'"):
        next(admission)  # a start must be confirmed first
    admission.not_started(first)  # another driver won it: its GPU stays free
    second = next(admission)
    assert second.job == "won" and second.placement.devices() == "gpu0"
    with pytest.raises(RuntimeError, match="not the start waiting"):
        admission.started(first)
    admission.started(second)  # booked: the last job finds no GPU
    assert list(admission) == [] and [c.job for c in admission.reserved] == ["late"]
    assert [s.job for s in admission.starts] == ["won"]


def test_early_exit_when_everything_is_booked_or_reserved_and_at_max_concurrent():
    cluster = [Node(1, (1.0,))]
    full = [Running(GPU, place(cluster, [], GPU))]
    nothing = Request(cpus=0, gpus=0)  # fits anywhere: only the early exit keeps it from starting
    seen: list[str] = []
    p = admit(
        counted(ready(("wait", 1, GPU), ("free", 0, nothing), ("unread", 0, nothing)), seen), cluster, full
    )
    assert started(p) == [] and p.stopped is Stop.ALL_BOOKED and seen == ["wait", "free"]
    assert started(admit(ready(("free", 0, nothing)), cluster, full)) == ["free"]  # no reservation: it starts
    seen.clear()
    p = admit(counted(ready(("a", 0, nothing), ("b", 0, nothing)), seen), cluster, full, max_concurrent=2)
    assert started(p) == ["a"] and p.stopped is Stop.MAX_CONCURRENT and seen == ["a"]
    assert admit(ready(("a", 0, GPU)), [Node(1, (1.0,))]).stopped is None  # the ready jobs ran out


def test_fractional_gpus_pack_first_fit_on_one_device():
    cluster = [Node.with_gpus(8, 2)]
    placed: list[Running] = []
    devices = []
    for gpus in (0.6, 0.6, 0.4, 1.0):
        p = place(cluster, placed, Request(cpus=1, gpus=gpus))
        devices.append(None if p is None else p.devices())
        if p is not None:
            placed.append(Running(Request(cpus=1, gpus=gpus), p))
    # 0.6 on gpu0, the next 0.6 does not fit beside it: gpu1; 0.4 fills gpu0; no whole GPU is left
    assert devices == ["gpu0", "gpu1", "gpu0", None]
    assert Node.with_gpus(2, 1.5).gpus == (1.0, 0.5)


# ---------------------------------------------------------------- aging


def test_effective_priority_is_the_queues(tmp_path):
    assert [effective_priority(1, w, 300.0) for w in (0, 299.9, 300, 901)] == [1, 1, 2, 4]
    assert effective_priority(1, 10_000, None) == 1 and effective_priority(1, -5, 300.0) == 1
    q = Queue(db=tmp_path / "q.db", kinds=fake_jobs)
    ids = q.submit(Grid("a", job="noop", sweep={"tag": ["0", "1", "2"]}, priority=1))
    with q.eng.begin() as conn:
        for job_id, waited in zip(ids, (10, 400, 1000)):
            conn.execute(
                sa.text("UPDATE jobs SET created_at = :t WHERE id = :j"), {"t": 1e6 - waited, "j": job_id}
            )
    rows = list(jobqueue.ready_jobs(q.eng, aging_s=300.0, now=1e6))
    assert [(r.id, r.effective_priority) for r in rows] == [
        (r.id, effective_priority(r.priority, 1e6 - r.created_at, 300.0)) for r in rows
    ]
    assert [r.effective_priority for r in rows] == [4, 2, 1]


def fjob(key: str, seconds: float, priority: int = 0, since_s: float = 0.0, **kw) -> ForecastJob:
    return ForecastJob(
        key,
        "train",
        key,
        kw.pop("status", "new"),
        Estimate(seconds, "measured"),
        priority=priority,
        order=int(key[1:]),
        since_s=since_s,
        remaining_s=seconds,
        **kw,
    )


def test_the_simulation_replays_aging_backoff_refusals_and_the_early_exit():
    # a queued job that has waited 10 minutes outranks new jobs of priority 1 when it ages (aging 300 s)
    old = fjob("#1", 10, priority=0, since_s=-600)
    new = [fjob(f"+{i}", 10, priority=1) for i in (2, 3)]
    simulate([old, *new], cpus=1, gpus=0, aging_s=300.0)
    assert [j.start_s for j in (old, *new)] == [0.0, 10.0, 20.0]
    simulate([old, *new], cpus=1, gpus=0, aging_s=None)  # without aging it goes last
    assert [j.start_s for j in (old, *new)] == [20.0, 0.0, 10.0]
    # a retried job waiting out its backoff starts when the backoff ends
    backoff = fjob("#4", 5, since_s=7.0)
    assert simulate([backoff], cpus=1, gpus=0) == 12.0 and backoff.start_s == 7.0
    # an oversized job is refused (not silently dropped) and counts in no total
    big = fjob("+5", 30, cpus=4)
    ok = fjob("+6", 3)
    report = Forecast([big, ok], 2, 0, simulate([big, ok], cpus=2, gpus=0), now=time.time())
    assert big.start_s is None and big.refused.startswith("needs {'num_cpus': 4.0")
    assert report.totals() == {"cpu": 3.0, "all": 3.0}
    assert "REFUSED: needs" in report.text() and "will refuse (too big for the cluster): +5" in report.text()
    # early exit: with the CPU booked and reserved, a job asking for nothing waits as it would in the queue
    # (at 10 the priority-1 job takes the CPU and the pass ends there too: it starts when that one ends)
    running = fjob("#7", 10, status="running")
    waiting, free = fjob("+8", 1, priority=1), fjob("+9", 1, cpus=0)
    simulate([running, waiting, free], cpus=1, gpus=0)
    assert (waiting.start_s, free.start_s) == (10.0, 11.0)


def test_the_simulation_preempts_as_the_scheduler_does():
    """A preemptible hour-long run and an urgent 100 s job submitted 20 minutes in: the run stops then
    (checkpointed, nothing lost), the urgent job runs, the run resumes and ends 100 s later than alone.
    Before its first checkpoint (10 minutes) or within the cool-down it is not stopped."""
    long, urgent = (
        fjob("#1", 3600, status="running", preemptible=True),
        fjob("+2", 100, priority=20, since_s=1200),
    )
    assert simulate([long, urgent], cpus=1, gpus=0) == 3700.0
    assert (long.preempted_s, urgent.start_s, long.start_s) == ([1200.0], 1200.0, 1300.0)
    report = Forecast([long, urgent], 1, 0, 3700.0, now=time.time())
    assert "preempted at 20m00s" in report.text()
    early, urgent = (
        fjob("#1", 3600, status="running", preemptible=True),
        fjob("+2", 100, priority=20, since_s=300),
    )
    assert (
        simulate([early, urgent], cpus=1, gpus=0) == 3700.0
        and early.preempted_s == []
        and urgent.start_s == 3600.0
    )
    pinned, urgent = fjob("#1", 3600, status="running"), fjob("+2", 100, priority=20, since_s=1200)
    assert simulate([pinned, urgent], cpus=1, gpus=0) == 3700.0 and urgent.start_s == 3600.0

    # a second urgent job 700 s after the resume: stopped again without a cool-down, not with one
    def three():
        return (
            fjob("#1", 3600, status="running", preemptible=True),
            fjob("+2", 100, priority=20, since_s=1200),
            fjob("+3", 100, priority=20, since_s=2000),
        )

    run, *_ = jobs = three()
    simulate(list(jobs), cpus=1, gpus=0, cooldown_s=0.0)
    assert run.preempted_s == [1200.0, 2000.0] and run.end_s == 3800.0
    run, *_ = jobs = three()
    simulate(list(jobs), cpus=1, gpus=0, cooldown_s=1800.0)
    assert run.preempted_s == [1200.0] and jobs[2].start_s == run.end_s == 3700.0


def test_the_simulation_counts_every_device_of_a_gang():
    gang = [fjob(f"+{i}", 10, gpus=1, workers=2) for i in (0, 1)]
    single = fjob("+2", 4, gpus=1)
    makespan = simulate([*gang, single], cpus=8, gpus=3)
    assert [(j.start_s, j.device) for j in gang] == [(0.0, "gpu0,gpu1"), (10.0, "gpu0,gpu1")]
    assert (single.start_s, single.device) == (0.0, "gpu2")  # the free slot is filled, the gang waits whole
    assert makespan == 20.0
    totals = Forecast([*gang, single], 8, 3, makespan, now=time.time()).totals()
    assert totals == {"gpu0": 20.0, "gpu1": 20.0, "gpu2": 4.0, "all": 24.0}


# ---------------------------------------------------------------- the resource key


def test_workers_is_a_resource_key_of_grids_and_the_queue(tmp_path):
    q = Queue(db=tmp_path / "q.db", kinds=fake_jobs)
    for bad in (0, 1.5, "2"):
        with pytest.raises(ConfigError, match=r"resources.workers: (must be >= 1|expected an integer)"):
            q.submit(Grid("w", job="noop", resources={"workers": bad}))
    (gang, plain) = q.submit(
        [
            Grid("g", base={"tokens": 100}, resources={"workers": 2, "num_gpus": 1}),
            Grid("p", job="noop"),
        ]
    )
    with q.eng.connect() as conn:
        stored = dict(conn.execute(sa.text("SELECT id, resources FROM jobs")).all())
    assert jobkinds.job_resources("train", stored[gang], True) == {
        "num_cpus": 1.0,
        "num_gpus": 1.0,
        "workers": 2,
        "exclusive": False,
    }
    assert jobkinds.job_resources("noop", stored[plain], False)["workers"] == 1
    assert Request.of(jobkinds.job_resources("train", stored[gang], True)).total == {"cpus": 2.0, "gpus": 2.0}
    assert isinstance(
        admit(ready(("g", 0, Request(gpus=1, workers=2))), [Node.with_gpus(2, 1)]).refused[0], Refuse
    )
