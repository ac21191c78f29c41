"""Installed as a user installs it: the built wheel in a fresh virtual environment puts one import
name on the path, `looplab`, so a researcher's own `model.py`, `analysis/` and `dashboard.py` beside
their grid file are theirs: as plain imports, as a family (`"family": "model:factory"`) that trains,
depth-sweeps and decode-benchmarks through the queue (driver and Ray workers) from its own directory.

The new environment takes looplab from the wheel only; the heavy dependencies (torch, ray, ...) come
from the project's environment through a .pth line, which adds that folder to sys.path but runs none
of its .pth files, so the editable install of the checkout stays out of it (asserted below)."""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.ray]  # builds a wheel, makes a venv, runs a queue

ROOT = Path(__file__).resolve().parents[1]
SKIP = shutil.ignore_patterns(".venv", ".git", "__pycache__", "*.egg-info", "build", "artifacts", "*.db")


def _run(argv, cwd, env, timeout=300):
    out = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"{argv}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(venv python, venv bin, the wheel's names): the wheel built from a copy of the tree, installed."""
    work = tmp_path_factory.mktemp("install")
    src = work / "src"
    shutil.copytree(ROOT, src, ignore=SKIP)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(work),
            str(src),
        ],
        work,
        env,
    )
    wheel = next(work.glob("looplab-*.whl"))
    names = {n.split("/")[0] for n in zipfile.ZipFile(wheel).namelist()}
    venv = work / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], work, env)
    py = venv / "bin" / "python"
    purelib = Path(
        _run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], work, env).strip()
    )
    (purelib / "project_deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    _run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], work, env)
    return py, venv / "bin", names, env


def test_the_wheel_installs_one_name(installed):
    py, _, names, env = installed
    assert {n for n in names if not n.endswith(".dist-info")} == {"looplab"}
    out = _run(
        [
            str(py),
            "-c",
            "import looplab, looplab.families.looped.model as m; print(looplab.__file__, m.__file__)",
        ],
        "/",
        env,
    )
    assert str(ROOT) not in out and "site-packages/looplab/" in out  # the wheel's, not the checkout's
    probe = subprocess.run([str(py), "-c", "import model"], cwd="/", env=env, capture_output=True, text=True)
    assert probe.returncode != 0 and "No module named 'model'" in probe.stderr
    # what a job reaches through the contract works installed: calibration's start-up probe (a fresh
    # Python building the built-in model; None when it fails) and the Parcae layout the family declares
    code = (
        "from looplab.workers import calibrate as c; from looplab.workers.layouts import published_classes; "
        "print(c.subprocess_seconds(c._JOB_START) is not None, sorted(published_classes()))"
    )
    assert _run([str(py), "-c", code], "/", env).split() == ["True", "['ParcaeConfig']"]


USER_ANALYSIS = "WHO = 'user'\n"
USER_DASHBOARD = "WHO = 'user'\n"


def test_a_users_model_py_is_theirs_and_trains_through_the_queue(installed, tmp_path, looplab_cache):
    py, bin_dir, _, env = installed
    (tmp_path / "analysis").mkdir()
    (tmp_path / "analysis" / "__init__.py").write_text(USER_ANALYSIS)
    (tmp_path / "dashboard.py").write_text(USER_DASHBOARD)
    example = (ROOT / "examples" / "universal_transformer.py").read_text()
    # the user's family imports the user's own analysis and dashboard: on the driver and in each Ray task
    (tmp_path / "model.py").write_text(
        example.replace(
            "from torch import nn\n",
            "from torch import nn\n\nimport analysis, dashboard\n\nassert analysis.WHO == dashboard.WHO == 'user'\n",
            1,
        )
    )
    (tmp_path / "grid.py").write_text(
        textwrap.dedent(
            """
            from looplab import Grid

            g = Grid("mine", base={
                "family": "model:factory", "family_config": {"d_model": 32, "n_heads": 2},
                "recipe": "fixed4", "size": "tiny", "model": {"loops": 2},
                "seq_len": 32, "batch_size": 4, "tokens": 4 * 32 * 6, "optimizer": "adamw",
            }, then=["depth_sweep", "decode_bench"])
            """
        )
    )
    plain = _run(
        [
            str(py),
            "-c",
            "import model, analysis, dashboard; print(model.__file__, analysis.WHO, dashboard.WHO)",
        ],
        tmp_path,
        env,
    )
    assert plain.split()[0] == str(tmp_path / "model.py") and plain.split()[1:] == ["user", "user"]
    run_env = {**env, "LOOPLAB_CACHE": str(looplab_cache), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    looplab = str(bin_dir / "looplab")
    _run([looplab, "--db", "q.db", "submit", "grid.py"], tmp_path, run_env)
    _run(
        [looplab, "--db", "q.db", "run", "--until-empty", "--artifacts", "arts"],
        tmp_path,
        run_env,
        timeout=600,
    )
    states = _run(
        [looplab, "--db", "q.db", "sql", "--csv", "SELECT kind, status FROM jobs ORDER BY id"],
        tmp_path,
        run_env,
    )
    rows = [line.split(",") for line in states.strip().splitlines()[1:]]
    assert sorted(rows) == [
        ["decode_bench", "succeeded"],
        ["depth_sweep", "succeeded"],
        ["train", "succeeded"],
    ], states


@pytest.mark.demo
def test_the_families_study_runs_from_any_directory_with_the_wheel_alone(installed, tmp_path, looplab_cache):
    """`looplab demo --study families --fast` from a directory outside the checkout with nothing of it
    on the path (no PYTHONPATH): the example family ships in the wheel (`looplab.examples`; before, the
    study stopped with "No module named 'examples'" anywhere but the checkout). Parcae, the Huginn-,
    Ouro- and MoR-style families and the example family at equal data (with depth sweeps) and at equal
    training FLOPs, two seeds; both tables and the report. (This is the families study's demo test:
    tests/test_study_demos.py runs the other studies from the checkout.)"""
    from looplab.lab.demo_families import FAMILIES_REPORT

    py, bin_dir, _, env = installed
    assert "PYTHONPATH" not in env
    probe = subprocess.run([str(py), "-c", "import examples"], cwd=tmp_path, env=env, capture_output=True)
    assert probe.returncode != 0  # the checkout's `examples` is not importable here
    run_env = {**env, "LOOPLAB_CACHE": str(looplab_cache), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    t0 = time.monotonic()
    stdout = _run(
        [str(bin_dir / "looplab"), "--db", "looplab.db", "demo", "--study", "families", "--fast"],
        tmp_path,
        run_env,
        timeout=1800,
    )
    print(f"demo --study families --fast from {tmp_path} (wheel only): {time.monotonic() - t0:.0f} s")
    iso_data = stdout.split("== iso-data")[1].split("== iso-FLOP")[0]
    iso_flop = stdout.split("== iso-FLOP")[1].split("== what each family costs")[0]
    for label in ("parcae", "huginn", "ouro", "mor", "universal transformer"):
        assert label in iso_data, iso_data
        # every family in the one block of equal FLOPs (each within 1 % of parcae's: one class)
        assert sum(line.lstrip().startswith(label) for line in iso_flop.splitlines()) == 1, iso_flop
    assert "reference" in iso_flop and "(no pair)" not in iso_flop
    for fmt in ("html", "md"):
        assert (tmp_path / f"{FAMILIES_REPORT}.{fmt}").exists()
