"""A grid of the Huginn-style family at its published size (3.6 B parameters) is checked, submitted and
priced without allocating it (model/family_pricing.py, model.contract.large_module): the conformance check's values run at the
family's `check_config` (the same code at width 32), the counts and FLOPs come from a module on the
meta device. Measured in a fresh process, whose peak memory stays far below the 14 GB one fp32 copy
of the model would take."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from looplab.families.huginn import PUBLISHED, factory, published_counts
from looplab.model.contract import (
    CHECK_MAX_PARAMS,
    FamilyError,
    check_config,
    check_family,
    meta_module,
    resolve_family,
)
from tests.families.test_huginn import TINY

ROOT = Path(__file__).resolve().parents[2]
NAME = "families.huginn:factory"
PROBE = """
import json, resource
from looplab.families.huginn import PUBLISHED
from looplab.lab.planner import Calibration
from looplab.lab.planner.estimates import TimeModel, estimate_plans
from looplab.model.contract import check_family
from looplab import Grid
from looplab.orchestrator.grid import expand
from tests.workers.conftest import tiny_spec
from looplab.workers import jobs

report = check_family("families.huginn:factory", dict(PUBLISHED), loops=32)
config = {k: v for k, v in PUBLISHED.items() if k not in ("vocab_size", "seq_len")}
base = tiny_spec(family="families.huginn:factory", family_config=config, optimizer="adamw", model={"loops": 8})
plans = expand([Grid("pub", base=base, then=["depth_sweep"], follow={"depth_sweep": {"loops": [4, 8]}})], jobs)
cal = Calibration(device="cpu", flops_per_s=1e9, decode_layer_s=1e-4, save_bytes_per_s=1e12, startup_s=2.0)
estimates = estimate_plans(TimeModel(None, cal, "cpu"), plans)
print(json.dumps({
    "n_params": report.n_params, "flops32": report.flops_per_token,
    "checked_d": report.checked_config["d_model"], "kv": list(report.kv_strategies),
    "grid_params": plans[0].family_facts["n_params"], "grid_flops": plans[0].family_facts["flops_per_token"],
    "train_flops": estimates[0].flops, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
}))
"""


def test_a_published_size_grid_is_checked_and_priced_without_allocating_it():
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    counts = published_counts([32])
    assert got["n_params"] == counts["params"] and got["flops32"] == counts["flops_per_token"][32]
    assert got["checked_d"] == 32 and got["kv"] == ["full", "latest_per_slot"]
    # the grid's model: the published blocks at the byte tokenizer's vocabulary and the grid's context
    grid_model = meta_module(resolve_family(NAME), {**PUBLISHED, "vocab_size": 256, "seq_len": 32})
    assert got["grid_params"] == sum(p.numel() for p in grid_model.parameters()) > 3e9
    assert got["grid_flops"] == grid_model.flops_per_token(8) and got["train_flops"] > 0
    assert got["peak_mb"] < 2_000, f"peak {got['peak_mb']:.0f} MB: the model was allocated"


def test_a_small_config_is_checked_at_its_own_size():
    report = check_family(NAME, dict(TINY), loops=3)
    assert report.checked_config is None and report.n_params == sum(
        p.numel() for p in factory(TINY).parameters()
    )
    assert report.n_params < CHECK_MAX_PARAMS


def test_a_check_config_that_changes_the_vocabulary_is_refused_naming_it(monkeypatch):
    fam = resolve_family(NAME)
    monkeypatch.setattr(fam.factory, "check_config", lambda c: {**c, "d_model": 32, "vocab_size": 7})
    with pytest.raises(FamilyError, match="check_config changed vocab_size 65536 -> 7"):
        check_config(fam, dict(PUBLISHED))
