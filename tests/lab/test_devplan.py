"""Planning for a device this machine is not: a calibration file written on another box (a hand-written
"H200" of round numbers here) and a device of the table with a stated MFU give the times worked out by
hand from the FLOP model and the file's rates; bad files and flags are refused naming the key; and
`looplab calibrate` / `python -m looplab.workers.calibrate` run where only torch is installed."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from looplab import Grid, Queue
from looplab.lab.cli import main
from looplab.model.counts import kv_cache_bytes, layer_params, param_count
from looplab.model.flops import BACKWARD_FACTOR, head_flops, step_flops, training_flops
from looplab.model.memory import training_memory
from looplab.model.presets import preset
from looplab.workers.calibrate import Calibration, for_device, read_file
from looplab.workers.train.spec import Spec
from tests.cli import looplab_here

ROOT = Path(__file__).resolve().parents[2]
# lean small on the byte tokenizer: 10 steps of 8 x 256 tokens, one evaluation, one checkpoint
TRAIN = {
    "recipe": "lean",
    "size": "small",
    "batch_size": 8,
    "tokens": 8 * 256 * 10,
    "eval_every": 1000,
    "ckpt_every": 1000,
    "eval_tokens": 512,
    "eval_loops": [4],
    "optimizer": "adamw",
    "seed": 0,
    "data": {"corpus": "offline", "tokenizer": "byte"},
}
# 144m at a batch of 32 on the bpe tokenizer: more than a 24 GB GPU holds
BIG = {
    **TRAIN,
    "size": "144m",
    "batch_size": 32,
    "tokens": 32 * 2048,
    "micro_batch_size": None,
    "data": {"corpus": "offline", "tokenizer": "bpe", "vocab_size": 32768},
}
SWEEP = {"loops": [1, 2], "eval_tokens": 512, "interaction_loops": []}
BENCH = {"context_lens": [64, 1024], "batch_sizes": [1, 256], "warmup": 2, "steps": 8}
# the box the study runs on, as `looplab calibrate --out` would describe it (round numbers)
H200 = {
    "format": "looplab-calibration",
    "version": 3,
    "host": "gpu-box",
    "measured_at": 1.7e9,
    "torch": "2.11.0",
    "device": {"type": "cuda", "name": "NVIDIA H200", "memory_bytes": 140e9, "count": 8, "cpus": 64},
    "rates": {
        "train_flops_per_s": 4e14,
        "forward_flops_per_s": 5e14,
        "decode_layer_s": 1e-5,
        "memory_bandwidth": 4e12,
        "checkpoint_bytes_per_s": 2e9,
        "startup_s": 10.0,
        "optimizer_s_per_param": {"adamw": 1e-11},
    },
}


@pytest.fixture
def q(tmp_path, monkeypatch):
    monkeypatch.setenv("LOOPLAB_CACHE", str(tmp_path / "cache"))
    return Queue(db=tmp_path / "q.db", artifacts=tmp_path / "art")


def grid(**kw) -> Grid:
    return Grid(
        "study",
        base={**TRAIN, **kw},
        then=["depth_sweep", "decode_bench"],
        follow={"depth_sweep": SWEEP, "decode_bench": BENCH},
    )


def expected(
    train_rate: float,
    forward_rate: float,
    bandwidth: float,
    startup: float,
    save_rate: float,
    opt_per_param: float,
    layer_s: float,
) -> dict[str, float]:
    """Seconds of the grid's train job, depth sweep and decode bench, from the FLOP model and the rates."""
    cfg = Spec.from_dict(TRAIN).resolved_model_config()  # the byte tokenizer's vocabulary (256)
    flops = training_flops(cfg, 8)
    assert flops.backward * (1 + 1 / BACKWARD_FACTOR) == pytest.approx(
        flops.total
    )  # lean: every round learns
    p = param_count(cfg)["total"]
    steps, per_step = 10, 8 * 256
    train_s = steps * (per_step * flops.total / train_rate + opt_per_param * p)
    eval_s = 512 * step_flops(cfg, 4).forward / forward_rate  # one evaluation of 512 tokens at 4 loops
    ckpt_s = (4 * p + 8 * p) / save_rate  # one checkpoint: fp32 weights and AdamW's two moments
    head = head_flops(cfg)
    sweep_s = 512 * sum(2 * step_flops(cfg, n).forward - head for n in (1, 2)) / forward_rate

    bench_cfg = preset("lean", "small")  # random weights at the preset's vocabulary (512)
    layers = layer_params(bench_cfg)
    applied = (
        sum(layers[:2]) + 4 * sum(layers[2:4]) + sum(layers[4:])
    )  # 2 prelude, 2 shared x 4 loops, 2 coda
    applications = 2 + 2 * 4 + 2
    decode_s, bounds = 0.0, set()
    for context in (64, 1024):
        for batch in (1, 256):
            step_f = batch * step_flops(bench_cfg, 4, seq_len=context).forward
            read = (
                2 * (applied + bench_cfg.vocab_size * bench_cfg.d_model)  # bf16 weights, the head's table
                + kv_cache_bytes(bench_cfg, context, batch, "bfloat16")
                + 4 * batch * bench_cfg.vocab_size
            )
            bounds.add("flops" if step_f / train_rate > read / bandwidth else "bytes")
            decode_s += 10 * (max(step_f / train_rate, read / bandwidth) + applications * layer_s)
    return {
        "train": startup + train_s + eval_s + ckpt_s,
        "train_s": train_s,
        # the sweep waits for its train job, the exclusive decode bench for an empty node: both start in
        # a worker process other jobs left idle, without a start-up (lab/planner/estimates.py forward_job)
        "depth_sweep": sweep_s,
        "decode_bench": decode_s,
        "params": p,
        "bounds": bounds,
        "memory": training_memory(cfg, 8, "cuda", "adamw"),
    }


def plan_csv(capsys, q: Queue, path: Path, *flags: str) -> pd.DataFrame:
    ran = looplab_here(capsys, "--db", q.url, "plan", path, "--csv", *flags)
    assert ran.returncode == 0, ran.stderr
    return pd.read_csv(io.StringIO(ran.stdout)).set_index("kind")


def test_a_calibration_file_of_another_device_prices_the_grid_by_its_rates(q, tmp_path, capsys):
    cal_file = tmp_path / "h200.json"
    cal_file.write_text(json.dumps(H200))
    grid_file = tmp_path / "grids.py"
    grid_file.write_text(
        f"from looplab import Grid\nGRIDS = [Grid('study', base={TRAIN!r}, then=['depth_sweep', "
        f"'decode_bench'], follow={{'depth_sweep': {SWEEP!r}, 'decode_bench': {BENCH!r}}})]\n"
    )
    q.submit(grid())  # in this database already: a plan for the other box prices the grids alone
    want = expected(4e14, 5e14, 4e12, 10.0, 2e9, 1e-11, 1e-5)
    assert want["bounds"] == {"bytes"}  # at 100 FLOPs per byte every decode step waits on memory

    df = plan_csv(capsys, q, grid_file, "--calibration", str(cal_file))
    assert set(df["status"]) == {"new"} and set(df["source"]) == {"flop_model"}
    for kind in ("train", "depth_sweep", "decode_bench"):
        assert df.loc[kind, "seconds"] == pytest.approx(want[kind], rel=1e-6), kind
    train = df.loc["train"]
    assert train["peak_mem_mb"] * 2**20 == pytest.approx(want["memory"]) and bool(train["fits"])
    assert train["micro_batch"] == 8  # the whole batch fits in one forward on 140 GB
    p = want["params"]
    # peak: its one checkpoint (12 P: 10 steps save once, at the end) beside final.pt (4 P), plus the
    # spool's 34 points (10 logged steps x 3 metrics, one evaluation x 4) of 140 bytes; kept: final.pt
    assert train["disk_peak_bytes"] == pytest.approx(12 * p + 4 * p + 34 * 140)
    assert train["disk_kept_bytes"] == pytest.approx(4 * p)

    report = q.plan(grid(), calibration=read_file(cal_file), elsewhere=True)
    assert report.gpus == 8 and report.cpus == 64  # the file's machine
    hours = report.gpu_hours()
    for kind in ("train", "depth_sweep", "decode_bench"):
        assert hours[kind] == pytest.approx(want[kind] / 3600, rel=1e-6)
    # the train job, then its sweep in the worker the train job left idle, then the decode bench alone
    # (exclusive), warm too: neither estimate charges a start-up
    t, s, d = want["train"], want["depth_sweep"], want["decode_bench"]
    assert report.makespan_s == pytest.approx(t + s + d, rel=1e-6)
    text = report.text()
    assert "priced for 8 x NVIDIA H200 measured on gpu-box" in text and "GPU-hours: " in text
    # per kind by the name its declaration gives it (Kind.title)
    per_kind = f"training {hours['train']:,.1f}, depth sweep {hours['depth_sweep']:,.1f}, decode benchmark"
    assert per_kind in text.split("GPU-hours: ")[1].splitlines()[0]
    assert "?" not in text.split("\n", 2)[2].split("GPU-hours")[0]  # every job has a time


def test_a_device_of_the_table_at_a_stated_mfu(q, tmp_path, capsys):
    """--device h200 --mfu 0.02: training and forwards at 989.5 TFLOP/s x 0.02, decode steps bounded by
    the larger of their FLOPs at that rate and their bytes at 4.8 TB/s; no optimizer or per-layer time."""
    grid_file = tmp_path / "grids.py"
    grid_file.write_text(
        f"from looplab import Grid\nGRIDS = [Grid('study', base={TRAIN!r}, then=['depth_sweep', "
        f"'decode_bench'], follow={{'depth_sweep': {SWEEP!r}, 'decode_bench': {BENCH!r}}})]\n"
    )
    rate = 989.5e12 * 0.02
    want = expected(rate, rate, 4.8e12, 5.0, 1e9, 0.0, 0.0)
    assert want["bounds"] == {"flops", "bytes"}  # at ~4 FLOPs per byte the wide batch is compute-bound
    df = plan_csv(capsys, q, grid_file, "--device", "h200", "--mfu", "0.02", "--num-gpus", "2")
    for kind in ("train", "depth_sweep", "decode_bench"):
        assert df.loc[kind, "seconds"] == pytest.approx(want[kind], rel=1e-6), kind
    assert bool(df.loc["train", "fits"])

    # two seeds on 2 GPUs run side by side; on one GPU the second starts warm after the first
    seeds = Grid("seeds", base={k: v for k, v in TRAIN.items() if k != "seed"}, sweep={"seed": [0, 1]})
    two = q.plan(seeds, calibration=for_device("h200", 0.02, 2), elsewhere=True)
    one = q.plan(seeds, calibration=for_device("h200", 0.02, 1), num_gpus=1, elsewhere=True)
    assert two.makespan_s == pytest.approx(want["train"], rel=1e-6)
    assert one.makespan_s == pytest.approx(2 * want["train"] - 5.0, rel=1e-6)
    assert "by the device table: 989.5 TFLOP/s peak x MFU 0.02" in two.text()


def test_a_micro_batch_is_used_as_given_or_the_one_that_fits_is_reported(q):
    """On a 24 GB device the whole batch of 32 x 2,048 tokens of a 144m model does not fit: the plan
    flags it and names the most sequences per forward that fit; given a micro_batch_size (newer train
    Specs), the memory is that forward's."""
    spec = BIG
    (job,) = q.plan(Grid("big", base=spec), calibration=for_device("rtx4090"), elsewhere=True).new_jobs()
    cfg = Spec.from_dict(spec).resolved_model_config()
    fit = max(m for m in range(1, 33) if training_memory(cfg, m, "cuda", "adamw") <= 0.9 * 24e9)
    assert 1 <= fit < 32 and job.fits is False
    assert (job.estimate.micro_batch, job.estimate.micro_batch_given) == (fit, False)
    assert job.estimate.peak_mem_bytes == pytest.approx(training_memory(cfg, 32, "cuda", "adamw"))
    assert (
        f"micro_batch_size {fit} would fit"
        in q.plan(Grid("big", base=spec), calibration=for_device("rtx4090"), elsewhere=True).text()
    )
    if "micro_batch_size" in Spec.__dataclass_fields__:  # a Spec that splits its batch
        given = q.plan(
            Grid("mb", base={**spec, "micro_batch_size": 2}),
            calibration=for_device("rtx4090"),
            elsewhere=True,
        ).new_jobs()[0]
        assert (given.estimate.micro_batch, given.estimate.micro_batch_given) == (2, True)
        assert given.estimate.peak_mem_bytes == pytest.approx(training_memory(cfg, 2, "cuda", "adamw"))
        # auto (the default at 144m): what the trainer will pick on that device, so the job fits
        auto = {k: v for k, v in spec.items() if k != "micro_batch_size"}
        (picked,) = q.plan(
            Grid("auto", base=auto), calibration=for_device("rtx4090"), elsewhere=True
        ).new_jobs()
        assert (picked.estimate.micro_batch, picked.estimate.micro_batch_given, picked.fits) == (
            fit,
            True,
            True,
        )


@pytest.mark.parametrize(
    "change,message",
    [
        ({"version": 7}, "version: unknown 7; accepted: 3"),
        ({"format": "other"}, "format: expected 'looplab-calibration'"),
        ({"rates": {**H200["rates"], "train_flops_per_s": None}}, "rates.train_flops_per_s: missing"),
        ({"rates": {k: v for k, v in H200["rates"].items() if k != "startup_s"}}, "rates.startup_s: missing"),
        ({"rates": {**H200["rates"], "flops": 1}}, "rates: unknown key 'flops'"),
        ({"device": {**H200["device"], "count": 0}}, "device.count: must be >= 1"),
        ({"device": {**H200["device"], "type": "tpu"}}, "device.type: unknown 'tpu'; accepted: cpu, cuda"),
        (
            {"rates": {**H200["rates"], "width_rates": [[512, 1e14]]}},
            "rates.width_rates[0]: expected [d_model",
        ),
        ({"gpu": 1}, "unknown key 'gpu'"),
    ],
)
def test_a_malformed_calibration_file_is_refused_naming_the_key(q, tmp_path, capsys, change, message):
    cal_file, grid_file = tmp_path / "c.json", tmp_path / "g.py"
    cal_file.write_text(json.dumps({**H200, **change}))
    grid_file.write_text(f"from looplab import Grid\nG = Grid('g', base={TRAIN!r})\n")
    assert main(["--db", q.url, "plan", str(grid_file), "--calibration", str(cal_file)]) == 2
    err = capsys.readouterr().err
    assert message in err and str(cal_file) in err


@pytest.mark.parametrize(
    "flags,message",
    [
        (
            ["--device", "tpu"],
            "--device: unknown device 'tpu'; accepted: h100_nvl, h100_pcie, h100, h200, a100_40gb, a100",
        ),
        (["--device", "h200", "--mfu", "1.5"], "--mfu: must be <= 1"),
        (["--device", "h200", "--mfu", "0"], "--mfu: must be > 0"),
        (["--mfu", "0.4"], "--mfu: only with --device"),
        (["--device", "h200", "--num-gpus", "0"], "--num-gpus: must be >= 1"),
        (["--calibration", "/no/such.json"], "--calibration: cannot read '/no/such.json'"),
    ],
)
def test_bad_plan_flags_are_refused_naming_the_flag(q, tmp_path, capsys, flags, message):
    grid_file = tmp_path / "g.py"
    grid_file.write_text(f"from looplab import Grid\nG = Grid('g', base={TRAIN!r})\n")
    assert main(["--db", q.url, "plan", str(grid_file), *flags]) == 2
    assert message in capsys.readouterr().err


def test_not_json_and_one_source_of_rates_at_a_time(q, tmp_path, capsys):
    bad = tmp_path / "c.json"
    bad.write_text("{not json")
    grid_file = tmp_path / "g.py"
    grid_file.write_text(f"from looplab import Grid\nG = Grid('g', base={TRAIN!r})\n")
    assert main(["--db", q.url, "plan", str(grid_file), "--calibration", str(bad)]) == 2
    assert "is not JSON" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # argparse: not allowed with each other
        main(["--db", q.url, "plan", str(grid_file), "--calibration", str(bad), "--device", "h200"])
    assert "not allowed with argument" in capsys.readouterr().err


def test_a_calibration_survives_its_file():
    cal = Calibration(
        device="cuda",
        flops_per_s=4e14,
        decode_layer_s=1e-5,
        save_bytes_per_s=2e9,
        startup_s=9.0,
        host="box",
        measured_at=1.7e9,
        forward_flops_per_s=5e14,
        opt_s_per_param={"adamw": 1e-11},
        width_rates=[[512, 3e14, 4e14], [1024, 4e14, 5e14]],
        device_name="NVIDIA H200",
        device_memory_bytes=150e9,
        device_count=8,
        cpus=96,
        memory_bandwidth=4.5e12,
        torch_version="2.11.0",
    )
    assert Calibration.from_file(json.loads(json.dumps(cal.to_file()))) == cal
    assert Calibration.from_file(H200).rates(768) == (4e14, 5e14)


# An import hook that makes the database and cluster stack look uninstalled, as on a bare GPU box.
BLOCKER = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("sqlalchemy", "ray", "streamlit", "alembic", "psycopg", "psycopg2"):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked: a box with only torch)")
sys.meta_path.insert(0, Block())
"""


def _blocked(code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {
        "PYTHONPATH": str(ROOT),
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "LOOPLAB_CACHE": str(tmp_path / "cache"),
    }
    return subprocess.run(
        [sys.executable, "-c", BLOCKER + code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=600,
    )


@pytest.mark.slow
def test_calibrate_runs_with_only_torch(tmp_path):
    """`python -m looplab.workers.calibrate --out FILE` measures and writes a file `--calibration` reads; the
    `looplab calibrate` subcommand reaches the same code without sqlalchemy or ray."""
    out = tmp_path / "cpu.json"
    argv = ["calibrate", "--out", str(out), "--device", "cpu", "--steps", "2"]
    done = _blocked(
        f"import runpy; sys.argv = {argv!r}\nrunpy.run_module('looplab.workers.calibrate', run_name='__main__')\n",
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert f"wrote {out}" in done.stdout
    cal = read_file(out)
    import torch

    assert cal.device == "cpu" and cal.torch_version == torch.__version__ and cal.device_count == 1
    assert [int(w) for w, *_ in cal.width_rates] == [64, 128]  # lean tiny and small
    assert all(train > 0 and forward > 0 for _, train, forward in cal.width_rates)
    assert cal.memory_bandwidth > 0 and cal.save_bytes_per_s > 0 and cal.startup_s > 0
    assert set(cal.opt_s_per_param) == {"parcae", "torch_muon", "adamw"}

    via_cli = _blocked(
        "from looplab.lab.cli import main\n"
        "try:\n    main(['calibrate', '--help'])\nexcept SystemExit as e:\n    assert e.code == 0\n"
        "import importlib\nfrom lab.cli import HANDLERS\nmodule, name = HANDLERS['calibrate']\n"
        "getattr(importlib.import_module(module), name)\n"
        "assert not any(m in sys.modules for m in ('sqlalchemy', 'ray'))\nprint('ok')\n",
        tmp_path,
    )
    assert via_cli.returncode == 0 and via_cli.stdout.strip().endswith("ok"), via_cli.stderr
    assert "--out FILE" in via_cli.stdout
    blocked = _blocked("import sqlalchemy\n", tmp_path)
    assert blocked.returncode != 0 and "blocked" in blocked.stderr  # the hook does block


def test_the_start_up_probe_builds_the_model_through_the_contract():
    """calibration times a job's start-up in a fresh Python (`_JOB_START`); a probe that fails falls back
    to a default (with only a warning), so it must run: it builds the built-in model as a job does, by
    the contract, naming no family module."""
    from looplab.workers import calibrate

    assert "build_model" in calibrate._JOB_START and "families" not in calibrate._JOB_START
    assert calibrate.subprocess_seconds(calibrate._JOB_START) > 0
    with pytest.warns(UserWarning, match="start-up probe failed .*no_such_module"):  # a failing one is seen
        assert calibrate.subprocess_seconds("import looplab.no_such_module") is None


def test_plan_fits_120_columns_with_every_column_behind_wide(q, tmp_path, capsys):
    """`looplab plan` fits 120 columns: long notes (a model that will not fit, what would) go on the line
    below their row, long lines wrap; `--wide` is every column, one line per job; `--csv` every field."""
    spec = BIG
    sweep = {"model.loops": [4, 8], "lr": [1e-3, 3e-3]}
    report = q.plan(Grid("big", base=spec, sweep=sweep), calibration=for_device("rtx4090"), elsewhere=True)
    narrow, wide = report.text(), report.text(wide=True)
    assert max(len(line) for line in narrow.splitlines()) <= 120
    assert max(len(line) for line in wide.splitlines()) > 120  # the wide form really is wider
    assert "WILL NOT FIT" in narrow and "would fit" in narrow
    assert " kept " in _header(wide) and " kept " not in _header(narrow)
    f = tmp_path / "g.py"
    f.write_text(f"from looplab import Grid\ng = Grid('big', base={spec!r}, sweep={sweep!r})\n")
    for flag, check in (
        ([], lambda out: max(map(len, out.splitlines())) <= 120),
        (["--wide"], lambda out: " kept " in _header(out) and max(map(len, out.splitlines())) > 120),
        (["--csv"], lambda out: out.startswith("job,job_id,kind,what")),
    ):
        assert main(["--db", q.url, "plan", str(f), "--device", "rtx4090", *flag]) == 0
        assert check(capsys.readouterr().out), flag


def _header(text: str) -> str:
    """The plan table's header line."""
    return next(line for line in text.splitlines() if line.lstrip().startswith("job kind"))
