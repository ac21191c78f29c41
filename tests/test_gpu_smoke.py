"""Smoke runs of the benchmarks in GPU mode, as a first GPU machine runs them (skipped without CUDA).

They run the command lines as subprocesses with small settings and check that each finishes and writes
sensible numbers; the numbers themselves are for the benchmark logs, not for assertions.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(args: list[str], timeout: int) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-3000:])
    return r


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
    _run(["benchmarks/model_bench.py", "--device", "cuda", "--section", "ratios", "--ratio-steps", "1",
          "--out", str(tmp_path)], timeout=600)  # fmt: skip
    section = json.loads((tmp_path / "model_bench_ratios.json").read_text())["ratios"]
    assert section["size"] == "144m" and all(r["tokens_per_s"] > 0 for r in section["recipes"].values())
    assert section["ratios"] and all(
        0 < v["measured"] < math.inf and 0 < v["predicted"] < math.inf for v in section["ratios"].values()
    )


# ---- benchmarks/gpu_check.sh (checked here, on any machine) ---------------------------------------

SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"


def _script_lines() -> list[str]:
    """The script's lines with backslash continuations joined."""
    return SCRIPT.read_text().replace("\\\n", " ").splitlines()


def test_gpu_check_parses_and_fits_eight_minutes():
    """bash -n accepts it, and the device check, every step's limit and every kill grace sum to at
    most 8 minutes, so the whole check ends in time even when every step hits its limit."""
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)
    lines = _script_lines()
    grace = next(int(line.split("=")[1].split()[0]) for line in lines if line.startswith("GRACE="))
    device = next(int(line.split()[1]) for line in lines if line.startswith("timeout "))
    steps = {line.split()[1]: int(line.split()[2]) for line in lines if line.startswith("step ")}
    assert set(steps) == {"gpu_tests", "train_compiled", "bench_ratios", "bench_table"}
    assert device + sum(steps.values()) + grace * len(steps) <= 8 * 60


def test_gpu_check_training_command_is_a_valid_spec():
    """The compiled 86m run's flags make a valid train spec (a typo would only show on the GPU box)."""
    import shlex

    from workers import train
    from workers.train_cli import build_parser

    line = next(line for line in _script_lines() if line.startswith("step train_compiled"))
    argv = shlex.split(line.replace("$((120 * 8 * 2048))", str(120 * 8 * 2048)))
    argv = argv[argv.index("workers.train") + 1 :]
    parser = build_parser()
    spec = train.Spec.from_dict(parser.spec_dict(parser.parse_args(argv)))
    assert spec.compile and spec.recipe == "lean" and spec.size == "86m" and spec.device == "cuda"
    assert spec.tokens // (spec.batch_size * 2048) == 120
