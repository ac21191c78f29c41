"""The scheduler on the session's Ray (2 CPUs, 2 logical GPUs) with the fake job kinds: dependencies,
failures and retry (with backoff), placement, reservations by effective priority, derived iso-time
budgets, cancel, graceful stop and exact resume."""

from __future__ import annotations

import getpass
import json
import re
import threading
import time

import pytest
import sqlalchemy as sa

from looplab import Grid, Queue
from looplab.model.errors import ConfigError
from looplab.orchestrator.scheduler import Scheduler
from looplab.workers import artifacts
from looplab.workers.reporter import MemoryReporter
from tests.db_rows import rows
from tests.orchestrator import fake_jobs


@pytest.fixture
def q(tmp_path, ray_cluster):
    return Queue(db=tmp_path / "q.db", artifacts=tmp_path / "art", kinds=fake_jobs)


def run(q: Queue, **kw) -> None:
    kw.setdefault("retry_backoff_s", 0.05)  # retried failures wait a little, not the default 5 s
    q.run(until_empty=True, progress=False, poll_s=0.2, **kw)


def test_dependencies_results_and_metrics(q):
    grid = Grid(
        "g",
        base={"tokens": 100, "steps": 5},
        sweep={"recipe": ["lean", "parcae"]},
        then=["depth_sweep", "decode_bench"],
    )
    ids = q.submit(grid)
    run(q)
    st = q.status().set_index("id")
    assert set(st.loc[ids, "status"]) == {"succeeded"}
    # a depth sweep never started before its train job finished (the fake sweep also checks final.json)
    for job_id, dep in rows(q, "SELECT job_id, depends_on FROM job_deps"):
        (start,) = rows(q, "SELECT started_at FROM attempts WHERE job_id=:j", j=job_id)[0]
        (end,) = rows(q, "SELECT finished_at FROM jobs WHERE id=:j", j=dep)[0]
        assert start >= end
    assert len(q.results("depth_evals")) == 2 * 3 and len(q.results("decode_benches")) == 2
    # every metric point once, latest_metrics at the last step, the train_results row there
    for (jid,) in rows(q, "SELECT id FROM jobs WHERE kind='train'"):
        steps = [s for (s,) in rows(q, "SELECT step FROM metrics WHERE job_id=:j ORDER BY step", j=jid)]
        assert steps == [1, 2, 3, 4, 5]
        assert rows(q, "SELECT step FROM latest_metrics WHERE job_id=:j", j=jid) == [(5,)]
        assert rows(q, "SELECT steps FROM train_results WHERE job_id=:j", j=jid) == [(5,)]
        art = rows(q, "SELECT artifact_dir, checkpoint_step FROM jobs WHERE id=:j", j=jid)[0]
        assert art[0].endswith(f"/{jid}-train-" + art[0].rsplit("-", 1)[1]) and art[1] == 4


def test_failed_train_fails_its_follow_ups_with_the_reason(q):
    ids = q.submit(Grid("g", base={"tokens": 100, "fail": True}, then=["depth_sweep"], max_attempts=2))
    run(q)
    (train, sweep) = ids
    st = q.status().set_index("id")
    # a ValueError is a program error: it would repeat, so it is final after one attempt (faults.py)
    assert st.loc[train, "status"] == "failed" and st.loc[train, "attempts"] == 1
    assert st.loc[sweep, "status"] == "failed" and st.loc[sweep, "attempts"] == 0
    own = rows(q, "SELECT error FROM jobs WHERE id=:j", j=train)[0][0]
    assert own.startswith("ValueError: loss is NaN at step 3 (a program error: it repeats on every attempt")
    err = rows(q, "SELECT error FROM jobs WHERE id=:j", j=sweep)[0][0]
    assert err.startswith(f"dependency job {train} failed") and "loss is NaN" in err
    # its log, written through Ray: how far it got (orchestrator/joblog.py), then the error
    said = [m for (m,) in rows(q, "SELECT message FROM job_logs WHERE job_id=:j ORDER BY ts, id", j=train)]
    assert any(m.startswith("progress ") for m in said) and said[-1] == own


def test_raising_job_records_traceback_queue_goes_on_and_retry(q):
    boom, ok = q.submit(
        [Grid("b", job="boom", base={"fail_times": 1}, max_attempts=1), Grid("n", job="noop")]
    )
    run(q)
    assert dict(rows(q, "SELECT id, status FROM jobs")) == {boom: "failed", ok: "succeeded"}
    err = rows(q, "SELECT error FROM jobs WHERE id=:j", j=boom)[0][0]
    assert "Traceback" in err and "RuntimeError: boom (run 1)" in err and "fake_jobs.py" in err
    assert any("Traceback" in m for (m,) in rows(q, "SELECT message FROM job_logs WHERE job_id=:j", j=boom))
    assert rows(q, "SELECT outcome FROM attempts WHERE job_id=:j", j=boom) == [("failed",)]
    assert q.retry(boom) == [boom]
    run(q)
    assert rows(q, "SELECT status, error FROM jobs WHERE id=:j", j=boom) == [("succeeded", None)]
    assert rows(q, "SELECT n, outcome FROM attempts WHERE job_id=:j ORDER BY n", j=boom) == [
        (1, "failed"),
        (2, "succeeded"),
    ]


def test_cuda_oom_is_named_with_advice(q):
    (jid,) = q.submit(
        Grid("oom", job="boom", base={"message": "CUDA out of memory. Tried to allocate"}, max_attempts=1)
    )
    run(q)
    err = rows(q, "SELECT error FROM jobs WHERE id=:j", j=jid)[0][0]
    assert err.startswith("CUDA out of memory") and "batch_size" in err


def test_placement_two_gpu_jobs_at_once_third_waits(q):
    res = {"num_gpus": 1, "num_cpus": 0.5}
    ids = q.submit(
        Grid("p", job="sleep", base={"seconds": 2.0}, sweep={"tag": ["a", "b", "c"]}, resources=res)
    )
    run(q)
    att = {j: (s, e) for j, s, e in rows(q, "SELECT job_id, started_at, ended_at FROM attempts")}
    gpus = dict(rows(q, "SELECT id, gpu_ids FROM jobs"))
    a, b, c = ids
    assert att[a][0] < att[b][1] and att[b][0] < att[a][1]  # the first two overlapped
    assert {gpus[a], gpus[b]} == {"0", "1"}  # on different devices
    assert att[c][0] >= min(att[a][1], att[b][1])  # the third waited for a free GPU
    logs = [m for (m,) in rows(q, "SELECT message FROM job_logs WHERE job_id=:j", j=a)]
    assert logs == [f"CUDA_VISIBLE_DEVICES={gpus[a]}"]


def test_job_larger_than_the_cluster_fails_clearly(q):
    (jid,) = q.submit(Grid("big", job="noop", resources={"num_gpus": 4}))
    run(q)
    assert rows(q, "SELECT status FROM jobs WHERE id=:j", j=jid) == [("failed",)]
    assert "cluster has" in rows(q, "SELECT error FROM jobs WHERE id=:j", j=jid)[0][0]


def test_a_gang_job_is_admitted_whole_or_refused(q):
    """2 GPUs: a 3-worker job can never be placed (refused as too big); a grid cannot ask several
    workers of a kind that is not train, and a stored job that does (submitted before that check) fails
    at launch saying so; the queue goes on. Gangs that run: tests/orchestrator/test_gang.py."""
    with pytest.raises(ConfigError, match="resources.workers: 2: only train jobs run on several workers"):
        q.submit(Grid("g", job="noop", base={"tag": "g"}, resources={"workers": 2}))
    gang, big, ok = q.submit(
        [
            Grid("g", job="noop", base={"tag": "g"}),
            Grid("b", base={"tokens": 100}, resources={"workers": 3, "num_gpus": 1}),
            Grid("n", job="noop", base={"tag": "n"}),
        ]
    )
    with q.eng.begin() as conn:
        conn.execute(
            sa.text("UPDATE jobs SET resources=:r, max_attempts=1 WHERE id=:j"),
            {"r": json.dumps({"workers": 2, "num_gpus": 1, "num_cpus": 0.5}), "j": gang},
        )
    run(q)
    status = dict(rows(q, "SELECT id, status FROM jobs"))
    error = dict(rows(q, "SELECT id, error FROM jobs"))
    assert status == {gang: "failed", big: "failed", ok: "succeeded"}
    assert "resources.workers: 2: only train jobs run on several workers, not noop" in error[gang]
    assert "needs 3 workers of {'num_cpus': 1.0, 'num_gpus': 1.0} at once" in error[big]
    assert "cluster has {'CPU': 2.0, 'GPU': 2.0}" in error[big]


def test_derived_iso_time_budget(q):
    main = Grid("main", base={"recipe": "lean", "tokens": 100, "steps": 20, "step_s": 0.05})
    iso = Grid(
        "iso", base={"recipe": "parcae", "step_s": 0.05, "budget": {"match_time_of": {"recipe": "lean"}}}
    )
    ref, follower = q.submit([main, iso])
    run(q)
    (secs,) = rows(q, "SELECT train_seconds FROM train_results WHERE job_id=:j", j=ref)[0]
    budget, resolved = rows(q, "SELECT budget, budget_time_s FROM jobs WHERE id=:j", j=follower)[0]
    assert json.loads(budget) == {"match_time_of": ref} and resolved == secs
    (real,) = rows(q, "SELECT train_seconds FROM train_results WHERE job_id=:j", j=follower)[0]
    assert abs(real - secs) <= 0.1 * secs


def assert_uninterrupted_curve(q: Queue, job_id: int, spec: dict, tmp_path) -> None:
    """Job `job_id`'s train_loss curve is the fake train run of `spec` run whole, bit for bit, each
    point once."""
    curve = rows(
        q, "SELECT step, value FROM metrics WHERE job_id=:j AND key='train_loss' ORDER BY step", j=job_id
    )
    ref = MemoryReporter()
    (tmp_path / "ref").mkdir()
    fake_jobs.run("train", spec, ref, tmp_path / "ref")
    assert [tuple(r) for r in curve] == ref.curve("train_loss")


def _in_thread(sched: Scheduler) -> threading.Thread:
    t = threading.Thread(target=sched.run, daemon=True)
    t.start()
    return t


def _wait_for(q: Queue, sql: str, timeout: float = 60.0, **params) -> None:
    end = time.time() + timeout
    while not rows(q, sql, **params):
        assert time.time() < end, f"timed out waiting for {sql}"
        time.sleep(0.1)


def test_cancel_running_job_stops_it(q):
    (jid,) = q.submit(Grid("long", base={"tokens": 100, "steps": 400, "step_s": 0.05, "ckpt_every": 1}))
    t = _in_thread(Scheduler(q.eng, q.artifacts, fake_jobs, until_empty=True, progress=False, poll_s=0.2))
    _wait_for(q, "SELECT 1 FROM jobs WHERE id=:j AND checkpoint_step >= 2", j=jid)
    assert q.cancel(jid) == [jid]
    t.join(60)
    assert not t.is_alive()
    assert rows(q, "SELECT status FROM jobs WHERE id=:j", j=jid) == [("cancelled",)]
    assert rows(q, "SELECT outcome FROM attempts WHERE job_id=:j", j=jid) == [("cancelled",)]


def test_graceful_stop_then_exact_resume(q, tmp_path):
    spec = {"tokens": 100, "steps": 80, "step_s": 0.05, "ckpt_every": 3, "seed": 7}
    (jid,) = q.submit(Grid("stop", base=spec))
    sched = Scheduler(q.eng, q.artifacts, fake_jobs, until_empty=True, progress=False, poll_s=0.2)
    t = _in_thread(sched)
    _wait_for(q, "SELECT 1 FROM jobs WHERE id=:j AND checkpoint_step >= 6", j=jid)
    sched._on_signal(2, None)  # what Ctrl-C does
    t.join(60)
    assert not t.is_alive()
    assert rows(q, "SELECT status FROM jobs WHERE id=:j", j=jid) == [("queued",)]
    assert rows(q, "SELECT outcome FROM attempts WHERE job_id=:j", j=jid) == [("interrupted",)]
    run(q)
    (resumed,) = rows(q, "SELECT resumed_from_step FROM attempts WHERE job_id=:j AND n=2", j=jid)[0]
    assert resumed >= 6
    assert_uninterrupted_curve(q, jid, spec, tmp_path)


def test_an_urgent_job_preempts_a_preemptible_run_which_resumes_after_it_exactly(q, tmp_path):
    """Both jobs need the whole cluster (2 CPUs): the urgent one (priority 20) stops the preemptible run
    (priority 0) at its next step; the run checkpoints, goes back to the queue as preempted (no failure),
    resumes once the urgent job is done, and its curve is the uninterrupted run's, each point once."""
    spec = {"tokens": 100, "steps": 80, "step_s": 0.05, "ckpt_every": 3, "seed": 5}
    (long,) = q.submit(Grid("long", base=spec, resources={"num_cpus": 2, "preemptible": True}))
    sched = Scheduler(q.eng, q.artifacts, fake_jobs, until_empty=True, progress=False, poll_s=0.2)
    t = _in_thread(sched)
    _wait_for(q, "SELECT 1 FROM jobs WHERE id=:j AND checkpoint_step >= 6", j=long)
    urgent_grid = Grid("urgent", job="sleep", base={"seconds": 1.0}, priority=20, resources={"num_cpus": 2})
    (urgent,) = q.submit(urgent_grid)
    # once the run has resumed and checkpointed again, a second urgent job waits: within the cool-down
    # ($LOOPLAB_PREEMPT_COOLDOWN_S, 30 minutes) a run preempted once is not stopped again
    again = "SELECT 1 FROM attempts a JOIN jobs j ON j.id = a.job_id WHERE a.job_id = :j AND a.n = 2 "
    _wait_for(q, again + "AND j.checkpoint_step > a.resumed_from_step", j=long)
    (later,) = q.submit(
        Grid("later", job="sleep", base={"seconds": 0.5}, priority=20, resources={"num_cpus": 2})
    )
    t.join(120)
    assert not t.is_alive()
    assert rows(q, "SELECT id, status FROM jobs ORDER BY id") == [
        (long, "succeeded"),
        (urgent, "succeeded"),
        (later, "succeeded"),
    ]
    attempts = rows(
        q,
        "SELECT job_id, n, outcome, started_at, ended_at, resumed_from_step FROM attempts ORDER BY started_at",
    )
    assert [(j, n, o) for j, n, o, *_ in attempts] == [
        (long, 1, "preempted"),
        (urgent, 1, "succeeded"),
        (long, 2, "succeeded"),
        (later, 1, "succeeded"),
    ]
    (
        (_, _, _, _, long_stopped, _),
        (_, _, _, urgent_started, urgent_ended, _),
        (*_, resumed_at, long_ended, from_step),
        (_, _, _, later_started, _, _),
    ) = attempts
    assert long_ended <= later_started
    assert long_stopped <= urgent_started and urgent_ended <= resumed_at and from_step >= 6
    assert_uninterrupted_curve(q, long, spec, tmp_path)
    assert rows(q, "SELECT count(*) FROM train_results WHERE job_id=:j", j=long) == [(1,)]
    # each claim was recorded in the artifact dir before its task started (workers/artifacts.py fencing)
    (art,) = rows(q, "SELECT artifact_dir FROM jobs WHERE id=:j", j=long)[0]
    assert sorted(artifacts.records(art)) == [1, 2] and not artifacts.records(q.artifacts / "none")
    (message,) = rows(q, "SELECT message FROM health_events WHERE job_id=:j AND rule='preempted'", j=long)[0]
    assert f"preempted for job {urgent} (effective priority 20)" in message
    # the audit trail (issue 56) has the preemption, with the urgent job's owner beside the run's
    ((actor, detail, owner),) = rows(q, "SELECT actor, detail, owner FROM audit_trail WHERE action='preempt'")
    assert actor == owner == getpass.getuser() and f"for job {urgent}" in detail and "submitted by" in detail


def test_a_job_not_opted_in_or_not_urgent_enough_is_never_preempted(q):
    spec = {"tokens": 100, "steps": 30, "step_s": 0.05, "ckpt_every": 3, "seed": 5}
    (pinned,) = q.submit(Grid("pinned", base=spec, resources={"num_cpus": 2}))
    (near,) = q.submit(
        Grid("near", base={**spec, "seed": 6}, resources={"num_cpus": 2, "preemptible": True}, priority=-1)
    )
    t = _in_thread(Scheduler(q.eng, q.artifacts, fake_jobs, until_empty=True, progress=False, poll_s=0.2))
    _wait_for(q, "SELECT 1 FROM jobs WHERE id=:j AND checkpoint_step >= 3", j=pinned)
    (urgent,) = q.submit(
        Grid("u", job="sleep", base={"seconds": 0.2}, priority=50, resources={"num_cpus": 2})
    )
    _wait_for(q, "SELECT 1 FROM jobs WHERE id=:j AND checkpoint_step >= 3", timeout=90, j=near)
    (almost,) = q.submit(
        Grid("a", job="sleep", base={"seconds": 0.2, "tag": "a"}, priority=8, resources={"num_cpus": 2})
    )
    t.join(120)
    assert not t.is_alive()
    outcomes = rows(q, "SELECT job_id, outcome FROM attempts ORDER BY started_at")
    assert outcomes == [
        (pinned, "succeeded"),
        (urgent, "succeeded"),
        (near, "succeeded"),
        (almost, "succeeded"),
    ]


def test_iso_time_job_submitted_after_its_reference_succeeded(q):
    """Re-submitting the grid file with an iso-time grid added: the reference ran already, so no
    `finish` of it will resolve the new job's budget; the queue must resolve it at launch."""
    main = Grid("main", base={"recipe": "lean", "tokens": 100, "steps": 10, "step_s": 0.02})
    (ref,) = q.submit(main)
    run(q)
    iso = Grid(
        "iso", base={"recipe": "parcae", "step_s": 0.02, "budget": {"match_time_of": {"recipe": "lean"}}}
    )
    ref_again, follower = q.submit([main, iso])
    assert ref_again == ref
    run(q)
    (secs,) = rows(q, "SELECT train_seconds FROM train_results WHERE job_id=:j", j=ref)[0]
    assert rows(q, "SELECT status, budget_time_s FROM jobs WHERE id=:j", j=follower) == [("succeeded", secs)]


def test_cancelled_running_job_retried_under_the_same_driver_runs(q):
    """The stop asked of a cancelled attempt must not stop the attempt of a later retry (it looped
    forever: interrupted -> queued -> relaunched -> stopped at once)."""
    (jid,) = q.submit(Grid("cr", base={"tokens": 100, "steps": 200, "step_s": 0.03, "ckpt_every": 1}))
    sched = Scheduler(q.eng, q.artifacts, fake_jobs, until_empty=False, progress=False, poll_s=0.2)
    t = _in_thread(sched)
    try:
        _wait_for(q, "SELECT 1 FROM jobs WHERE id=:j AND checkpoint_step >= 2", j=jid)
        assert q.cancel(jid) == [jid]
        _wait_for(q, "SELECT 1 FROM attempts WHERE job_id=:j AND outcome='cancelled'", j=jid)
        assert q.retry(jid) == [jid]
        _wait_for(q, "SELECT 1 FROM jobs WHERE id=:j AND (status='succeeded' OR attempts >= 5)", j=jid)
        assert rows(q, "SELECT status, attempts FROM jobs WHERE id=:j", j=jid) == [("succeeded", 2)]
    finally:
        sched._on_signal(2, None)
        t.join(60)
    assert not t.is_alive()


def test_exclusive_jobs_run_alone_and_contention_is_recorded(q):
    # 2 CPUs: the sleeps pair up; the exclusive ones (a sleep asking for it, a decode bench by its kind)
    # must each have the node to themselves
    ids = q.submit(
        [
            Grid(
                "s",
                job="sleep",
                base={"seconds": 0.6},
                sweep={"tag": ["a", "b", "c", "d"]},
                resources={"num_cpus": 1},
            ),
            Grid(
                "x",
                job="sleep",
                base={"seconds": 0.6, "tag": "x"},
                resources={"num_cpus": 1, "exclusive": True},
            ),
            Grid("d", job="decode_bench"),
            Grid("t", base={"tokens": 100, "steps": 4, "step_s": 0.2}, sweep={"recipe": ["lean", "parcae"]}),
        ]
    )
    run(q)
    spans = {j: (s, e) for j, s, e in rows(q, "SELECT job_id, started_at, ended_at FROM attempts")}
    assert set(spans) == set(ids)
    exclusive = {ids[4], ids[5]}

    def overlap(a, b):
        return spans[a][0] < spans[b][1] and spans[b][0] < spans[a][1]

    for job in exclusive:
        assert not [other for other in ids if other != job and overlap(job, other)]
    assert any(overlap(a, b) for a in ids[:4] for b in ids[:4] if a != b)  # the others did share the node
    # contention: the decode bench alone (0); each train job ran beside at least the other one
    assert rows(q, "SELECT concurrent_jobs FROM decode_benches") == [(0,)]
    trains = rows(q, "SELECT job_id, concurrent_jobs FROM train_results ORDER BY job_id")
    expected = {j: sum(overlap(j, o) for o in ids if o != j) for j in ids[6:]}
    assert dict(trains) == expected and all(n >= 1 for n in expected.values())


def test_exclusive_can_be_opted_out(q):
    # the decode bench asks not to be exclusive: it starts beside the sleep, and says so
    ids = q.submit(
        [
            Grid("s", job="sleep", base={"seconds": 1.0}, resources={"num_cpus": 1}),
            Grid("d", job="decode_bench", resources={"num_cpus": 1, "exclusive": False}),
        ]
    )
    run(q)
    (n,) = rows(q, "SELECT concurrent_jobs FROM decode_benches")[0]
    assert n == 1 and len(ids) == 2


def spans(q: Queue) -> dict[int, tuple[float, float]]:
    return {j: (s, e) for j, s, e in rows(q, "SELECT job_id, started_at, ended_at FROM attempts")}


@pytest.mark.parametrize("rule", ["higher priority", "aged", "same priority"])
def test_a_job_waiting_for_gpus_reserves_them_against_lower_effective_priorities(q, rule):
    """Two GPUs: a short and a long job hold them; a 2-GPU job waits. When the short one ends, one GPU
    is free: 1-GPU jobs of lower effective priority (by priority, or by its 100 s of waiting with
    aging_s=60) must leave it to the waiting job; jobs of its own effective priority fill the gap."""
    gpu = {"num_gpus": 1, "num_cpus": 0.5}
    q.submit(
        [
            Grid("a", job="sleep", base={"seconds": 0.3, "tag": "short"}, resources=gpu, priority=5),
            Grid("b", job="sleep", base={"seconds": 2.5, "tag": "long"}, resources=gpu, priority=5),
        ]
    )
    (big,) = q.submit(
        Grid(
            "big",
            job="sleep",
            base={"seconds": 0.1, "tag": "big"},
            priority=int(rule == "higher priority"),
            resources={"num_gpus": 2, "num_cpus": 0.5},
        )
    )
    if rule == "aged":
        with q.eng.begin() as conn:
            conn.execute(sa.text("UPDATE jobs SET created_at = created_at - 100 WHERE id = :j"), {"j": big})
    smalls = q.submit(
        Grid("small", job="sleep", base={"seconds": 0.1}, sweep={"tag": ["1", "2", "3"]}, resources=gpu)
    )
    run(q, aging_s=60.0)
    span = spans(q)
    if rule == "same priority":  # the gap is filled: they all ran while the big job waited
        assert all(span[s][0] < span[big][0] for s in smalls)
    else:
        assert all(span[s][0] >= span[big][0] for s in smalls)


def test_a_failing_job_is_retried_after_a_doubling_backoff(q):
    (jid,) = q.submit(Grid("b", job="boom", base={"fail_times": 2}, max_attempts=3))
    run(q, retry_backoff_s=0.4)
    att = rows(q, "SELECT n, outcome, started_at, ended_at FROM attempts WHERE job_id=:j ORDER BY n", j=jid)
    assert [(n, o) for n, o, *_ in att] == [(1, "failed"), (2, "failed"), (3, "succeeded")]
    assert att[1][2] - att[0][3] >= 0.4 and att[2][2] - att[1][3] >= 0.8  # 0.4 * 2^(failures - 1)


@pytest.mark.parametrize(
    "env, value, named",
    [
        ("LOOPLAB_AGING_S", "0", "$LOOPLAB_AGING_S"),  # it divides the waiting time: 0 is refused
        ("LOOPLAB_AGING_S", "soon", "$LOOPLAB_AGING_S"),
        ("LOOPLAB_RETRY_BACKOFF_S", "-1", "$LOOPLAB_RETRY_BACKOFF_S"),
        ("LOOPLAB_HEARTBEAT_GRACE_S", "a minute", "$LOOPLAB_HEARTBEAT_GRACE_S"),
    ],
)
def test_bad_timing_settings_are_refused_naming_the_variable(q, monkeypatch, env, value, named):
    from looplab.model.errors import ConfigError

    monkeypatch.setenv(env, value)
    with pytest.raises(ConfigError, match=re.escape(named)):
        Scheduler(q.eng, kinds=fake_jobs)
    monkeypatch.delenv(env)
    with pytest.raises(ConfigError, match="aging_s"):
        Scheduler(q.eng, kinds=fake_jobs, aging_s=0)
    assert Scheduler(q.eng, kinds=fake_jobs, aging_s=10, retry_backoff_s=0).settings.retry_backoff_s == 0.0
