"""`looplab db upgrade` / `looplab db current`: the commands in-process (`lab.cli.main`, what the
console script calls), and once the installed console script itself in its own process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from looplab.lab.cli import main
from looplab.orchestrator.db import VERSION_TABLE, head_revision
from looplab.orchestrator.schema import Base
from looplab.orchestrator.views import VIEW_NAMES

LOOPLAB = str(Path(sys.executable).with_name("looplab"))


def test_db_upgrade_creates_every_table_and_view(db_url, capsys):
    assert main(["--db", db_url, "db", "upgrade"]) == 0
    assert capsys.readouterr().out.strip() == f"database {db_url} at revision {head_revision()} (head)"
    raw = sa.create_engine(db_url, poolclass=NullPool)
    insp = sa.inspect(raw)
    tables, views = set(insp.get_table_names()), set(insp.get_view_names())
    raw.dispose()
    assert {*Base.metadata.tables, VERSION_TABLE} <= tables
    assert set(VIEW_NAMES) <= views

    assert main(["--db", db_url, "db", "current"]) == 0
    assert "(head)" in capsys.readouterr().out


def test_db_current_on_a_missing_file_creates_nothing(tmp_path, monkeypatch, capsys):  # SQLite only: a file
    monkeypatch.delenv("LOOPLAB_DB", raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(["db", "current"]) == 2  # default: ./looplab.db, which is not there: said, not created
    assert "nothing created" in capsys.readouterr().err
    assert not (tmp_path / "looplab.db").exists()


def test_the_installed_console_script_runs_a_command_and_exits_with_its_status(tmp_path, monkeypatch):
    """`looplab` as pip installed it (pyproject's console entry point), as a user runs it: the command's
    output on stdout and its exit status, 0 or 2, reach the shell."""
    monkeypatch.delenv("LOOPLAB_DB", raising=False)

    def looplab(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([LOOPLAB, *args], cwd=tmp_path, capture_output=True, text=True, timeout=120)

    url = f"sqlite:///{tmp_path / 'x.db'}"
    p = looplab("--db", url, "db", "upgrade")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == f"database {url} at revision {head_revision()} (head)"
    p = looplab("db", "current")  # ./looplab.db does not exist: said on stderr, nothing created
    assert p.returncode == 2 and "nothing created" in p.stderr
    assert not (tmp_path / "looplab.db").exists()
