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
    from looplab.workers.train import job as train
    from looplab.workers.train.cli import build_parser

    parser = build_parser()
    specs = {}
    for dry in (False, True):
        argv = gpu_steps.train_argv(dry, tmp_path / "out", tmp_path / "scratch")
        assert argv[:2] == ["-m", "looplab.workers.train.job"]
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
    modules = [*gpu_steps.JOB_MODULES, "looplab.workers.train.trainer", "gpu_steps", "model_bench"]
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
    """`gpu_check.sh --dry-run` with this interpreter: every step's tiny CPU version runs and passes its
    checks (wheels may skip: no wheelhouse here), each leaves its figures, the GPU tests are collected
    (and skipped without CUDA), and the slots report real figures: peaks of the whole and the
    micro-batched run, the measured padding with bucketing off and on, the exit rules' decode times."""
    out, scratch = tmp_path / "out", tmp_path / "scratch"
    env = {**os.environ, "PYTHON": sys.executable, "OUT": str(out), "SCRATCH": str(scratch)}
    r = subprocess.run(["bash", str(SCRIPT), "--dry-run"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-2000:])
    summary = json.loads((out / "summary.json").read_text())
    assert summary.pop("dry_run") is True
    counts = summary.pop("counts")
    assert list(summary) == list(gpu_steps.STEPS)
    outcomes = {name: s["outcome"] for name, s in summary.items()}
    wheels_skip = not list((ROOT / "benchmarks" / "wheelhouse").glob("*.whl"))
    assert outcomes == {name: "skipped" if name == "wheels" and wheels_skip else "passed" for name in summary}
    assert counts == {"passed": len(summary) - wheels_skip, "skipped": int(wheels_skip), "failed": 0}
    assert f"gpu_check: {counts['passed']} passed, {counts['skipped']} skipped, 0 failed" in r.stdout
    figures = {name: json.loads((out / f"{name}.json").read_text()) for name in gpu_steps.STEPS}
    assert all(f["dry_run"] and f["outcome"] == outcomes[name] for name, f in figures.items())
    assert figures["device"]["jobs"] == dict.fromkeys(gpu_steps.JOB_MODULES, "ok")
    tests = figures["gpu_tests"]["tests"]
    gpu_files = {t["test"].split("::")[0] for t in tests if t["outcome"] == "skipped"}
    assert gpu_files == {"tests/gpu/test_model_cuda.py", "tests/gpu/test_jobs_cuda.py"}
    assert (
        figures["gpu_tests"]["counts"].get("failed", 0) == 0 and figures["gpu_tests"]["counts"]["passed"] > 0
    )
    assert figures["train_compiled"]["row"]["tokens_per_s"] > 0
    runs = figures["micro_batch"]["runs"]
    assert runs["tiny micro 2"]["peak_mem_mb"] < runs["tiny micro 8"]["peak_mem_mb"]
    runs = figures["loop_buckets"]["runs"]
    assert 0 < runs["tiny bucketing True"]["padding_waste"] < runs["tiny bucketing False"]["padding_waste"]
    assert figures["exit_rules"]["decodes"] and all(
        d["ms_per_token"] > 0 for d in figures["exit_rules"]["decodes"]
    )
    assert figures["ddp"]["world"] == 2 and figures["ddp"]["max_param_diff_between_ranks"] == 0.0


FAKE_STEPS = """#!/usr/bin/env bash
# stands in for python: `benchmarks/gpu_steps.py NAME ...` ends as the table below says
case $2 in
wheels) echo 'skipped: no wheels in here'; exit 4 ;;
micro_batch) echo 'failed: runs/86m micro 4/peak_mem_mb: missing'; exit 1 ;;
ddp) echo 'skipped: 1 GPU(s) here: the "DDP" step needs 2 or more'; exit 4 ;;
*) echo passed ;;
esac
"""


def test_summary_counts_passed_skipped_failed_and_prints_the_reasons(tmp_path):
    """The script's own bookkeeping, with a stand-in for gpu_steps.py: every step's outcome from its
    exit status, the counts of the three, each skip's and failure's last line (quotes escaped into
    valid JSON), and exit status 1 because one step failed; the skips alone would not fail it."""
    fake = tmp_path / "python"
    fake.write_text(FAKE_STEPS)
    fake.chmod(0o755)
    env = {**os.environ, "PYTHON": str(fake), "OUT": str(tmp_path / "out"), "SCRATCH": str(tmp_path / "s")}
    r = subprocess.run(["bash", str(SCRIPT)], cwd=ROOT, env=env, capture_output=True, text=True)
    assert r.returncode == 1, r.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["counts"] == {"passed": 7, "skipped": 2, "failed": 1}
    assert summary["ddp"] == {
        "outcome": "skipped",
        "rc": 4,
        "limit": 20,
        "seconds": summary["ddp"]["seconds"],
        "says": 'skipped: 1 GPU(s) here: the "DDP" step needs 2 or more',
    }
    assert summary["micro_batch"]["outcome"] == "failed" and summary["device"]["outcome"] == "passed"
    assert "gpu_check: 7 passed, 2 skipped, 1 failed" in r.stdout
    assert "skipped wheels: skipped: no wheels in here" in r.stdout
    assert "failed micro_batch: failed: runs/86m micro 4/peak_mem_mb: missing" in r.stderr


def _args(tmp_path, dry_run: bool = True):
    import argparse

    (tmp_path / "out").mkdir(exist_ok=True)
    return argparse.Namespace(dry_run=dry_run, out=str(tmp_path / "out"), scratch=str(tmp_path / "scratch"))


def test_a_renamed_spec_field_fails_the_slot_in_the_dry_run(tmp_path, monkeypatch):
    """A slot names the Spec field it sets: under a name the Spec does not have, the dry run's measured
    run is refused, and the slot fails (exit 1, outcome failed) naming the field; it does not skip."""
    monkeypatch.setattr(gpu_steps, "MICRO_BATCH_FIELD", "micro_batch_rows")
    argv = ["micro_batch", "--dry-run", "--out", str(tmp_path / "out"), "--scratch", str(tmp_path / "s")]
    assert gpu_steps.main(argv) == gpu_steps.EXIT["failed"] == 1
    record = json.loads((tmp_path / "out" / "micro_batch.json").read_text())
    assert record["outcome"] == "failed" and "micro_batch_rows" in " ".join(record["problems"])


def test_a_missing_checkpoint_fails_the_exit_rules_slot(tmp_path):
    argv = ["exit_rules", "--dry-run", "--out", str(tmp_path / "out"), "--scratch", str(tmp_path / "s")]
    assert gpu_steps.main(argv) == 1
    record = json.loads((tmp_path / "out" / "exit_rules.json").read_text())
    assert record["outcome"] == "failed" and "no checkpoint in" in record["problems"][0]


def test_ddp_on_one_gpu_is_a_skip_not_a_pass(tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    a = _args(tmp_path, dry_run=False)
    a.step = "ddp"
    outcome, problems, figures = gpu_steps.run_step(a)
    assert (outcome, problems) == ("skipped", []) and "1 GPU(s) here" in figures["skipped"]


def test_figures_missing_or_out_of_range_fail(tmp_path, monkeypatch):
    """The checks of the slots' figures: a missing (renamed) figure, a micro-batched peak above the
    whole batch's, bucketing that pads no less, MFU outside (0, 1) or unknown on a GPU (the message
    names the GPU and where to add its peak), a decode faster than the memory bandwidth allows."""
    dry, gpu = _args(tmp_path), _args(tmp_path, dry_run=False)
    run = {"tokens_per_s": 1.0, "steady_tokens_per_s": 1.2, "peak_mem_mb": 100.0, "padding_waste": 0.2}
    run |= {"mfu": None, "hfu": None}
    assert (
        gpu_steps.check_micro_batch(
            dry, {"batch_size": 8, "runs": {"tiny micro 8": run, "tiny micro 2": run}}
        )
        == []
    )
    high = {**run, "peak_mem_mb": 101.0}
    problems = gpu_steps.check_micro_batch(
        dry, {"batch_size": 8, "runs": {"tiny micro 8": run, "tiny micro 2": high}}
    )
    assert problems == ["runs/tiny micro 2/peak_mem_mb: 101 MB is above the whole batch's 100 MB"]
    renamed = {k: v for k, v in run.items() if k != "padding_waste"} | {"pad_waste": 0.1}
    buckets = {"tiny bucketing False": run, "tiny bucketing True": renamed}
    assert gpu_steps.check_loop_buckets(dry, {"runs": buckets}) == [
        "runs/tiny bucketing True/padding_waste: missing"
    ]
    buckets["tiny bucketing True"] = run
    assert "is not below 0.200 without bucketing" in gpu_steps.check_loop_buckets(dry, {"runs": buckets})[0]
    monkeypatch.setattr(gpu_steps, "_gpu_name", lambda: "NVIDIA B300 SXM6")
    row = {"tokens_per_s": 1.0, "peak_mem_mb": 1.0, "padding_waste": 0.0, "mfu": None}
    train = {"exit_status": 0, "row": row, "compile_seconds": 3.0}
    [unknown] = gpu_steps.check_train_compiled(gpu, train)
    assert "'NVIDIA B300 SXM6' has no peak FLOP/s" in unknown and "workers/device.py" in unknown
    row["mfu"] = 1.2
    assert gpu_steps.check_train_compiled(gpu, train) == ["row/mfu: 1.2 is outside (0, 1)"]
    floor = gpu_steps._decode_floor_ms("lean", "86m", dry_run=False)  # an unknown GPU: 10 TB/s
    assert floor > 0
    slow = {"size": "86m", "evals": [{"val_loss": 3.0}], "decodes": [{"ms_per_token": 2 * floor}]}
    assert gpu_steps.check_exit_rules(gpu, slow) == []
    fast = {**slow, "decodes": [{"ms_per_token": floor / 2}]}
    assert "below the" in gpu_steps.check_exit_rules(gpu, fast)[0]


@pytest.mark.slow  # docs/testing.md: two training runs, each a process of its own
def test_each_measured_run_starts_fresh(tmp_path, looplab_cache):
    """On the CPU each measured run is a process of its own, so its peak resident set is its own: a
    small run measured after a large one reports less than it (in one process the second peak could
    only be at least the first's), and its figures come back with its events streamed."""
    a = _args(tmp_path)
    # a parent larger than either run, as a test worker or a driver may be: a child's ru_maxrss starts
    # at its parent's resident set, so a figure read from it would be the parent's size for both runs
    ballast = bytearray(1024 * 2**20)
    ballast[:: 2**12] = b"\x01" * len(ballast[:: 2**12])
    large = gpu_steps.measured_train(a, "large", "lean", "tiny", 64, 1, {"micro_batch_size": 64})
    small = gpu_steps.measured_train(a, "small", "lean", "tiny", 8, 1, {"micro_batch_size": 2})
    assert 0 < small["peak_mem_mb"] < large["peak_mem_mb"] - 100 < len(ballast) / 2**20
    assert (
        small["tokens_per_s"] > 0
        and small["final_train_loss"] > 0
        and set(small) == {*gpu_steps.RUN_FIGURES, "warmup_steps", "steady_tokens_per_s"}
    )
    kinds = {e["kind"] for e in gpu_steps._events(tmp_path / "out" / "small.jsonl")}
    assert {"metric", "result"} <= kinds


def _no_torch_checkout(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """The script alone in a folder that is no git checkout and has no .venv, and a PATH whose python3
    cannot import torch (as on a machine with only the system python)."""
    repo, bin_dir = tmp_path / "repo", tmp_path / "bin"
    (repo / "benchmarks").mkdir(parents=True)
    (repo / "benchmarks" / "gpu_check.sh").write_text(SCRIPT.read_text())
    bin_dir.mkdir()
    python3 = bin_dir / "python3"
    python3.write_text("#!/usr/bin/env bash\necho 'ModuleNotFoundError: torch' >&2\nexit 1\n")
    python3.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "VIRTUAL_ENV")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    return repo, env


def test_dry_run_finds_an_environment_with_torch_when_python3_lacks_it(tmp_path):
    """python3 without torch: the dry run takes the project's environment ($VIRTUAL_ENV's here: no .venv,
    no git checkout) and says so; with none to find it names the interpreter and what to pass, exit 2."""
    repo, env = _no_torch_checkout(tmp_path)
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"  # this interpreter, which has torch (a symlink would leave its venv)
    python.write_text(f'#!/usr/bin/env bash\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    script = ["bash", str(repo / "benchmarks" / "gpu_check.sh"), "--dry-run", "--which-python"]
    found = subprocess.run(
        script, cwd=tmp_path, env={**env, "VIRTUAL_ENV": str(venv)}, capture_output=True, text=True
    )
    assert found.returncode == 0, found.stderr
    assert found.stdout.splitlines() == [
        f"gpu_check: python3 has no torch; using the project's environment, {venv}/bin/python",
        f"{venv}/bin/python",
    ]
    lost = subprocess.run(script, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert lost.returncode == 2 and lost.stdout == ""
    assert "python3" in lost.stderr and "cannot import torch" in lost.stderr
    assert "PYTHON=/path/to/venv/bin/python bash" in lost.stderr and "--venv" in lost.stderr


def test_mfu_counts_useful_causal_flops_and_hfu_the_hardware_s():
    """model_bench's counts of a step: MFU's useful FLOPs leave parcae's padded rounds out, HFU's total
    keeps them, both with causal attention pairs (about half the dense count's at seq 2,048); a fixed
    loop count pads nothing."""
    import model_bench

    from looplab.model.presets import preset

    cfg = preset("parcae", "tiny", seq_len=2048, vocab_size=256)
    mixed = model_bench.counted_flops(cfg, [2, 9], 2048)
    assert mixed["useful"] < mixed["total"] < mixed["dense"]
    fixed = model_bench.counted_flops(preset("fixed4", "tiny", seq_len=2048, vocab_size=256), [4, 4], 2048)
    assert fixed["useful"] == fixed["total"] < fixed["dense"]


def test_bench_ratios_checks_useful_below_hardware_and_mfu_below_hfu_below_one(tmp_path, monkeypatch):
    """The bench_ratios slot's checks on measured figures: useful TFLOP/s above the hardware's fails in the
    dry run too; on a GPU MFU above HFU fails, and so does an HFU of 1 or more."""
    dry, gpu = _args(tmp_path), _args(tmp_path, dry_run=False)
    row = {"tokens_per_s": 10.0, "achieved_tflops": 0.8, "hardware_tflops": 1.0, "mfu": None, "hfu": None}

    def figures(**changed):
        return {"exit_status": 0, "ratios": {"recipes": {"parcae": {**row, **changed}}}}

    assert gpu_steps.check_bench_ratios(dry, figures()) == []
    assert gpu_steps.check_bench_ratios(dry, figures(achieved_tflops=1.2)) == [
        "ratios/recipes/parcae/achieved_tflops: 1.2 is above hardware_tflops 1"
    ]
    monkeypatch.setattr(gpu_steps, "_gpu_name", lambda: "NVIDIA H100 NVL")
    assert gpu_steps.check_bench_ratios(gpu, figures(mfu=0.3, hfu=0.4)) == []
    assert gpu_steps.check_bench_ratios(gpu, figures(mfu=0.5, hfu=0.4)) == [
        "ratios/recipes/parcae/mfu: 0.500 is above hfu 0.400"
    ]
    assert gpu_steps.check_bench_ratios(gpu, figures(mfu=0.5, hfu=1.1)) == [
        "ratios/recipes/parcae/hfu: 1.1 is outside (0, 1)"
    ]


def test_steady_state_timing_leaves_the_warm_up_step_out():
    """Tokens per second from the end of the warm-up step to the last step: a slow first step (20 s of
    allocations and autotuning) does not count; the run's figure over every step would be 4x lower."""
    points = [(0, 100, 20.0), (1, 200, 21.0), (2, 300, 22.0), (3, 400, 23.0)]
    events = [
        {"kind": "metric", "key": "tokens_per_s", "step": s, "tokens": t, "wall_s": w, "value": t / w}
        for s, t, w in points
    ]
    events.append({"kind": "metric", "key": "train_loss", "step": 3, "tokens": 400, "wall_s": 99.0})
    assert gpu_steps.WARMUP_STEPS == 1
    assert gpu_steps.steady_tokens_per_s(events) == pytest.approx(100.0)
    assert gpu_steps.steady_tokens_per_s(events, warmup=3) == pytest.approx(100.0)
    assert gpu_steps.steady_tokens_per_s(events[:1]) is None  # nothing past the warm-up: no figure
    missing = {
        "batch_size": 8,
        "runs": {n: {"tokens_per_s": 1.0, "peak_mem_mb": 1.0} for n in ("tiny micro 8", "tiny micro 2")},
    }
    import argparse

    dry = argparse.Namespace(dry_run=True)
    assert "runs/tiny micro 8/steady_tokens_per_s: missing" in gpu_steps.check_micro_batch(dry, missing)


def test_a_gpu_run_after_one_that_left_memory_allocated_fails_the_micro_batch_slot(tmp_path):
    """On a GPU the measured runs share the step's process: each records what was still allocated before
    it (`allocated_before_mb`); more than LEFT_SHARE of its peak fails the slot (its peak would count an
    earlier run's tensors); a missing figure fails it too."""
    gpu = _args(tmp_path, dry_run=False)
    run = {"tokens_per_s": 1.0, "steady_tokens_per_s": 1.0, "peak_mem_mb": 1000.0, "allocated_before_mb": 0.0}
    names = ("86m micro 16", "86m micro 4", "144m micro 16", "144m micro 4")
    clean = {"batch_size": 16, "runs": dict.fromkeys(names, run)}
    assert gpu_steps.check_micro_batch(gpu, clean) == []
    dirty = {**clean, "runs": {**clean["runs"], "144m micro 4": {**run, "allocated_before_mb": 300.0}}}
    assert gpu_steps.check_micro_batch(gpu, dirty) == [
        "runs/144m micro 4/allocated_before_mb: 300 MB left allocated by earlier runs, more than 2% of its "
        "1,000 MB peak"
    ]
    missing = {k: v for k, v in run.items() if k != "allocated_before_mb"}
    lost = {**clean, "runs": {**clean["runs"], "86m micro 4": missing}}
    assert gpu_steps.check_micro_batch(gpu, lost) == ["runs/86m micro 4/allocated_before_mb: missing"]
