"""`looplab db upgrade` / `looplab db current` as a user runs them: the installed console script."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

from orchestrator.db import VERSION_TABLE, head_revision
from orchestrator.schema import Base
from orchestrator.views import VIEW_NAMES

LOOPLAB = str(Path(sys.executable).with_name("looplab"))


def _looplab(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([LOOPLAB, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_db_upgrade_creates_every_table_and_view(tmp_path):
    db = tmp_path / "fresh.db"
    p = _looplab("--db", str(db), "db", "upgrade", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == f"database sqlite:///{db} at revision {head_revision()} (head)"
    conn = sqlite3.connect(db)
    objs = set(conn.execute("SELECT type, name FROM sqlite_master").fetchall())
    conn.close()
    for table in [*Base.metadata.tables, VERSION_TABLE]:
        assert ("table", table) in objs
    for view in VIEW_NAMES:
        assert ("view", view) in objs

    p = _looplab("--db", str(db), "db", "current", cwd=tmp_path)
    assert p.returncode == 0 and "(head)" in p.stdout


def test_db_current_on_a_missing_file_creates_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv("LOOPLAB_DB", raising=False)
    p = _looplab("db", "current", cwd=tmp_path)  # default: ./looplab.db
    assert p.returncode == 1
    assert "looplab db upgrade" in p.stdout
    assert not (tmp_path / "looplab.db").exists()
