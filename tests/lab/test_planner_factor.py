"""This machine's factor over the FLOP model (lab/planner/machine_factor.py): finished jobs of one recipe
correct the estimates of every recipe, per kind, on the same device type, with the evidence in the plan.
Histories are built by hand from the FLOP model's own figures, so each factor is known exactly."""

from __future__ import annotations

import pytest

from looplab import Grid, Queue
from looplab.lab.planner import Calibration, TimeModel
from looplab.lab.planner.history import variant_of
from looplab.lab.planner.machine_factor import RECENT, Factor, MachineFactors
from tests.lab.test_planner import CAL, TRAIN, finished_run

LEAN, PLAIN = {**TRAIN, "tokens": 1280}, {**TRAIN, "recipe": "plain", "tokens": 2560}
SWEEP = {"loops": [1, 2, 4]}
BENCH = {"size": "tiny", "context_lens": [64], "batch_sizes": [1], "steps": 3}


def train_row(model: TimeModel, spec: dict, ratio: float, device: str = "cpu") -> dict:
    """A finished train job of `spec` that ran `ratio` times slower than the FLOP model says."""
    cost = model.train_cost("train", spec)
    tokens_per_s = cost.tokens_per_step / model._step_seconds(cost) / ratio
    return {
        "kind": "train",
        "variant_id": variant_of(spec, "train"),
        "spec": spec,
        "wall": 10.0,
        "device": device,
        "tokens_per_s": tokens_per_s,
        "overhead": 1.0,
        "workers": 1,
    }


def forward_row(model: TimeModel, kind: str, spec: dict, ratio: float, trained=None, device="cpu") -> dict:
    """A finished job of forward passes that took `ratio` times its FLOP-model work time."""
    cost = model.forward_cost(kind, spec, trained)
    about = trained if trained is not None else (kind, spec)
    return {
        "kind": kind,
        "variant_id": variant_of(about[1], about[0]),
        "spec": spec,
        "trained": trained,
        "wall": ratio * model._forward_seconds(cost),
        "device": device,
    }


def test_finished_jobs_of_one_recipe_correct_every_recipe_per_kind():
    """lean's train jobs ran 1.6x, its sweeps 2.4x and its decode benches 0.5x their FLOP-model times:
    plain, never run, is priced at those multiples per kind; a kind with none of its own (eval) takes the
    factor pooled over every kind; a CUDA job says nothing about the CPU."""
    bare = TimeModel(None, CAL)
    lean_bench, plain_bench = {**BENCH, "recipe": "lean"}, {**BENCH, "recipe": "plain"}
    history = [train_row(bare, {**LEAN, "seed": s}, r) for s, r in enumerate((1.5, 1.6, 1.7))]
    history += [forward_row(bare, "depth_sweep", SWEEP, r, ("train", LEAN)) for r in (2.3, 2.4, 2.5)]
    history += [forward_row(bare, "decode_bench", lean_bench, 0.5)]
    history += [train_row(bare, {**LEAN, "seed": 9}, 50.0, device="cuda")]
    fitted = TimeModel(None, CAL)
    fitted.history = history

    plain = ("train", PLAIN)
    before = bare.estimate(*plain)
    after = fitted.estimate(*plain)
    assert (before.source, after.source) == ("flop_model", "flop_fit")
    assert after.factor == Factor(pytest.approx(1.6), pytest.approx(0.05), 3)
    assert after.train_s == pytest.approx(1.6 * before.train_s)
    for kind, spec, trained, factor in (
        ("depth_sweep", SWEEP, plain, 2.4),
        ("decode_bench", plain_bench, None, 0.5),
        ("eval", {"tasks": ["deduction"], "loops": [1, 2]}, plain, 1.7),  # median of the 7 CPU ratios
    ):
        b, a = bare.estimate(kind, spec, trained=trained), fitted.estimate(kind, spec, trained=trained)
        assert (b.source, a.source) == ("flop_model", "flop_fit"), kind
        assert a.startup_s == b.startup_s  # the start-up is measured apart, never scaled
        assert a.seconds - a.startup_s == pytest.approx(factor * (b.seconds - b.startup_s)), kind
        assert a.factor.own == (kind != "eval")
    # the variant already run is still priced from its own runs, not the factor
    assert fitted.estimate("depth_sweep", SWEEP, trained=("train", LEAN)).source == "finished"
    # on the GPU only the CUDA job counts
    cuda = TimeModel(None, CAL, device="cuda")
    cuda.history = history
    assert cuda.factors.get("train").value == pytest.approx(50.0) and cuda.factors.get("train").jobs == 1


def test_factor_keeps_the_recent_jobs_and_says_its_evidence():
    old, new = [10.0] * 30, [1.4, 1.5, 1.58, 1.6, 1.7] * 10
    factors = MachineFactors({"train": old + new})
    assert len(new) == RECENT and factors.get("train").value == pytest.approx(1.58)
    factor = Factor.of([1.2, 1.4, 1.5, 1.58, 1.6, 1.7, 1.9] * 2)
    assert factor.jobs == 14 and factor.value == pytest.approx(1.58)
    # quartiles 1.425 and 1.675: ± half their distance
    assert factor.spread == pytest.approx(0.125)
    assert factor.describe() == "from 14 finished jobs on this machine, factor 1.58 ± 0.12"
    assert Factor.of([2.0]).describe() == "from 1 finished job on this machine, factor 2.00 ± 0.00"
    assert Factor.of([0.0, float("nan"), -1.0]) is None  # nothing usable: the FLOP model alone
    assert MachineFactors({}).get("train") is None and MachineFactors({}).lines(["train"]) == []
    pooled = MachineFactors({"train": [2.0]}).get("decode_bench")
    assert not pooled.own and "of other kinds" in pooled.describe()


def test_plan_shows_the_factor_and_its_evidence(tmp_path, monkeypatch):
    """`looplab plan` of a recipe never run, after one finished lean run: its row is `flop_fit` and the
    header says from how many finished jobs and which factor; without a calibration nothing is fitted."""
    monkeypatch.setenv("LOOPLAB_CACHE", str(tmp_path / "cache"))
    q = Queue(db=tmp_path / "q.db", artifacts=tmp_path / "art")
    grid = Grid("p", base={**PLAIN, "seed": 3})
    (first,) = q.plan(grid, num_cpus=1, num_gpus=0, calibration=CAL).new_jobs()
    assert first.estimate.source == "flop_model"
    finished_run(q)
    report = q.plan(grid, num_cpus=1, num_gpus=0, calibration=CAL)
    (job,) = report.new_jobs()
    assert job.estimate.source == "flop_fit" and job.estimate.factor.jobs == 1
    text = report.text()
    assert "FLOP model x this machine's factor" in text
    assert f"train: from 1 finished job on this machine, factor {job.estimate.factor.value:.2f}" in text
    assert report.frame()["factor"].iloc[0] == pytest.approx(job.estimate.factor.value)
    # a calibration of another machine: this database's history ran here, nothing is fitted
    other = Calibration(
        device="cpu", flops_per_s=2e9, decode_layer_s=1e-4, save_bytes_per_s=1e12, startup_s=1
    )
    (elsewhere,) = q.plan(grid, num_cpus=1, num_gpus=0, calibration=other, elsewhere=True).new_jobs()
    assert elsewhere.estimate.source == "flop_model"
