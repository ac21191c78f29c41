"""Train jobs on several workers through the real queue on local Ray (Ray Train, gloo, one thread per
worker).

(c) A 2-worker run gives the loss curve of the one-process run with 2 micro-batches, bit for bit (each
rank runs one of the two micro-batches, and two partial gradients sum the same either way), also after
`kill -9` of the driver mid-run (the driver, its Ray and the workers: a power cut) and after `kill -9`
of one training worker (the attempt is interrupted and the same driver resumes it), each curve point
exactly once.
(d) Two 2-worker jobs on 3 worker slots: the admission starts one gang whole and the other waits whole
(never a partial start that would deadlock both); Ray Train's placement group holds exactly the
bundles the driver booked, the task hosting Ray Train's driver holds nothing.
Plus, without Ray: a gang whose rank runs out of memory or disk space gets the advice a one-worker job
gets, iso-time budgets across worker counts (device-seconds), the planner's throughput for N workers,
and the Runs frame's batch, micro-batch and workers columns.
"""

from __future__ import annotations

import errno
import functools
import json
import os
import pickle
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from looplab.lab.planner.estimates import DDP_EFFICIENCY
from looplab.orchestrator import Grid, Queue, frames, pairing
from looplab.workers.reporter import MemoryReporter
from tests.db_rows import rows
from tests.lab.test_planner import FINISHED, exec_sql, finished_run
from tests.lab.test_planner import TRAIN as PLAN_TRAIN
from tests.orchestrator import fake_jobs
from tests.orchestrator.crash import looplab
from tests.orchestrator.test_real_jobs import one_thread_run

ROOT = Path(__file__).resolve().parents[2]
TRAIN = {
    "recipe": "lean",
    "size": "tiny",
    "seq_len": 32,
    "batch_size": 4,
    "micro_batch_size": 2,
    "tokens": 4 * 32 * 150,
    "ckpt_every": 5,
    "eval_every": 20,
    "eval_tokens": 256,
    "seed": 0,
    "data": {"tokenizer": "byte"},
}
GRID_FILE = f"""
from looplab import Grid
grid = Grid("gang", base={TRAIN!r}, resources={{"workers": 2}})
"""


def _wait(q: Queue, sql: str, proc: subprocess.Popen, what: str, timeout: float = 300, **params):
    end = time.time() + timeout
    while not (found := rows(q, sql, **params)):
        assert proc.poll() is None, proc.stdout.read()
        assert time.time() < end, f"no {what} within {timeout:.0f} s"
        time.sleep(0.2)
    return found


def _train_workers(session: int) -> list[int]:
    """Pids of the Ray Train worker processes of the Ray that a driver started in process group `session`
    (each Ray worker leads a process group of its own; its parent, the raylet, is in the driver's)."""
    out = subprocess.run(
        ["ps", "-ww", "-eo", "pid=,ppid=,pgid=,args="], capture_output=True, text=True
    ).stdout
    procs = [line.split(None, 3) for line in out.splitlines() if len(line.split(None, 3)) == 4]
    raylets = {int(pid) for pid, _, pgid, args in procs if int(pgid) == session and "raylet" in args}
    return [
        int(pid)
        for pid, ppid, _, args in procs
        if int(ppid) in raylets and args.startswith("ray::RayTrainWorker")
    ]


@pytest.mark.slow
@pytest.mark.ray  # a `looplab run` driver starts its own Ray: not beside the session's on the other worker
def test_two_workers_give_the_two_micro_batch_curve_through_kills(tmp_path, looplab_cache):
    env = {
        **os.environ,
        "LOOPLAB_CACHE": str(looplab_cache),
        "LOOPLAB_HEARTBEAT_GRACE_S": "1",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(ROOT),
    }
    (tmp_path / "grids.py").write_text(GRID_FILE)
    sub = looplab(tmp_path, "submit", "grids.py", env=env)
    assert sub.communicate(timeout=120)[0].count("added") and sub.returncode == 0
    q = Queue(db=tmp_path / "q.db")
    run_args = ("run", "--until-empty", "--num-cpus", "2", "--artifacts", str(tmp_path / "art"))

    first = looplab(tmp_path, *run_args, env=env)
    _wait(q, "SELECT id FROM jobs WHERE status='running' AND checkpoint_step >= 3", first, "checkpoint")
    os.killpg(first.pid, signal.SIGKILL)  # the driver, its Ray, the task and both workers
    first.wait()
    ((job, ckpt),) = rows(q, "SELECT id, checkpoint_step FROM jobs")

    second = looplab(tmp_path, *run_args, env=env)
    ((resumed,),) = _wait(
        q,
        "SELECT resumed_from_step FROM attempts WHERE job_id=:j AND n=2 AND resumed_from_step IS NOT NULL",
        second,
        "resumed attempt",
        j=job,
    )
    assert resumed >= ckpt > 0
    _wait(
        q,
        "SELECT id FROM jobs WHERE id=:j AND checkpoint_step >= :s",
        second,
        "checkpoint",
        j=job,
        s=resumed + 5,
    )
    workers = _train_workers(second.pid)
    assert len(workers) == 2, subprocess.run(
        ["ps", "-ww", "-eo", "pid,ppid,pgid,args"], capture_output=True, text=True
    ).stdout
    os.kill(workers[1], signal.SIGKILL)
    out = second.communicate(timeout=600)[0]
    assert second.returncode == 0, out
    assert "recovered 1 interrupted job(s)" in out

    attempts = rows(
        q, "SELECT n, outcome, resumed_from_step, error FROM attempts WHERE job_id=:j ORDER BY n", j=job
    )
    assert [(n, o) for n, o, *_ in attempts] == [(1, "interrupted"), (2, "interrupted"), (3, "succeeded")]
    assert "worker lost" in attempts[1][3]
    assert attempts[2][2] is not None and attempts[2][2] > resumed  # resumed again, not from scratch
    assert rows(q, "SELECT workers FROM train_results WHERE job_id=:j", j=job) == [(2,)]
    # rank 0 wrote attempt 3's final weights; the driver made them the job's when it recorded the success
    from looplab.workers import checkpoint

    ((art,),) = rows(q, "SELECT artifact_dir FROM jobs WHERE id=:j", j=job)
    assert checkpoint.load(Path(art) / "final.pt")["attempt"] == 3

    # the one-process run of the same spec: 2 micro-batches of 2, one torch thread like each worker

    ref = one_thread_run(TRAIN, tmp_path / "ref")
    for key in ("train_loss", "val_loss"):
        got = rows(
            q, "SELECT step, value FROM metrics WHERE job_id=:j AND key=:k ORDER BY step", j=job, k=key
        )
        assert [tuple(r) for r in got] == ref.curve(key) and len(got) > 0, key
    n_steps = len(ref.curve("train_loss"))
    assert rows(
        q, "SELECT COUNT(*), COUNT(DISTINCT step) FROM metrics WHERE job_id=:j AND key='train_loss'", j=job
    ) == [(n_steps, n_steps)]


@pytest.mark.slow
def test_two_gangs_on_three_slots_never_start_partially(tmp_path, ray_cluster):
    """The session's Ray has 2 CPUs: workers of 0.6 CPU make 3 slots, a 2-worker job takes 2."""
    import ray

    q = Queue(db=tmp_path / "q.db", artifacts=tmp_path / "art")
    base = {k: v for k, v in TRAIN.items() if k != "seed"} | {"tokens": 4 * 32 * 12, "ckpt_every": 100}
    ids = q.submit(
        Grid("gangs", base=base, sweep={"seed": [0, 1]}, resources={"workers": 2, "num_cpus": 0.6})
    )
    seen: list[tuple[int, tuple]] = []  # (live placement groups, their bundles) while the queue runs
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            live = [pg for pg in ray.util.placement_group_table().values() if pg["state"] != "REMOVED"]
            seen.append(
                (len(live), tuple(tuple(sorted(b.items())) for pg in live for b in pg["bundles"].values()))
            )
            time.sleep(0.2)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        q.run(until_empty=True, progress=False, poll_s=0.2)
    finally:
        done.set()
        watcher.join()
    st = q.status().set_index("id")
    assert set(st.loc[ids, "status"]) == {"succeeded"}, st[["status", "error"]]
    spans = [rows(q, "SELECT started_at, ended_at FROM attempts WHERE job_id=:j", j=j) for j in ids]
    assert [len(s) for s in spans] == [1, 1]  # each started once, whole
    (a0, a1), (b0, b1) = spans[0][0], spans[1][0]
    assert a1 <= b0 or b1 <= a0, "the two gangs overlapped: 4 workers on 3 slots"
    assert max(n for n, _ in seen) == 1  # one gang's placement group at a time
    bundles = {b for n, b in seen if n}
    assert bundles == {((("CPU", 0.6),), (("CPU", 0.6),))}, bundles  # what the driver booked, no more


class ClosingReporter(MemoryReporter):
    def close(self) -> None:
        self.closed = True


def _out_of_memory() -> BaseException:
    import torch

    return torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 1.5 GiB free)")


def _disk_full() -> BaseException:
    return OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize(
    "error, advice",
    [
        (_out_of_memory, "CUDA out of memory: the job did not fit"),
        (_disk_full, "No space left on device: the"),
    ],
    ids=["cuda-oom", "enospc"],
)
def test_a_gang_whose_rank_runs_out_of_memory_or_disk_gets_the_one_worker_advice(monkeypatch, error, advice):
    """Ray Train raises one error for the gang and keeps the failed rank's own (pickled: its cause
    chain lost) in `worker_failures`; the advice looks there, as the one-worker path looks at its error."""
    from ray.train.v2.api.exceptions import WorkerGroupError

    from looplab.orchestrator import task
    from looplab.orchestrator.states import AttemptOutcome
    from looplab.workers.train import distributed

    rank_error = pickle.loads(pickle.dumps(error()))  # as it comes back from the rank's process

    def fit(*args):
        raise WorkerGroupError(f"[Rank 1]: {type(rank_error).__name__}", {1: rank_error})

    monkeypatch.setattr(distributed, "fit", fit)
    gang, one = ClosingReporter(), ClosingReporter()
    run_gang = functools.partial(task.run_gang, TRAIN, "/nowhere", 2, 1.0, 0.0, None)
    on_gang = task.run_attempt(7, gang, "node:1 (2 workers)", None, run_gang)

    def run_one():
        raise error()

    on_one = task.run_attempt(7, one, "node:1", None, run_one)
    assert on_gang.outcome == on_one.outcome == AttemptOutcome.FAILED
    assert on_gang.error.startswith(advice) and on_one.error.startswith(advice)
    assert on_gang.error.split("Traceback follows.\n")[0] == on_one.error.split("Traceback follows.\n")[0]
    assert "WorkerGroupError" in on_gang.error  # the advice, then the traceback
    assert (
        gang.closed
        and one.closed
        and gang.of("started") == [{"worker": "node:1 (2 workers)", "gpu_ids": None}]
    )


def test_a_gang_attempt_ends_as_its_ranks_say(monkeypatch):
    """Rank 0's summary: succeeded; a stop asked of the run: interrupted; a rank's process gone
    (`WorkerLost`): interrupted, saying so; a Ctrl-C: interrupted, as on one worker."""
    from looplab.orchestrator import task
    from looplab.orchestrator.states import AttemptOutcome
    from looplab.workers.train import distributed

    def ends(fit) -> task.TaskResult:
        monkeypatch.setattr(distributed, "fit", fit)
        run = functools.partial(task.run_gang, TRAIN, "/nowhere", 2, 1.0, 0.0, None)
        return task.run_attempt(7, ClosingReporter(), "node:1 (2 workers)", None, run)

    def lost(*args):
        raise distributed.WorkerLost("rank(s) [1] of 2 died: ActorDiedError")

    def ctrl_c(*args):
        raise KeyboardInterrupt

    assert ends(lambda *a: {"summary": {"steps": 3}}) == task.TaskResult(
        AttemptOutcome.SUCCEEDED, summary={"steps": 3}
    )
    assert ends(lambda *a: {"interrupted": "stop asked"}) == task.TaskResult(AttemptOutcome.INTERRUPTED)
    assert ends(lost) == task.TaskResult(
        AttemptOutcome.INTERRUPTED, "Ray Train worker lost: rank(s) [1] of 2 died: ActorDiedError"
    )
    assert ends(ctrl_c) == task.TaskResult(AttemptOutcome.INTERRUPTED)


def test_an_iso_time_budget_matches_device_seconds_across_worker_counts(tmp_path):
    q = Queue(db=tmp_path / "q.db", kinds=fake_jobs)
    ref, same, wide = q.submit(
        [
            Grid("ref", base={"recipe": "lean", "tokens": 100}),
            Grid("same", base={"recipe": "parcae", "budget": {"match_time_of": {"recipe": "lean"}}}),
            Grid(
                "wide",
                base={"recipe": "fixed4", "budget": {"match_time_of": {"recipe": "lean"}}},
                resources={"workers": 4},
            ),
        ]
    )
    assert pairing.time_budget(120.0, 1, 1) == 120.0 and pairing.time_budget(120.0, 2, 1) == 240.0
    with q.eng.begin() as conn:
        assert pairing.matched_budgets(conn, ref, 120.0, 2) == {same: 240.0, wide: 60.0}
        assert pairing.matched_budgets(conn, ref, 120.0, None) == {same: 120.0, wide: 30.0}


def test_the_planner_scales_one_worker_throughput_until_that_count_was_measured(tmp_path, monkeypatch):
    """History: one 1-worker run at 100 tokens/s. A 2-worker job trains at 2 x 100 x DDP_EFFICIENCY
    until a 2-worker run was measured (then at its 150 tokens/s); evaluations and checkpoints stay."""
    monkeypatch.setenv("LOOPLAB_CACHE", str(tmp_path / "cache"))
    q = Queue(db=tmp_path / "q.db", artifacts=tmp_path / "art")
    finished_run(q)
    grid = Grid("two", base={**PLAN_TRAIN, "tokens": 2560}, resources={"workers": 2})

    def planned():
        (job,) = q.plan(grid, num_cpus=4, num_gpus=0, calibration=None).new_jobs()
        return job

    job = planned()
    assert job.workers == 2 and job.estimate.source == "measured"
    assert job.estimate.train_s == pytest.approx(2560 / (2 * 100.0 * DDP_EFFICIENCY))
    two = finished_run(q, seed=7)
    exec_sql(q, "UPDATE train_results SET workers=2, tokens_per_s=150.0 WHERE job_id=:j", j=two)
    job = planned()
    assert job.estimate.train_s == pytest.approx(2560 / 150.0)
    one = q.plan(Grid("one", base={**PLAN_TRAIN, "tokens": 2560}), num_cpus=4, num_gpus=0, calibration=None)
    assert one.new_jobs()[0].estimate.train_s == pytest.approx(2560 / FINISHED["tokens_per_s"])


def test_the_runs_frame_and_page_show_batch_micro_batch_and_workers(tmp_path, monkeypatch):
    q = Queue(db=tmp_path / "q.db", artifacts=tmp_path / "art")
    base = {k: v for k, v in TRAIN.items() if k != "micro_batch_size"}
    gang, whole = q.submit(
        [
            Grid("gang", base={**base, "micro_batch_size": 2}, resources={"workers": 2}),
            Grid("whole", base={**base, "seed": 1}),
        ]
    )
    url = f"sqlite:///{tmp_path / 'q.db'}"
    runs = frames.runs(url).set_index("job_id")
    assert runs.loc[gang, ["batch_size", "micro_batch_size", "workers"]].tolist() == [4, 2, 2]  # as asked
    assert runs.loc[whole, ["batch_size", "micro_batch_size", "workers"]].tolist() == [4, 4, 1]
    with q.eng.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO train_results (job_id, steps, tokens, train_seconds, workers) "
                "VALUES (:j, 1, 128, 1.0, 3)"
            ),
            {"j": gang},
        )
    frames.engine(url).dispose()
    assert frames.runs(url).set_index("job_id").loc[gang, "workers"] == 3  # as it trained
    assert q.results("runs").set_index("job_id").loc[gang, "workers"] == 3  # the view has the column
    from tests.dashboard.test_pages import frame_with, render

    page = frame_with(render(monkeypatch, url, "runs"), "batch_size", "micro_batch_size", "workers")
    assert page.set_index("job_id").loc[
        [gang, whole], ["batch_size", "micro_batch_size", "workers"]
    ].values.tolist() == [[4, 2, 3], [4, 4, 1]]


def test_an_old_database_gets_how_its_runs_step_back_filled(db_url):
    """Revisions 0010 and 0014 copy batch, micro-batch and workers out of the stored configs and
    resources; results trained before them were trained by one worker."""
    from alembic import command
    from sqlalchemy.pool import NullPool

    from looplab.orchestrator.db import alembic_config

    cfg = alembic_config(db_url)
    command.upgrade(cfg, "0009_big_counts")
    raw = sa.create_engine(db_url, poolclass=NullPool)
    jobs_at = [
        (1, "train", {"batch_size": 8, "micro_batch_size": 2}, {"workers": 2}),
        (2, "train", {"batch_size": 4, "micro_batch_size": None}, None),
        (3, "depth_sweep", {"batch_size": 4}, {"num_cpus": 1}),
    ]
    try:
        with raw.begin() as conn:
            for job_id, kind, config, resources in jobs_at:
                conn.execute(
                    sa.text(
                        "INSERT INTO jobs (id, kind, config, config_hash, status, priority, attempts, "
                        "max_attempts, resources, created_at) VALUES (:i, :k, :c, :h, 'succeeded', 0, 1, 1, "
                        ":r, 0)"
                    ),
                    {
                        "i": job_id,
                        "k": kind,
                        "c": json.dumps(config),
                        "h": f"h{job_id}",
                        "r": None if resources is None else json.dumps(resources),
                    },
                )
            conn.execute(
                sa.text(
                    "INSERT INTO train_results (job_id, steps, tokens, train_seconds) VALUES (2, 1, 128, 1.0)"
                )
            )
        command.upgrade(cfg, "head")
        with raw.connect() as conn:
            got = conn.execute(
                sa.text("SELECT id, global_batch, micro_batch_size, workers FROM jobs ORDER BY id")
            )
            assert [tuple(r) for r in got] == [(1, 8, 2, 2), (2, 4, None, 1), (3, None, None, 1)]
            assert conn.execute(sa.text("SELECT workers FROM train_results")).all() == [(1,)]
            runs = conn.execute(
                sa.text("SELECT job_id, batch_size, micro_batch_size, workers FROM runs ORDER BY job_id")
            ).all()
            assert [tuple(r) for r in runs] == [(1, 8, 2, 2), (2, 4, 4, 1)]
    finally:
        raw.dispose()
