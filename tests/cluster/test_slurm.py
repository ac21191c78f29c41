"""A study on a real SLURM (tests/cluster/slurm.py: slurmctld on `ctl`, slurmd on `c1` and `c2`, munge,
PostgreSQL on `pg`), through the script `looplab slurm` writes and `sbatch` (a 10-minute limit, the
warning 90 s before it). The first two allocations end by their time limit: once their jobs have made
progress the test brings the limit near (`scontrol update timelimit`, as an operator may), SLURM warns
(USR1) at its next check, the driver hands its jobs back and the script submits its follow-on. How long
an allocation trains is then bounded whatever this machine's load (Ray's start alone takes 20-60 s
here), so the number of allocations is not left to chance. Node c2 is drained during the first
allocation, so the next ones run on c1 alone; the third finishes the study.
Each job must end with one recorded result and curves equal, bit for bit and point for point, to an
uninterrupted run; nothing of SLURM, munge or the cluster may be left.

Skipped (with the reason) where the SLURM packages are missing, unless LOOPLAB_REQUIRE_SLURM=1 (CI),
where that is a failure."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

from looplab.workers.reporter import EventKind
from tests.cluster import netns, slurm
from tests.orchestrator.test_real_jobs import one_thread_run

pytestmark = [pytest.mark.multinode, pytest.mark.ray, pytest.mark.slow]
if netns.available():
    pytestmark.append(pytest.mark.skip(reason=netns.available()))
elif slurm.available() and os.environ.get("LOOPLAB_REQUIRE_SLURM") != "1":
    pytestmark.append(pytest.mark.skip(reason=slurm.available()))

# two small runs, each about TRAIN_S seconds of training on this machine as it is loaded now (measured,
# `calibrated_steps`): more than the first two allocations give them (each ends within 30 s of the test
# bringing its limit near, SLURM's check interval), so the third finishes the study
TRAIN_S = 60
TRAIN = {
    "recipe": "lean",
    "size": "tiny",
    "seq_len": 32,
    "batch_size": 4,
    "ckpt_every": 50,
    "ckpt_minutes": 0.1,
    "eval_every": 50,
    "eval_tokens": 256,
    "device": "cpu",
    "data": {"tokenizer": "byte"},
}
SEEDS = (0, 1)
GRID = """
from looplab import Grid
grid = Grid("slurm", base={base!r}, sweep={{"seed": {seeds!r}}}, resources={{"num_cpus": 1}})
"""
STUDY_TIMEOUT_S = 600


@pytest.fixture
def cluster(looplab_cache):
    if slurm.available():  # only in CI (LOOPLAB_REQUIRE_SLURM=1) does a missing package get this far
        pytest.fail(f"LOOPLAB_REQUIRE_SLURM=1 but {slurm.available()}")
    made = slurm.SlurmLab(looplab_cache)
    yield made
    made.close()
    assert made.leftovers() == []


def calibrated_steps(art) -> int:
    """How many steps train for about TRAIN_S seconds here now (a short run's pace, its start left out)."""
    ref = one_thread_run({**TRAIN, "tokens": 4 * 32 * 80, "seed": 9}, art)
    points = [e for e in ref.events if e.kind == EventKind.METRIC and e.payload["key"] == "train_loss"]
    pace = (points[-1].payload["step"] - points[0].payload["step"]) / (points[-1].ts - points[0].ts)
    return int(min(3000, max(150, pace * TRAIN_S)))


def references(train: dict, art) -> dict[int, object]:
    """Each seed's run, uninterrupted, in this process on one thread (as a one-CPU Ray task runs it)."""
    return {seed: one_thread_run({**train, "seed": seed}, art / str(seed)) for seed in SEEDS}


def test_a_study_runs_across_slurm_time_limits_and_a_drained_node_bit_for_bit(cluster, tmp_path):
    lab = cluster.lab
    steps = calibrated_steps(tmp_path / "pace")
    train = {**TRAIN, "tokens": 4 * 32 * steps}
    ref: dict = {}

    def run_references() -> None:  # beside the study; an error is kept to be shown, not lost in the thread
        try:
            ref.update(references(train, tmp_path / "ref"))
        except BaseException as error:  # noqa: BLE001 - reported below
            ref["error"] = error

    reference = threading.Thread(target=run_references, daemon=True)
    reference.start()
    (lab.net.shared / "grids.py").write_text(GRID.format(base=train, seeds=list(SEEDS)))
    lab.looplab_done("ctl", "db", "upgrade")  # the test reads the queue before the first driver starts
    script = lab.net.shared / "study.sbatch"
    wrote = lab.looplab_done(
        "ctl", "slurm", "grids.py", "--artifacts", str(lab.art), "--time", "10", "--signal-before", "90",
        "--nodes", "1-2", "--head-wait", "60", "-o", str(script),
    )  # fmt: skip
    assert f"sbatch {script}" in wrote, wrote
    # the first allocation on both nodes (SLURM gives a range its smallest count when it can): the
    # follow-ons ask for 1-2 nodes, so they run on c1 alone once c2 is drained
    submitted = cluster.slurm("sbatch", "--parsable", "--nodes=2", str(script))
    assert submitted.returncode == 0, submitted.stderr
    first = submitted.stdout.strip()

    # the first allocation: a job on each node, each past a checkpoint; then c2 is drained under it, and
    # the allocation's time limit is brought near (SLURM warns at its next check, within 30 s)
    progress = "SELECT id, checkpoint_step FROM jobs WHERE status = 'running' AND checkpoint_step > 0"
    end = time.monotonic() + 300
    while not (len(before := dict(lab.query(progress))) == 2 and _on_both(cluster)):
        assert time.monotonic() < end, f"no allocation ran two jobs on c1 and c2: {cluster.jobs()}"
        time.sleep(1)
    drained = cluster.slurm("scontrol", "update", "nodename=c2", "state=drain", "reason=test")
    assert drained.returncode == 0, drained.stderr
    cluster.limit_now(first)
    # the second allocation (c1 alone): once a job checkpointed past where the first left it, the same
    second = _next_allocation(cluster, first)
    end = time.monotonic() + 300
    while not any(step > before.get(j, 0) for j, step in lab.query(progress)):
        assert time.monotonic() < end, f"no progress in the second allocation: {cluster.jobs()}"
        time.sleep(1)
    cluster.limit_now(second)

    end = time.monotonic() + STUDY_TIMEOUT_S
    while not _study_over(cluster, lab):
        assert time.monotonic() < end, f"study not done: {cluster.jobs()}\n{_outputs(lab)[-4000:]}"
        time.sleep(2)
    # the references share the 2 cores with the study: on a loaded machine they may end after it
    reference.join(900)
    assert "error" not in ref, f"the reference runs failed: {ref.get('error')!r}"
    assert ref, "the reference runs did not finish within 900 s of the study's end"

    jobs = sorted(cluster.jobs(), key=lambda j: int(j[0]))
    outputs = {int(p.stem.rsplit("-", 1)[1]): p.read_text() for p in (lab.art / "slurm").glob("*.out")}
    released = [name for name, text in outputs.items() if "SIGUSR1: releasing the queue" in text]
    after_drain = [nodes for _, state, _, nodes in jobs[1:] if state == "COMPLETED"]
    assert len(released) >= 2, f"allocations ended by their time limit: {released}\n{_outputs(lab)}"
    assert all(nodes == "c1" for nodes in after_drain) and after_drain, jobs  # the drained node got none
    assert all(state == "COMPLETED" for _, state, _, _ in jobs), jobs  # every allocation ended cleanly
    assert "driver exited with 0" in outputs[max(outputs)]  # the last one emptied the queue

    rows = lab.query("SELECT id, status FROM jobs ORDER BY id")
    assert [s for _, s in rows] == ["succeeded"] * len(SEEDS), rows
    releases = lab.query(  # by SLURM's warning, or by its TERM at the limit when that came first under load
        "SELECT job_id FROM health_events WHERE rule = 'preempted' "
        "AND (message LIKE 'slurm time limit%' OR message LIKE 'allocation ending (SIGTERM%')"
    )
    preempted = lab.query("SELECT job_id FROM attempts WHERE outcome = 'preempted'")
    assert len(releases) >= 1 and len(preempted) == len(releases), (releases, preempted)
    assert not lab.query("SELECT job_id FROM attempts WHERE outcome = 'failed'")
    seeds = {
        job_id: json.loads(config)["seed"] for job_id, config in lab.query("SELECT id, config FROM jobs")
    }
    for job_id, seed in seeds.items():
        assert lab.query(f"SELECT COUNT(*) FROM train_results WHERE job_id = {job_id}") == [[1]]
        for key in ("train_loss", "val_loss"):
            got = lab.query(
                f"SELECT step, value FROM metrics WHERE job_id = {job_id} AND key = '{key}' ORDER BY step"
            )
            assert [tuple(r) for r in got] == ref[seed].curve(key) and got, (seed, key)  # once each


def _next_allocation(cluster: slurm.SlurmLab, after: str, timeout: float = 300) -> str:
    """The id of the allocation that follows `after`, once it runs."""
    end = time.monotonic() + timeout
    while True:
        running = [j for j, state, _, _ in cluster.jobs() if state == "RUNNING" and int(j) > int(after)]
        if running:
            return running[0]
        assert time.monotonic() < end, f"no allocation after {after}: {cluster.jobs()}"
        time.sleep(1)


def _on_both(cluster: slurm.SlurmLab) -> bool:
    return any(state == "RUNNING" and nodes == "c[1-2]" for _, state, _, nodes in cluster.jobs())


def _study_over(cluster: slurm.SlurmLab, lab) -> bool:
    """Every looplab job finished and no SLURM job pending or running."""
    active = [j for j in cluster.jobs() if j[1] in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING")]
    left = lab.query("SELECT id FROM jobs WHERE status NOT IN ('succeeded', 'failed', 'cancelled')")
    return not active and not left


def _outputs(lab) -> str:
    return "\n".join(
        f"== {p.name}\n{p.read_text()[-1500:]}" for p in sorted((lab.art / "slurm").glob("*.out"))
    )
