"""The jobs and benchmarks on CUDA, as a first GPU machine runs them (skipped without CUDA): MFU and HFU
of a train run and its FLOPs against FlopCounterMode's (an unknown GPU fails, saying how to add its
peak), and smoke runs of the benchmarks' command lines as subprocesses with small settings that check
each finishes and writes sensible numbers (the numbers are for the benchmark logs, not for
assertions). Moved here from tests/test_gpu_smoke.py and tests/workers/test_flops_budget.py."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import sdpa_flop_count

from looplab.workers.device import peak_flops_of, unknown_peak
from looplab.workers.reporter import MemoryReporter
from looplab.workers.train import job as train
from looplab.workers.train.spec import Spec
from tests.model.test_flops import CPU_FLASH
from tests.workers.conftest import tiny_spec
from tests.workers.test_flops_budget import counted_training_step

ROOT = Path(__file__).resolve().parents[2]


def _run(args: list[str], timeout: int) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-3000:])
    return r


def _gpu_peak() -> float:
    """This GPU's peak bf16 FLOP/s from the device table; a GPU the table lacks fails the check (MFU
    cannot be measured there), saying how to add it."""
    import torch

    name = torch.cuda.get_device_name()
    peak = peak_flops_of(name)
    if peak is None:
        pytest.fail(unknown_peak(name))
    return peak


@pytest.mark.gpu
def test_mfu_on_gpu(looplab_cache, tmp_path):
    """MFU counts the useful FLOPs (each row's own rounds) and HFU the computed ones, per training second
    over the device's peak: both in (0, 1), MFU <= HFU (parcae pads its forwards)."""
    peak = _gpu_peak()
    rep = MemoryReporter()
    spec = Spec.from_dict(tiny_spec(recipe="parcae", device="cuda", tokens=8 * 32 * 4, micro_batch_size=4))
    summary = train.run(spec, rep, tmp_path / "run")
    row = next(e["row"] for e in rep.of("result") if e["table"] == "train_results")
    assert row["mfu"] == pytest.approx(summary["flops_useful"] / row["train_seconds"] / peak)
    assert summary["hfu"] == pytest.approx(summary["flops_computed"] / row["train_seconds"] / peak)
    assert 0 < row["mfu"] <= summary["hfu"] < 1


def _cuda_attention_backward(grad_shape, query_shape, key_shape, value_shape, *args, out_shape=None, **kw):
    return 2 * sdpa_flop_count(query_shape, key_shape, value_shape)


# The CUDA attention kernels' backward as the four matmuls the FLOP model counts (FlopCounterMode's own
# formula adds the recomputed scores, which the model, like activation recomputation, leaves out)
CUDA_ATTENTION = {
    **CPU_FLASH,
    **{
        getattr(torch.ops.aten, name): _cuda_attention_backward
        for name in (
            "_scaled_dot_product_flash_attention_backward",
            "_scaled_dot_product_efficient_attention_backward",
            "_scaled_dot_product_cudnn_attention_backward",
        )
        if hasattr(torch.ops.aten, name)  # a torch build without one of them never calls it
    },
}


@pytest.mark.gpu
@pytest.mark.parametrize("recipe", ["fixed4", "plain"])
def test_mfu_flops_agree_with_an_independent_count_on_gpu(recipe, looplab_cache, tmp_path):
    """FlopCounterMode on one bf16 training step on the GPU within 5 % of the trainer's count (what MFU
    divides by the seconds), as on the CPU (tests/workers/test_flops_budget.py); the GPU's peak known."""
    _gpu_peak()
    spec = Spec.from_dict(tiny_spec(recipe=recipe, device="cuda", micro_batch_size=4))
    counted, computed, useful = counted_training_step(spec, tmp_path / "run", CUDA_ATTENTION)
    assert computed == useful and counted == pytest.approx(computed, rel=0.05)


@pytest.mark.gpu
@pytest.mark.parametrize("recipe", ["lean", "parcae"])
def test_decode_bench_replays_cuda_graphs(recipe, tmp_path):
    """Tiny model, bf16, CUDA graphs; a context of 100 tokens wraps lean's 16- and 32-slot rings."""
    args = [
        "-m",
        "looplab.workers.evaluate.decode_bench",
        "--recipe",
        recipe,
        "--size",
        "tiny",
        "--device",
        "cuda",
    ]
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
