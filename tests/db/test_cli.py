"""`looplab db upgrade` / `looplab db current` as a user runs them: the installed console script."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from orchestrator.db import VERSION_TABLE, head_revision
from orchestrator.schema import Base
from orchestrator.views import VIEW_NAMES

LOOPLAB = str(Path(sys.executable).with_name("looplab"))


def _looplab(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([LOOPLAB, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_db_upgrade_creates_every_table_and_view(db_url, tmp_path):
    p = _looplab("--db", db_url, "db", "upgrade", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == f"database {db_url} at revision {head_revision()} (head)"
    raw = sa.create_engine(db_url, poolclass=NullPool)
    insp = sa.inspect(raw)
    tables, views = set(insp.get_table_names()), set(insp.get_view_names())
    raw.dispose()
    assert {*Base.metadata.tables, VERSION_TABLE} <= tables
    assert set(VIEW_NAMES) <= views

    p = _looplab("--db", db_url, "db", "current", cwd=tmp_path)
    assert p.returncode == 0 and "(head)" in p.stdout


def test_db_current_on_a_missing_file_creates_nothing(tmp_path, monkeypatch):  # SQLite only: a file
    monkeypatch.delenv("LOOPLAB_DB", raising=False)
    p = _looplab("db", "current", cwd=tmp_path)  # default: ./looplab.db
    assert p.returncode == 1
    assert "looplab db upgrade" in p.stdout
    assert not (tmp_path / "looplab.db").exists()
