"""benchmarks/gpu_check.sh and benchmarks/gpu_steps.py, checked on any machine: the check fits its five
minutes, its training command is a valid spec, it collects exactly this folder, the GPU path imports
with the packages a GPU box lacks blocked, and (slow) the whole dry run passes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"
sys.path.insert(0, str(ROOT / "benchmarks"))
import gpu_steps  # noqa: E402 (benchmarks/ is a folder of scripts, not a package)


def _script_lines() -> list[str]:
    """The script's lines with backslash continuations joined."""
    return SCRIPT.read_text().replace("\\\n", " ").splitlines()


def _box_env() -> dict[str, str]:
    """The environment of a dry run: the packages a GPU box lacks cannot be imported."""
    path = f"{ROOT / 'benchmarks' / 'box_imports'}{os.pathsep}{ROOT}"
    return {**os.environ, "LOOPLAB_BOX_IMPORTS": "1", "PYTHONPATH": path}


def test_gpu_check_parses_and_fits_five_minutes():
    """bash -n accepts it; it runs gpu_steps.py's steps in their order; every step's limit and every
    kill grace sum to at most 5 minutes, so the whole check ends in time even when every step hits its
    limit (a 15-minute slot then keeps time for start-up, transfers and a second run)."""
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)
    lines = _script_lines()
    grace = next(int(line.split("=")[1].split()[0]) for line in lines if line.startswith("GRACE="))
    steps = {m[1]: int(m[2]) for line in lines if (m := re.match(r"step (\w+) (\d+)", line))}
    assert tuple(steps) == gpu_steps.STEPS
    assert sum(steps.values()) + grace * len(steps) <= 5 * 60


def test_gpu_check_training_command_is_a_valid_spec(tmp_path):
    """The compiled 86m run's flags make a valid train spec (a typo would only show on the GPU box),
    and so do the dry run's."""
    from workers import train
    from workers.train_cli import build_parser

    parser = build_parser()
    specs = {}
    for dry in (False, True):
        argv = gpu_steps.train_argv(dry, tmp_path / "out", tmp_path / "scratch")
        assert argv[:2] == ["-m", "workers.train"]
        specs[dry] = train.Spec.from_dict(parser.spec_dict(parser.parse_args(argv[2:])))
    gpu, cpu = specs[False], specs[True]
    assert gpu.compile and gpu.recipe == "lean" and gpu.size == "86m" and gpu.device == "cuda"
    assert gpu.tokens // (gpu.batch_size * 2048) == 60
    assert not cpu.compile and cpu.size == "tiny" and cpu.device == "cpu"


def test_gpu_steps_collect_exactly_this_folder():
    """gpu_tests runs every test file of tests/gpu, in GPU_TEST_FILES' order: a new file cannot be
    left out of the check."""
    here = sorted(p.name for p in Path(__file__).parent.glob("test_*.py"))
    assert sorted(gpu_steps.GPU_TEST_FILES) == here


def test_the_gpu_path_imports_without_what_a_box_lacks():
    """With ray, sqlalchemy, streamlit, datasets, scipy... blocked (as on the box), the jobs, the
    benchmarks and every GPU test module import, and none of those packages was even tried lazily; the
    same interpreter refuses `import ray` (installed in the development environment), so the block is
    real."""
    modules = [*gpu_steps.JOB_MODULES, "workers.trainer", "gpu_steps", "model_bench"]
    modules += [f"tests.gpu.{name.removesuffix('.py')}" for name in gpu_steps.GPU_TEST_FILES]
    code = f"""
import importlib, json, sys
sys.path.insert(0, {str(ROOT / "benchmarks")!r})
for name in {modules!r}:
    importlib.import_module(name)
from sitecustomize import BOX_LACKS
loaded = sorted(m for m in sys.modules if m.partition(".")[0] in BOX_LACKS)
try:
    import ray
    refused = False
except ModuleNotFoundError:
    refused = True
print(json.dumps({{"loaded": loaded, "refused": refused}}))
"""
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_box_env(), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.splitlines()[-1]) == {"loaded": [], "refused": True}


@pytest.mark.slow
def test_dry_run_passes(tmp_path):
    """`gpu_check.sh --dry-run` with this interpreter: every step's tiny CPU version starts and ends
    well, each leaves its figures, the GPU tests are collected (and skipped without CUDA), and the
    slots say why they skipped."""
    out, scratch = tmp_path / "out", tmp_path / "scratch"
    env = {**os.environ, "PYTHON": sys.executable, "OUT": str(out), "SCRATCH": str(scratch)}
    r = subprocess.run(["bash", str(SCRIPT), "--dry-run"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-2000:])
    summary = json.loads((out / "summary.json").read_text())
    assert summary.pop("dry_run") is True and list(summary) == list(gpu_steps.STEPS)
    assert all(s["rc"] == 0 for s in summary.values()), summary
    figures = {name: json.loads((out / f"{name}.json").read_text()) for name in gpu_steps.STEPS}
    assert all(f["dry_run"] and f["rc"] == 0 for f in figures.values())
    assert figures["device"]["jobs"] == dict.fromkeys(gpu_steps.JOB_MODULES, "ok")
    tests = figures["gpu_tests"]["tests"]
    gpu_files = {t["test"].split("::")[0] for t in tests if t["outcome"] == "skipped"}
    assert gpu_files == {"tests/gpu/test_model_cuda.py", "tests/gpu/test_jobs_cuda.py"}
    counts = figures["gpu_tests"]["counts"]
    assert counts.get("failed", 0) == 0 and counts["passed"] > 0
    assert figures["train_compiled"]["row"]["tokens_per_s"] > 0
    assert figures["ddp"]["world"] == 2 and figures["ddp"]["max_param_diff_between_ranks"] == 0.0


def test_the_slots_train_runner_trains_and_streams_its_events(tmp_path, looplab_cache):
    """What the micro_batch and loop_buckets slots run once their fields land, without those fields:
    a tiny lean run on CPU through workers.train.run, its figures returned and its events streamed."""
    import argparse

    a = argparse.Namespace(dry_run=True, out=str(tmp_path / "out"), scratch=str(tmp_path / "scratch"))
    (tmp_path / "out").mkdir()
    row = gpu_steps._train_in_process(a, "slot", "lean", "tiny", 8, 2, {"seed": 1})
    assert row["tokens_per_s"] > 0 and row["peak_mem_mb"] > 0 and row["final_train_loss"] > 0
    kinds = {e["kind"] for e in gpu_steps._events(tmp_path / "out" / "slot.jsonl")}
    assert {"metric", "result"} <= kinds
