"""Data parallel without Ray: two ranks of a gloo process group (spawned processes, one thread each)
compute the gradient a one-process run accumulates over micro-batches.

- One forward per rank against one process with 2 micro-batches: the same two partial gradients,
  summed (DDP's reduction is a sum here, not a mean): equal bit for bit, and so is the step's loss, for
  the fixed sampler with truncated backprop and the per-sequence sampler with bucketing.
- Two forwards per rank (DDP `no_sync` on the first) against one process with 4: equal to float
  summation order.
- Parameters a rank leaves unused: a loop-design variant (history maps, loop-gate timestep) with
  per-sequence counts where one rank runs a single round (no history term: its history map has no
  gradient there) and the other rank uses it only in the micro-step that does not sync; and the same
  variant on sampled counts.
- The exit gate (issue 38, entropy objective): the gradient cases above, and a whole gated run whose
  logged curves and final weights equal a one-process run's with the same global batch.
- A time budget: every decision that reads a clock is rank 0's, so both ranks calibrate, plan and
  train the same steps and count the same seconds.
"""

from __future__ import annotations

import gc
import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from looplab.workers.reporter import MemoryReporter, SilentReporter
from looplab.workers.train.spec import Spec
from looplab.workers.train.trainer import Trainer
from tests.model.conftest import randomize
from tests.workers.conftest import TINY_MODEL, tiny_spec

# docs/testing.md: every case spawns two gloo ranks, each a fresh process importing torch
pytestmark = pytest.mark.slow

LOOP_DESIGN = {
    **TINY_MODEL,
    "loop_sampler": "poisson_seq",
    "grad_rounds": 2,
    "history": 1,
    "timestep": "loop_gate",
}
FORCED = [5, 5, 1, 1, 1, 1, 1, 1]  # rank 0: rows 0-3 (its first forward runs 5 rounds, its last 1)
# name: (spec overrides, micro-batch per rank, micro-batch of the one process, forced counts, bit for bit)
CASES = {
    "fixed truncated, 1 forward per rank": ({"recipe": "fixed6_grad3"}, None, 4, None, True),
    "per-sequence bucketed, 1 forward per rank": (
        {"recipe": "parcae", "bucketing": True},
        None,
        4,
        None,
        True,
    ),
    "per-sequence bucketed, 2 forwards per rank": (
        {"recipe": "parcae", "bucketing": True},
        2,
        2,
        None,
        False,
    ),
    "unused parameters, forced counts": (
        {"recipe": "lean", "model": LOOP_DESIGN, "bucketing": False},
        2,
        2,
        FORCED,
        False,
    ),
    "unused parameters, sampled counts": ({"recipe": "lean", "model": LOOP_DESIGN}, 2, 2, None, False),
}
STEPS = (0, 1)
GATE = {"model": {**TINY_MODEL, "exit_gate": "entropy", "gate_coef": 0.05}}  # a learned exit (issue 38)
CASES["exit gate, 1 forward per rank"] = (GATE, None, 4, None, True)
CASES["exit gate, 2 forwards per rank"] = (GATE, 2, 2, None, False)
# a whole gated run, 2 ranks against 1 process with the same global batch: its logged curves and weights
GATE_RUN = dict(GATE, tokens=8 * 32 * 6, log_every=1, eval_every=3, ckpt_every=3)
GATE_CURVES = ("train_loss", "train_task_loss", "gate_expected_rounds", "val_loss")


def _trainer(overrides: dict, micro: int | None, counts: list[int] | None, out: Path, gang=None) -> Trainer:
    spec = Spec.from_dict(tiny_spec(**overrides, micro_batch_size=micro))
    t = Trainer(spec, SilentReporter(), out) if gang is None else Trainer(spec, SilentReporter(), out, gang)
    randomize(t.model)  # the same weights on every rank (at init most gradients would vanish)
    if counts is not None:
        t.model.sample_loops = lambda batch, step, seed: torch.tensor(counts)
    return t


def _step_grads(t: Trainer, step: int) -> tuple[float, dict[str, torch.Tensor]]:
    t.model.zero_grad(set_to_none=True)
    loss = t.gang.total(t._accumulate(t.model, t.forward_model, step)).item()
    return loss, {n: p.grad.clone() for n, p in t.model.named_parameters() if p.grad is not None}


def _rank(rank: int, world: int, init_file: str, out: str) -> None:
    """One spawned rank: every case's loss and gradients at STEPS, saved to rank{rank}.pt."""
    from looplab.workers.train.distributed import Ranks, run_rank

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    results = {}
    try:
        for name, (overrides, micro, _, counts, _) in CASES.items():
            t = _trainer(overrides, micro, counts, Path(out) / name / str(rank), Ranks(rank, world))
            results[name] = [_step_grads(t, step) for step in STEPS]
            del t  # DDP and its reducer before the process group (a rank can hang at exit otherwise)
            gc.collect()
        rep = MemoryReporter() if rank == 0 else None
        run_rank(Spec.from_dict(tiny_spec(**GATE_RUN)), Ranks(rank, world), Path(out) / "gate_run", rep)
        if rank == 0:
            results["gate run"] = {key: rep.curve(key) for key in GATE_CURVES}
        gc.collect()
        spec = Spec.from_dict(tiny_spec(tokens=None, time_s=2.0, calib_steps=2))
        timed = run_rank(
            spec, Ranks(rank, world), Path(out) / "timed", MemoryReporter() if rank == 0 else None
        )
        results["time budget"] = timed["summary"]
        gc.collect()
        torch.save(results, Path(out) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def ranks(looplab_cache, tmp_path_factory):
    """Both ranks' results, per case."""
    out = tmp_path_factory.mktemp("ddp")
    _trainer({}, None, None, out / "warm")  # the data cache, once, before two processes want it
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    # (a spawned child re-runs the parent's __main__: tests/conftest.py keeps it the session's own)
    mp.spawn(_rank, args=(2, str(out / "pg"), str(out)), nprocs=2, join=True)
    return [{**torch.load(out / f"rank{r}.pt"), "out": str(out)} for r in range(2)]


@pytest.mark.parametrize("case", list(CASES))
def test_two_ranks_compute_the_accumulated_gradient(ranks, tmp_path, case):
    overrides, _, micro, counts, exact = CASES[case]
    one = _trainer(overrides, micro, counts, tmp_path / "one")
    for i, step in enumerate(STEPS):
        loss, want = _step_grads(one, step)
        (loss0, got0), (loss1, got1) = ranks[0][case][i], ranks[1][case][i]
        assert sorted(got0) == sorted(got1) == sorted(want) and len(want) > 10
        for name in want:  # every rank holds the same reduced gradient
            assert torch.equal(got0[name], got1[name]), name
        assert loss0 == loss1
        if exact:
            assert loss0 == loss
            for name, g in want.items():
                assert torch.equal(got0[name], g), name
            continue
        assert loss0 == pytest.approx(loss, rel=1e-6)
        total = torch.cat([g.flatten() for g in want.values()])
        diff = torch.cat([(got0[n] - want[n]).flatten() for n in want])
        assert diff.norm() <= 1e-6 * total.norm()
        for name, g in want.items():
            assert (got0[name] - g).norm() <= 1e-5 * g.norm().clamp_min(1e-30), name


def test_a_gated_run_on_two_ranks_follows_the_one_process_run(ranks, tmp_path):
    """The exit gate's objective (task loss plus the entropy term) trains on two gloo ranks as on one
    process with the same global batch of 8: the same logged curves and final weights, to the float
    summation order (the 2-forwards case's tolerance)."""
    from looplab.workers import checkpoint as ckpt
    from looplab.workers.artifacts import resume_from
    from looplab.workers.train import job as train

    rep = MemoryReporter()
    train.run(Spec.from_dict(tiny_spec(**GATE_RUN, micro_batch_size=4)), rep, tmp_path / "one")
    got = ranks[0]["gate run"]
    for key in GATE_CURVES:
        want = rep.curve(key)
        assert len(want) >= 2 and [s for s, _ in got[key]] == [s for s, _ in want], key
        assert [v for _, v in got[key]] == pytest.approx([v for _, v in want], rel=1e-6), key
    assert {v for _, v in want} != {want[0][1]}  # the run moved
    one = ckpt.load(resume_from(tmp_path / "one"))["model"]
    two = ckpt.load(resume_from(Path(ranks[0]["out"]) / "gate_run"))["model"]
    assert sorted(one) == sorted(two) and any("gate" in name for name in one)
    for name, w in one.items():
        assert (two[name] - w).norm() <= 1e-5 * w.norm().clamp_min(1e-30), name


def test_a_time_budget_takes_the_same_steps_on_every_rank(ranks):
    zero, one = ranks[0]["time budget"], ranks[1]["time budget"]
    assert zero["steps"] == one["steps"] > 0 and zero["train_seconds"] == one["train_seconds"] > 0
    assert zero["workers"] == one["workers"] == 2
    assert zero["final_val_loss"] is not None and one["final_val_loss"] is None  # rank 0 evaluates


def test_the_forced_counts_leave_a_parameter_unused_on_a_rank(looplab_cache, tmp_path):
    """The unused-parameter case is real: one round (no past state) leaves the history map without a
    gradient, which the whole step gives it; rank 1's rows all run one round."""
    overrides = CASES["unused parameters, forced counts"][0]
    t = _trainer(overrides, 2, [1] * 8, tmp_path / "ones")
    _, one_round = _step_grads(t, 0)
    t = _trainer(overrides, 2, FORCED, tmp_path / "forced")
    _, step = _step_grads(t, 0)
    unused = sorted(set(step) - set(one_round))
    assert "history.weight" in unused, unused


def test_workers_must_share_the_batch():
    from looplab.model.errors import ConfigError
    from looplab.workers.train.distributed import check_workers

    check_workers(8, 4)
    with pytest.raises(ConfigError, match="resources.workers: 3 workers cannot share batch_size 8"):
        check_workers(8, 3)


def test_one_process_checkpoint_keeps_its_layout(looplab_cache, tmp_path):
    """A one-process checkpoint has no per-rank RNG list (`rng_ranks` is a gang's): its layout is as
    before, and the row says 1 worker."""
    from looplab.workers import checkpoint as ckpt
    from looplab.workers.artifacts import resume_from
    from looplab.workers.train import job as train

    rep = MemoryReporter()
    row = train.run(Spec.from_dict(tiny_spec(tokens=8 * 32 * 2)), rep, tmp_path / "run")
    saved = ckpt.load(resume_from(tmp_path / "run"))
    assert "rng" in saved and "rng_ranks" not in saved
    assert row["workers"] == 1 and rep.of("result")[0]["row"]["workers"] == 1
