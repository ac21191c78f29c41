"""`looplab slurm`: the script it writes, and what it refuses (naming the option). The script's run on a
real SLURM is tests/cluster/test_slurm.py."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from looplab.lab.cli import main
from looplab.lab.slurm import time_minutes

PG = "postgresql+psycopg://lab:secret@dbhost:5432/looplab"
GRID = """
from looplab import Grid
base = {"recipe": "lean", "size": "tiny", "seq_len": 32, "batch_size": 4, "tokens": 4096,
        "ckpt_minutes": CKPT, "data": {"tokenizer": "byte"}}
grid = Grid("g", base=base, sweep={"seed": [0, 1]}, resources=RESOURCES)
"""


def grid_file(tmp_path, ckpt=2.0, resources=None):
    path = tmp_path / "grids.py"
    path.write_text(GRID.replace("CKPT", repr(ckpt)).replace("RESOURCES", repr(resources)))
    return str(path)


def slurm(tmp_path, *args, db=PG, grids=None):
    argv = ["--db", db, "slurm", grids or grid_file(tmp_path), "--artifacts", str(tmp_path / "art")]
    return main([*argv, "-o", str(tmp_path / "s.sbatch"), *args])


def test_the_script_asks_slurm_for_what_the_grid_needs_and_is_valid_bash(tmp_path, capsys):
    grids = grid_file(tmp_path, resources={"num_cpus": 2, "num_gpus": 1})
    assert slurm(tmp_path, "--time", "2:00:00", "--nodes", "1-4", "--partition", "gpu", grids=grids) == 0
    text = (tmp_path / "s.sbatch").read_text()
    for line in (
        "#SBATCH --nodes=1-4",
        "#SBATCH --cpus-per-task=2",
        "#SBATCH --gpus-per-node=1",
        "#SBATCH --time=120",
        "#SBATCH --signal=B:USR1@180",
        "#SBATCH --partition=gpu",
        "#SBATCH --no-requeue",
        f"#SBATCH --output={tmp_path / 'art'}/slurm/%x-%j.out",
        f"DB={PG}",
        "--until-empty --release-on USR1,TERM",
        'sbatch --dependency=afterany:"$SLURM_JOB_ID" "$SCRIPT"',
    ):
        assert line in text, line
    assert "sleep 1\n" in text and "HEAD_WAIT_S=300" in text  # polls the head, bounded
    assert (tmp_path / "art" / "slurm").is_dir()  # SLURM writes the outputs there
    assert "sbatch " in capsys.readouterr().out  # says how to submit it
    if shutil.which("bash"):
        assert subprocess.run(["bash", "-n", str(tmp_path / "s.sbatch")]).returncode == 0


@pytest.mark.parametrize(
    ("args", "db", "resources", "ckpt", "named"),
    [
        (("--time", "60"), "local.db", None, 2.0, "--db: a SQLite file on a node-local path"),
        (("--time", "60"), "mysql+pymysql://u@h/db", None, 2.0, "--db: mysql"),
        (("--time", "60", "--gpus-per-node", "0"), PG, {"num_gpus": 2}, 2.0, "--gpus-per-node: 0 GPU(s)"),
        (("--time", "5", "--signal-before", "60"), PG, None, 10.0, "--time: 5 min is not longer than one"),
        (("--time", "1", "--signal-before", "60"), PG, None, 0.1, "--signal-before: 60 s is not shorter"),
        (("--time", "ten"), PG, None, 2.0, "--time: 'ten' is not a SLURM time"),
        (("--time", "60", "--nodes", "0"), PG, None, 2.0, "--nodes: '0'"),
        (("--time", "60", "--cpus-per-task", "1"), PG, {"num_cpus": 4}, 2.0, "--cpus-per-task: 1"),
    ],
)
def test_bad_input_is_refused_naming_the_option(tmp_path, capsys, args, db, resources, ckpt, named):
    grids = grid_file(tmp_path, ckpt=ckpt, resources=resources)
    db = str(tmp_path / db) if db.endswith(".db") else db
    assert slurm(tmp_path, *args, db=db, grids=grids) == 2
    assert named in capsys.readouterr().err
    assert not (tmp_path / "s.sbatch").exists()  # nothing written


def test_slurm_times_are_read_as_slurm_reads_them():
    assert [time_minutes(t) for t in ("1", "90", "1:30", "01:00:00", "2-0", "1-2:30", "0-0:0:30")] == [
        1,
        90,
        2,
        60,
        2880,
        1590,
        1,
    ]


def test_run_refuses_a_release_signal_it_does_not_know(tmp_path, capsys):
    assert main(["--db", str(tmp_path / "q.db"), "run", "--release-on", "USR1,KILL"]) == 2
    assert "--release-on: 'KILL' is not a signal" in capsys.readouterr().err
    assert not (tmp_path / "q.db").exists()  # refused before the database is opened
