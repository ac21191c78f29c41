"""The queue's promises on a cluster of hosts with their own addresses (tests/cluster/lab.py: PostgreSQL,
a Ray head with a driver, two Ray worker hosts, a second driver host; docs/guarantees.md), under one fault
at a time. Each test ends with every promise checked (tests/cluster/promises.py). Marked `multinode`
and `ray`: the fast tier skips them."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from tests.cluster import netns, promises
from tests.cluster.lab import LabCluster
from tests.orchestrator.test_crash_resume import TRAIN
from tests.orchestrator.test_multinode import reference_run

pytestmark = [pytest.mark.multinode, pytest.mark.ray, pytest.mark.slow]
if netns.available():
    pytestmark.append(pytest.mark.skip(reason=netns.available()))

GRID = f"""
from looplab import Grid
base = {TRAIN!r}
grid = Grid("cluster", base=base, sweep={{"seed": [0, 1, 2]}})
"""


@pytest.fixture
def lab(looplab_cache):
    made = LabCluster(looplab_cache)
    yield made
    made.close()
    assert made.net.leftovers() == []


def wait_for(lab: LabCluster, sql: str, what: str, timeout: float = 240, driver=None) -> list:
    end = time.monotonic() + timeout
    while not (found := lab.query(sql)):
        assert driver is None or driver.poll() is None, f"the driver exited before {what}"
        assert time.monotonic() < end, f"no {what} within {timeout} s"
        time.sleep(0.5)
    return found


def test_a_worker_host_lost_mid_run_resumes_its_job_elsewhere_exactly(lab, tmp_path):
    for name in ("head", "worker1", "worker2"):
        lab.start_ray(name)
    (lab.net.shared / "grids.py").write_text(GRID)
    assert "3 added" in lab.looplab_done("driver2", "submit", "grids.py")
    driver = lab.looplab(
        "head", "run", "--address", lab.ray_address, "--until-empty", "--artifacts", str(lab.art)
    )
    worker1 = lab.node_id("worker1")[:12]
    # a job on worker1 past its third step's checkpoint (the attempt's worker starts with its node id)
    running = (
        "SELECT j.id, j.checkpoint_step FROM jobs j JOIN attempts a ON a.job_id = j.id AND a.n = j.attempts "
        f"WHERE j.status = 'running' AND j.checkpoint_step >= 3 AND a.worker LIKE '{worker1}%'"
    )
    ((victim, ckpt),) = wait_for(lab, running, "checkpoint on worker1", driver=driver)
    assert lab.net.kill("worker1")  # a power cut of that machine
    assert driver.wait(timeout=400) == 0, (lab.logs / "head.log").read_text()[-3000:]
    summary = promises.check(lab)
    assert summary["succeeded"] == 3
    tried = lab.query(
        f"SELECT n, outcome, resumed_from_step FROM attempts WHERE job_id = {victim} ORDER BY n"
    )
    assert [t[1] for t in tried] == ["interrupted", "succeeded"], tried
    assert tried[1][2] is not None and tried[1][2] >= ckpt  # resumed from its checkpoint, not step 0
    seed = lab.query(f"SELECT seed FROM jobs WHERE id = {victim}")[0][0]
    ref = reference_run(seed, tmp_path / "ref")
    for key in ("train_loss", "val_loss"):
        got = lab.query(
            f"SELECT step, value FROM metrics WHERE job_id = {victim} AND key = '{key}' ORDER BY step"
        )
        assert [tuple(r) for r in got] == ref.curve(key) and got


def assert_curve_is_uninterrupted(lab: LabCluster, job_id: int, tmp_path, train: dict | None = None) -> None:
    seed = lab.query(f"SELECT seed FROM jobs WHERE id = {job_id}")[0][0]
    ref = reference_run(seed, tmp_path / f"ref{job_id}", train)
    for key in ("train_loss", "val_loss"):
        got = lab.query(
            f"SELECT step, value FROM metrics WHERE job_id = {job_id} AND key = '{key}' ORDER BY step"
        )
        why = lab.query(
            f"SELECT n, outcome, resumed_from_step, started_at, ended_at, worker FROM attempts WHERE job_id = {job_id}"
        )
        assert [tuple(r) for r in got] == ref.curve(key) and got, (job_id, key, why, [r[0] for r in got])


def test_the_database_host_down_and_back_pauses_the_driver_which_goes_on_by_itself(lab, tmp_path):
    lab.start_ray("head")
    lab.start_ray("worker1")
    (lab.net.shared / "grids.py").write_text(GRID)
    lab.looplab_done("driver2", "submit", "grids.py")
    driver = lab.looplab(
        "head", "run", "--address", lab.ray_address, "--until-empty", "--artifacts", str(lab.art)
    )
    wait_for(lab, "SELECT id FROM jobs WHERE checkpoint_step >= 3", "checkpoint", driver=driver)
    lab.stop_postgres()  # the database host's server crashes
    time.sleep(10)
    assert driver.poll() is None  # the driver waits for it: an outage is a state, not a crash
    lab.start_postgres()
    assert driver.wait(timeout=400) == 0, (lab.logs / "head.log").read_text()[-3000:]
    log = (lab.logs / "head.log").read_text()
    assert "the database cannot be reached" in log and "database back after" in log, log[-2000:]
    summary = promises.check(lab)
    assert summary["succeeded"] == 3
    for (job_id,) in lab.query("SELECT id FROM jobs ORDER BY id")[:1]:
        assert_curve_is_uninterrupted(lab, job_id, tmp_path)


@pytest.mark.parametrize("fault", ["cut", "pause"])
def test_a_driver_cut_off_or_paused_is_fenced_and_its_job_taken_over(lab, tmp_path, fault):
    """driver2 runs a job on its own host's Ray. Cut off from the database host (a blackhole both ways)
    or paused whole (SIGSTOP: a machine that hangs), its heartbeats stop, and the head's driver re-queues
    and runs the job after the grace period; when the cut mends or the host resumes, driver2's writes
    for its stale attempt are refused, and the job's one result is the head's."""
    lab.env["LOOPLAB_HEARTBEAT_GRACE_S"] = "10"
    lab.start_ray("head")
    (lab.net.shared / "grids.py").write_text(GRID.replace("[0, 1, 2]", "[0]"))
    lab.looplab_done("driver2", "submit", "grids.py")
    stale = lab.looplab("driver2", "run", "--num-cpus", "1", "--until-empty", "--artifacts", str(lab.art))
    ((victim,),) = wait_for(lab, "SELECT id FROM jobs WHERE checkpoint_step >= 3", "checkpoint", driver=stale)
    lab.net.cut("driver2", "pg") if fault == "cut" else lab.net.pause("driver2")
    t_fault = time.monotonic()
    other = lab.looplab(
        "head", "run", "--address", lab.ray_address, "--until-empty", "--artifacts", str(lab.art)
    )
    wait_for(lab, f"SELECT n FROM attempts WHERE job_id = {victim} AND n = 2", "a takeover", 120, other)
    took = time.monotonic() - t_fault
    assert took < 10 + 2 * 5 + 30, took  # the grace, the recovery poll, a Ray start on head
    lab.net.mend("driver2", "pg") if fault == "cut" else lab.net.resume("driver2")
    assert other.wait(timeout=400) == 0, (lab.logs / "head.log").read_text()[-3000:]
    stale.wait(timeout=180)
    summary = promises.check(lab)
    assert summary["succeeded"] == 1
    tried = lab.query(f"SELECT n, outcome, driver_host FROM attempts WHERE job_id = {victim} ORDER BY n")
    assert [(n, o, h) for n, o, h in tried] == [(1, "interrupted", "driver2"), (2, "succeeded", "head")], (
        tried
    )
    assert_curve_is_uninterrupted(lab, victim, tmp_path)


def test_a_gang_losing_one_host_restarts_whole_from_its_checkpoint(lab, tmp_path):
    """A 2-worker run (Ray Train, gloo over the hosts' eth0) on two of the three Ray hosts; the worker
    host holding one of its ranks loses power: the whole gang stops (never goes on with fewer ranks) and
    starts again from its checkpoint on the hosts left, its curve the one-process run's with two
    micro-batches, bit for bit."""
    driver, job, ckpt = start_gang(lab, head_cpus=1)
    ranks = rank_pids(lab)
    victim = next((name for name, pids in ranks.items() if pids), None)  # a worker host holding a rank
    assert victim is not None, f"no rank on a worker host: {ranks}"
    assert lab.net.kill(victim)
    assert driver.wait(timeout=500) == 0, (lab.logs / "head.log").read_text()[-3000:]
    promises.check(lab)
    tried = lab.query(f"SELECT n, outcome, resumed_from_step FROM attempts WHERE job_id = {job} ORDER BY n")
    assert [t[1] for t in tried][-1] == "succeeded" and all(t[1] == "interrupted" for t in tried[:-1]), tried
    assert len(tried) >= 2 and tried[-1][2] is not None and tried[-1][2] >= ckpt  # from its checkpoint
    assert_gang_curve_is_one_process(lab, job, tmp_path)


def start_gang(lab: LabCluster, head_cpus: int) -> tuple:
    """Ray on head (offering `head_cpus`), worker1 and worker2 (one CPU each), the 2-worker gang
    submitted and the head's driver running it: (the driver, the job, its first checkpoint >= 3)."""
    from tests.orchestrator.test_gang import TRAIN as GANG_TRAIN

    lab.start_ray("head", cpus=head_cpus)
    lab.start_ray("worker1")
    lab.start_ray("worker2")
    grid = f'from looplab import Grid\ngrid = Grid("gang", base={GANG_TRAIN!r}, resources={{"workers": 2}})\n'
    (lab.net.shared / "grids.py").write_text(grid)
    lab.looplab_done("driver2", "submit", "grids.py")
    driver = lab.looplab(
        "head", "run", "--address", lab.ray_address, "--until-empty", "--artifacts", str(lab.art)
    )
    ((job, ckpt),) = wait_for(
        lab, "SELECT id, checkpoint_step FROM jobs WHERE checkpoint_step >= 3", "checkpoint", driver=driver
    )
    return driver, job, ckpt


def rank_pids(lab: LabCluster) -> dict[str, set[int]]:
    """The gang's rank processes on each worker host. The hosts share one pid namespace (only the
    network, hostname and mounts are their own), so a pgrep run on a host sees every host's rank
    processes: a rank is the host's when its pid is in the host's network namespace (choosing by pgrep
    alone killed a host without a rank, and the gang went on)."""
    found = subprocess.run(["pgrep", "-f", "RayTrainWorker"], capture_output=True, text=True).stdout.split()
    return {name: set(map(int, found)) & set(lab.net[name].pids()) for name in ("worker1", "worker2")}


def assert_gang_curve_is_one_process(lab: LabCluster, job: int, tmp_path) -> None:
    """The gang's train curve equals the one-process run's with its micro-batches, bit for bit."""
    from looplab.workers import jobs
    from tests.orchestrator.test_gang import TRAIN as GANG_TRAIN

    ref = reference_gang(GANG_TRAIN, tmp_path / "ref", jobs)
    got = lab.query(
        f"SELECT step, value FROM metrics WHERE job_id = {job} AND key = 'train_loss' ORDER BY step"
    )
    assert [tuple(r) for r in got] == ref.curve("train_loss") and got


def test_a_full_artifact_disk_fails_the_attempt_at_its_last_checkpoint_and_the_retry_resumes_it(
    lab, tmp_path
):
    """The shared artifact disk fills up mid-run (every host writes there, as on a lab's file server):
    the next checkpoint write fails whole (the previous one stays the loadable one), the attempt fails
    with the disk-full advice, and once space is freed the queue's retry resumes from that last
    checkpoint; the job's curve equals an uninterrupted run's, bit for bit, each point once."""
    lab.start_ray("head")
    lab.start_ray("worker1")
    (lab.net.shared / "grids.py").write_text(GRID.replace("[0, 1, 2]", "[0]"))
    lab.looplab_done("driver2", "submit", "grids.py")
    driver = lab.looplab(
        "head", "run", "--address", lab.ray_address, "--until-empty", "--artifacts", str(lab.art)
    )
    ((job, ckpt),) = wait_for(
        lab, "SELECT id, checkpoint_step FROM jobs WHERE checkpoint_step >= 3", "checkpoint", driver=driver
    )
    filler = lab.net.fill_disk()
    ((error,),) = wait_for(
        lab,
        f"SELECT error FROM attempts WHERE job_id = {job} AND outcome = 'failed'",
        "a failed attempt",
        120,
    )
    assert error.startswith("No space left on device: the job stopped"), error[:300]
    filler.unlink()  # the user frees space; the queue's retry (after its backoff) does the rest
    assert driver.wait(timeout=400) == 0, (lab.logs / "head.log").read_text()[-3000:]
    summary = promises.check(lab)
    assert summary["succeeded"] == 1
    tried = lab.query(f"SELECT n, outcome, resumed_from_step FROM attempts WHERE job_id = {job} ORDER BY n")
    assert [t[1] for t in tried] == ["failed", "succeeded"], tried
    assert tried[1][2] is not None and tried[1][2] >= ckpt  # from its last complete checkpoint, not step 0
    assert_curve_is_uninterrupted(lab, job, tmp_path)


def reference_gang(spec: dict, art, jobs):
    """The gang's run in one process with its micro-batches, on one thread as the Ray workers ran."""
    from tests.orchestrator.test_real_jobs import one_thread_run

    return one_thread_run(spec, art)


def test_a_database_outage_longer_than_the_grace_ends_in_a_clean_takeover_of_two_drivers_jobs(lab, tmp_path):
    """PostgreSQL crashes while both drivers run jobs, for longer than the heartbeat grace: every
    heartbeat in the database is then stale. The drivers come back one after the other (their retry
    backoffs differ: here driver2 stays cut from the database host for 3 graces after the server
    returns, so the order is the test's, not chance's). The head's driver, back first, heartbeats its own
    jobs before recovering anyone's and takes driver2's over after the grace; driver2, back, finds its
    attempts replaced: their held events and outcomes are refused, the attempts killed. Every job has one
    recorded result, the head's jobs were not taken over, driver2's all were, and no replaced attempt
    wrote a log line after its takeover."""
    from tests.cluster import soak_verdict

    grace = 6
    lab.env["LOOPLAB_HEARTBEAT_GRACE_S"] = str(grace)
    lab.start_ray("head", cpus=2)
    longer = {**TRAIN, "tokens": 4 * 32 * 300}  # a job outlasts the other driver's start-up
    (lab.net.shared / "grids.py").write_text(
        GRID.replace(repr(TRAIN), repr(longer)).replace("[0, 1, 2]", "[0, 1, 2, 3]")
    )
    lab.looplab_done("driver2", "submit", "grids.py")
    run = ("run", "--until-empty", "--artifacts", str(lab.art))
    # driver2 (its own local Ray: the slower start) first, the head's once driver2 holds two jobs, so
    # that neither drains the queue before the other has claimed; the order is the test's, not chance's
    two = lab.looplab("driver2", *run, "--num-cpus", "2", "--max-concurrent", "2")
    wait_for(
        lab,
        "SELECT count(*) FROM attempts WHERE driver_host = 'driver2' AND outcome = 'running' "
        "HAVING count(*) = 2",
        "driver2 holding two jobs",
        driver=two,
    )
    head = lab.looplab("head", *run, "--address", lab.ray_address, "--max-concurrent", "2")
    running = (
        "SELECT a.driver_host, j.id, j.attempts FROM jobs j JOIN attempts a ON a.job_id = j.id "
        "AND a.n = j.attempts WHERE j.status = 'running' AND j.checkpoint_step >= 2 ORDER BY j.id"
    )
    end, held = time.monotonic() + 240, []
    while {r[0] for r in held} != {"head", "driver2"}:
        assert head.poll() is None and two.poll() is None, "a driver exited before both ran a job"
        assert time.monotonic() < end, f"not both drivers running a job: {held}"
        time.sleep(0.5)
        held = lab.query(running)
    lab.stop_postgres()
    time.sleep(grace + 6)  # longer than the grace: every heartbeat stale when it returns
    lab.net.cut("driver2", "pg")
    lab.start_postgres()
    time.sleep(3 * grace)
    lab.net.mend("driver2", "pg")
    assert head.wait(timeout=400) == 0, (lab.logs / "head.log").read_text()[-3000:]
    assert two.wait(timeout=180) == 0, (lab.logs / "driver2.log").read_text()[-3000:]
    summary = promises.check(lab)
    assert summary["succeeded"] == 4 and summary["duplicates"] == 0
    ended = {
        (j, n): (o, e)
        for j, n, o, e in lab.query("SELECT job_id, n, outcome, COALESCE(error, '') FROM attempts")
    }
    for host, job, n in held:
        outcome, error = ended[(job, n)]
        taken = outcome == "interrupted" and error.startswith("driver lost")
        assert taken == (host == "driver2"), (host, job, n, outcome, error[:200])
    taken = [
        tuple(r)
        for r in lab.query(
            "SELECT job_id, n, ended_at FROM attempts WHERE outcome = 'interrupted' AND error LIKE 'driver lost%'"
        )
    ]
    logs = [tuple(r) for r in lab.query("SELECT job_id, attempt, ts FROM job_logs")]
    assert soak_verdict.late_logs(taken, logs) == [], taken  # no two live attempts writing after it
    refused = soak_verdict.refusals((lab.logs / "driver2.log").read_text())
    assert all(refused[(j, n)] for h, j, n in held if h == "driver2"), (refused, held)
    victim = next(j for h, j, _ in held if h == "driver2")
    assert_curve_is_uninterrupted(lab, victim, tmp_path, longer)


def test_a_driver_cut_off_from_the_ray_head_but_not_the_database_releases_its_jobs_within_the_bound(
    lab, tmp_path
):
    """driver2 runs its driver on a Ray node of its own host joined to the head's cluster; its job runs on
    worker1. Cut off from the head (a blackhole both ways) but not from the database, it can no longer
    run or hear from its job, yet it would keep the job's heartbeat fresh and nothing would take it over.
    Its watch on the head (orchestrator/ray_watch.py) releases the job within the bound
    ($LOOPLAB_RAY_LOST_S plus a probe period and a loop pass: 5 + 1 + 0.5 s here, well before the 60 s
    grace), and the driver exits 75; the head's driver then runs the job to its one result, from its
    checkpoint, its curve an uninterrupted run's."""
    from looplab.orchestrator.ray_watch import EXIT_RAY_LOST

    lost_s = 5
    lab.env.update(LOOPLAB_RAY_LOST_S=str(lost_s), LOOPLAB_HEARTBEAT_GRACE_S="60")
    lab.start_ray("head", cpus=0)
    lab.start_ray("worker1")
    lab.start_ray("driver2", cpus=0)
    # a job that outlasts the cut: a 100-step one, on a quiet machine, ended between its checkpoint and
    # the cut (its attempt recorded with no error, most likely a success, and the test failed on that)
    longer = {**TRAIN, "tokens": 4 * 32 * 300}
    (lab.net.shared / "grids.py").write_text(
        GRID.replace(repr(TRAIN), repr(longer)).replace("[0, 1, 2]", "[0]")
    )
    lab.looplab_done("driver2", "submit", "grids.py")
    cut_off = lab.looplab(
        "driver2", "run", "--address", lab.ray_address, "--until-empty", "--artifacts", str(lab.art)
    )
    ((victim,),) = wait_for(
        lab, "SELECT id FROM jobs WHERE checkpoint_step >= 3", "checkpoint", driver=cut_off
    )
    lab.net.cut("driver2", "head")
    t_cut = time.monotonic()
    ((error,),) = wait_for(
        lab,
        f"SELECT error FROM attempts WHERE job_id = {victim} AND n = 1 AND outcome != 'running'",
        "the job released",
        60,
    )
    took = time.monotonic() - t_cut
    assert error.startswith("Ray cluster lost"), error[:300]
    assert took < lost_s + 1 + 0.5 + 5, took  # the bound, and a query's round trip on a loaded machine
    assert lab.query(f"SELECT status FROM jobs WHERE id = {victim}") == [["queued"]]  # for any driver
    assert cut_off.wait(timeout=60) == EXIT_RAY_LOST, (lab.logs / "driver2.log").read_text()[-3000:]
    head = lab.looplab(
        "head", "run", "--address", lab.ray_address, "--until-empty", "--artifacts", str(lab.art)
    )
    assert head.wait(timeout=300) == 0, (lab.logs / "head.log").read_text()[-3000:]
    lab.net.mend("driver2", "head")
    assert promises.check(lab)["succeeded"] == 1
    tried = lab.query(f"SELECT n, outcome, driver_host FROM attempts WHERE job_id = {victim} ORDER BY n")
    assert [tuple(t) for t in tried] == [(1, "interrupted", "driver2"), (2, "succeeded", "head")], tried
    assert_curve_is_uninterrupted(lab, victim, tmp_path, longer)


def test_a_gang_with_a_frozen_rank_is_stopped_whole_and_resumes_from_its_checkpoint(lab, tmp_path):
    """Issue 51's wedge, small: a 2-worker gang on worker1 and worker2 (the head offers no CPU) whose rank
    on worker1 freezes (SIGSTOP of that process alone: its node stays healthy, so Ray declares nothing
    dead). The other rank waits in a collective (gloo: 30 minutes) and Ray Train counts a worker whose
    status poll hangs as alive for 10 minutes; the gang neither ends nor progresses, holding both worker
    CPUs. The driver's gang watch (orchestrator/gang_watch.py) stops it whole within the limit (20 s
    here), removes its placement group (without that, the frozen rank's bundle stays reserved and the
    retry can never be placed), fails the attempt as the machine's fault, and the retry resumes from
    the checkpoint: one result, the curve of an uninterrupted run."""
    import os
    import signal

    limit = 20
    lab.env["LOOPLAB_GANG_STALL_S"] = str(limit)
    driver, job, ckpt = start_gang(lab, head_cpus=0)
    (rank,) = rank_pids(lab)["worker1"]  # the rank on worker1 (one CPU)
    os.kill(rank, signal.SIGSTOP)
    frozen = time.monotonic()
    ((error,),) = wait_for(
        lab,
        f"SELECT error FROM attempts WHERE job_id = {job} AND n = 1 AND outcome != 'running'",
        "the stop",
        120,
    )
    took = time.monotonic() - frozen
    assert error.startswith("gang stalled: no step after step"), error[:300]
    assert took < limit + 0.5 + 15, took  # the limit, a pass, a query's round trip on a loaded machine
    end = time.monotonic() + 60  # the group's removal ends the frozen rank's process (SIGKILL works on it)
    while _state(rank) == "T":  # stopped; gone or a zombie once killed
        assert time.monotonic() < end, "the frozen rank's process outlived its gang's stop by 60 s"
        time.sleep(0.5)
    assert driver.wait(timeout=400) == 0, (lab.logs / "head.log").read_text()[-3000:]
    promises.check(lab)
    tried = lab.query(f"SELECT n, outcome, resumed_from_step FROM attempts WHERE job_id = {job} ORDER BY n")
    assert [t[1] for t in tried] == ["failed", "succeeded"], tried
    assert tried[1][2] is not None and tried[1][2] >= ckpt, tried  # from its checkpoint, not step 0
    assert_gang_curve_is_one_process(lab, job, tmp_path)


def _state(pid: int) -> str | None:
    """A process's state letter (R, S, T stopped, Z zombie...), None when it is gone (the hosts share one
    pid namespace: the test process sees every host's)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None
