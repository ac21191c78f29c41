"""The jobs and benchmarks on CUDA, as a first GPU machine runs them (skipped without CUDA): MFU of a
train run, and smoke runs of the benchmarks' command lines as subprocesses with small settings that
check each finishes and writes sensible numbers (the numbers are for the benchmark logs, not for
assertions). Moved here from tests/test_gpu_smoke.py and tests/workers/test_flops_budget.py."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from tests.workers.conftest import tiny_spec
from workers import train
from workers.device import peak_flops_of
from workers.reporter import MemoryReporter
from workers.train_spec import Spec

ROOT = Path(__file__).resolve().parents[2]


def _run(args: list[str], timeout: int) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-3000:])
    return r


@pytest.mark.gpu
def test_mfu_on_gpu(looplab_cache, tmp_path):
    import torch

    rep = MemoryReporter()
    spec = Spec.from_dict(tiny_spec(device="cuda", tokens=8 * 32 * 4))
    train.run(spec, rep, tmp_path / "run")
    row = next(e["row"] for e in rep.of("result") if e["table"] == "train_results")
    peak = peak_flops_of(torch.cuda.get_device_name())
    if peak is None:
        assert row["mfu"] is None
    else:
        assert row["mfu"] == pytest.approx(row["achieved_flops_per_s"] / peak) and 0 < row["mfu"] < 1


@pytest.mark.gpu
@pytest.mark.parametrize("recipe", ["lean", "parcae"])
def test_decode_bench_replays_cuda_graphs(recipe, tmp_path):
    """Tiny model, bf16, CUDA graphs; a context of 100 tokens wraps lean's 16- and 32-slot rings."""
    args = ["-m", "workers.decode_bench", "--recipe", recipe, "--size", "tiny", "--device", "cuda"]
    args += ["--context-lens", "40,100", "--batch-sizes", "1,4", "--warmup", "2", "--steps", "5"]
    _run([*args, "--cuda-graph", "true", "--out", str(tmp_path)], timeout=300)
    rows = json.loads((tmp_path / "decode_bench.json").read_text())["rows"]
    assert [(r["context_len"], r["batch_size"]) for r in rows] == [(40, 1), (40, 4), (100, 1), (100, 4)]
    for r in rows:
        assert r["device"] == "cuda" and r["dtype"] == "bfloat16" and r["cuda_graph"] is True
        assert 0 < r["ms_p10"] <= r["ms_per_token"] <= r["ms_p90"] and math.isfinite(r["ms_p90"])


@pytest.mark.gpu
@pytest.mark.slow  # benchmarks/gpu_check.sh runs this section in full as its own step
def test_model_bench_ratios_on_cuda(tmp_path):
    """The study's speed ratios at 144m, one measured step per recipe: every recipe trains (bf16
    autocast, Flex for the windowed rounds) and every ratio is a positive number."""
    _run(
        [
            "benchmarks/model_bench.py",
            "--device",
            "cuda",
            "--section",
            "ratios",
            "--ratio-steps",
            "1",
            "--out",
            str(tmp_path),
        ],
        timeout=600,
    )
    section = json.loads((tmp_path / "model_bench_ratios.json").read_text())["ratios"]
    assert section["size"] == "144m" and all(r["tokens_per_s"] > 0 for r in section["recipes"].values())
    assert section["ratios"] and all(
        0 < v["measured"] < math.inf and 0 < v["predicted"] < math.inf for v in section["ratios"].values()
    )
