"""The CLI as people's hands type it: `--db` after the command and from $LOOPLAB_DB, a reading command in
the wrong directory says so and creates nothing, `status` after a finished queue tells what became of
the last grids (and every job listing has a grid column), and a closed pipe ends quietly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from looplab import Grid, Queue
from looplab.orchestrator.jobqueue import claim, finish
from tests.cli import looplab_here
from tests.orchestrator import fake_jobs

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def finished(tmp_path):
    """(db path, queue) with two grids whose jobs all ended: `a` two succeeded, `b` one failed."""
    db = tmp_path / "q.db"
    q = Queue(db=db, kinds=fake_jobs)
    ids = q.submit([Grid("a-long-grid-name-here", job="noop", sweep={"tag": [1, 2]})])
    ids += q.submit([Grid("b", job="boom", max_attempts=1)])
    for job in ids:
        n = claim(q.eng, job, "test", str(tmp_path / f"a{job}"))
        failed = job == ids[-1]
        finish(q.eng, job, n, "failed" if failed else "succeeded", "RuntimeError: boom" if failed else None)
    return db, ids


def test_db_is_taken_after_the_command_and_from_the_environment(finished, capsys, monkeypatch):
    db, ids = finished
    after = looplab_here(capsys, "status", "--all", "--db", db)
    assert after.returncode == 0 and f"\n{ids[0]:>4} a-long-grid-n…" in after.stdout
    sql = looplab_here(capsys, "sql", "SELECT count(*) AS n FROM jobs", "--db", db)
    assert sql.returncode == 0 and "3" in sql.stdout
    monkeypatch.setenv("LOOPLAB_DB", str(db))
    env = looplab_here(capsys, "status", "--all")
    assert env.returncode == 0 and env.stdout == after.stdout
    # the one after the command wins over the one before it, as the later flag does everywhere
    assert looplab_here(capsys, "--db", "elsewhere.db", "status", "--all", "--db", db).stdout == after.stdout


@pytest.mark.parametrize(
    "command",
    [
        ["status"],
        ["logs", "1"],
        ["cancel", "1"],
        ["retry", "1"],
        ["gc"],
        ["alerts"],
        ["sql", "SELECT 1"],
        ["db", "current"],
        ["report", "demo"],
        ["dashboard"],
    ],
)
def test_a_reading_command_in_the_wrong_directory_says_so_and_creates_nothing(
    command, tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LOOPLAB_DB", raising=False)
    ran = looplab_here(capsys, *command)
    assert ran.returncode == 2
    assert f"no database at {tmp_path / 'looplab.db'} (nothing created)" in ran.stderr
    assert "--db or $LOOPLAB_DB" in ran.stderr
    assert list(tmp_path.iterdir()) == []


def test_plan_before_the_first_submit_prices_an_empty_queue_and_creates_nothing(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LOOPLAB_DB", raising=False)
    grids = tmp_path / "grids.py"
    grids.write_text(
        "from looplab import Grid\ng = Grid('g', base={'recipe': 'lean', 'size': 'tiny', 'tokens': 4096})\n"
    )
    ran = looplab_here(capsys, "plan", grids, "--device", "h100")
    assert ran.returncode == 0, ran.stderr
    assert "no database at" in ran.stderr and "nothing created" in ran.stderr and "train" in ran.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["grids.py"]
    # submit is what creates it
    assert looplab_here(capsys, "submit", grids).returncode == 0
    assert (tmp_path / "looplab.db").is_file()


def test_status_after_a_finished_queue_shows_the_last_grids_outcome(finished, capsys):
    db, ids = finished
    ran = looplab_here(capsys, "--db", db, "status")
    lines = ran.stdout.splitlines()
    assert lines[0] == "queue empty; the last grids:"
    assert lines[1].startswith("  grid 1 a-long-grid-name-here: 2 succeeded; last finished 20")
    assert lines[2].startswith("  grid 2 b: 1 failed; last finished 20")
    assert f"`looplab logs {ids[-1]}` for the last failure" in lines[3]
    listed = looplab_here(capsys, "--db", db, "status", "--all").stdout.splitlines()
    assert listed[0].split()[:3] == ["id", "grid", "kind"]
    rows = [line for line in listed if " succeeded " in line]
    assert len(rows) == 2 and all(len(line.rstrip()) <= 120 for line in [listed[0], *rows])


def test_a_closed_pipe_ends_quietly(finished, capsys, monkeypatch):
    db, _ = finished

    class ClosedPipe:
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    from looplab.lab.cli import main

    assert main(["--db", str(db), "sql", "--csv", "SELECT * FROM jobs"]) == 141
    monkeypatch.undo()
    assert "Traceback" not in capsys.readouterr().err


def test_a_closed_pipe_in_a_shell_pipeline_prints_no_traceback(finished):
    """`looplab sql --csv ... | head -1` as a shell runs it: one line out, nothing on stderr."""
    db, _ = finished
    query = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100000) SELECT i FROM n"
    cmd = f"{sys.executable} -m looplab --db {db} sql --csv --timeout 60 '{query}' | head -1"
    done = subprocess.run(
        ["bash", "-c", cmd], capture_output=True, text=True, timeout=120, cwd=ROOT, env=_env()
    )
    assert done.stdout == "i\n" and done.stderr == ""


def _env() -> dict:
    import os

    return {**os.environ, "PYTHONPATH": str(ROOT)}


def test_the_demo_ends_with_commands_that_work_as_typed(monkeypatch):
    """After `make demo` the environment is not activated: the demo's last lines name
    `.venv/bin/looplab` from the clone, and plain `looplab` only where that one is on PATH."""
    import os

    from looplab.lab.display import looplab_command

    script = Path(sys.prefix) / "bin" / "looplab"
    if not script.exists():
        pytest.fail(f"{script} missing: the project is installed into its environment by `make install`")
    monkeypatch.chdir(Path(sys.prefix).parent)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert looplab_command() == f"{Path(sys.prefix).name}/bin/looplab"
    assert looplab_command("study.db") == f"{Path(sys.prefix).name}/bin/looplab --db study.db"
    monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}/usr/bin:/bin")
    assert looplab_command() == "looplab"
