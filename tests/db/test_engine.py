"""Opening the database: URL resolution, SQLite settings, read-only engines, unknown revisions."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from orchestrator.db import engine, head_revision, readonly_engine, resolve_url, session
from orchestrator.errors import ConfigError, DatabaseError
from orchestrator.schema import GridRow
from tests.db.conftest import file_digest

REPO = Path(__file__).resolve().parents[2]


def test_resolve_url_defaults_env_and_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LOOPLAB_DB", raising=False)
    assert resolve_url(None) == f"sqlite:///{tmp_path}/looplab.db"
    monkeypatch.setenv("LOOPLAB_DB", "other.db")
    assert resolve_url(None) == f"sqlite:///{tmp_path}/other.db"
    assert resolve_url("sub/x.db") == f"sqlite:///{tmp_path}/sub/x.db"
    assert resolve_url("sqlite:///rel.db") == f"sqlite:///{tmp_path}/rel.db"
    assert resolve_url("sqlite:////abs/x.db") == "sqlite:////abs/x.db"
    assert resolve_url("postgresql://u@h/db") == "postgresql://u@h/db"


@pytest.mark.parametrize("bad", ["", "   ", "nosuchdb://x/y", "sqlite+nodriver:///x.db"])
def test_resolve_url_rejects_garbage_naming_the_flag(bad):
    with pytest.raises(ConfigError, match="--db"):
        resolve_url(bad)


def test_engine_sets_sqlite_pragmas_and_is_cached(db_path):
    eng = engine(str(db_path))
    assert engine(f"sqlite:///{db_path}") is eng
    with eng.connect() as c:
        assert c.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert c.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert c.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30000
        assert c.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL
    assert db_path.with_name("looplab.db.lock").exists()


def test_engine_in_missing_directory_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        engine(str(tmp_path / "nope" / "x.db"))


def test_session_commits_on_success_and_rolls_back_on_error(db_path):
    eng = engine(str(db_path))
    with session(eng) as s:
        s.add(GridRow(name="g", spec="{}", spec_hash="a", created_at=time.time()))
    with pytest.raises(RuntimeError), session(eng) as s:
        s.add(GridRow(name="h", spec="{}", spec_hash="b", created_at=time.time()))
        s.flush()
        raise RuntimeError("boom")
    with eng.connect() as c:
        assert [r[0] for r in c.execute(text("SELECT name FROM grids"))] == ["g"]


def test_foreign_keys_are_enforced(db_path):
    eng = engine(str(db_path))
    with pytest.raises(Exception, match="FOREIGN KEY"), eng.begin() as c:
        c.exec_driver_sql("INSERT INTO metrics (job_id, key, step, value) VALUES (999, 'x', 0, 1.0)")


def test_readonly_engine_refuses_writes(db_path):
    engine(str(db_path))
    ro = readonly_engine(str(db_path))
    with ro.connect() as c:
        assert c.exec_driver_sql("PRAGMA query_only").scalar() == 1
        assert c.exec_driver_sql("SELECT COUNT(*) FROM runs").scalar() == 0
        with pytest.raises(OperationalError, match="readonly|read-only|query_only"):
            c.exec_driver_sql(
                "INSERT INTO grids (name, spec, spec_hash, created_at) VALUES ('g', '{}', 'h', 0)"
            )


def test_readonly_engine_on_missing_file_says_what_to_do(tmp_path):
    path = tmp_path / "missing.db"
    with pytest.raises(DatabaseError, match=r"looplab db upgrade.*--db"):
        readonly_engine(str(path))
    assert not path.exists()


def test_readonly_engine_on_foreign_file_says_upgrade(tmp_path):
    path = tmp_path / "other.db"
    sqlite3.connect(path).execute("CREATE TABLE t (x)").connection.close()
    with pytest.raises(DatabaseError, match="no looplab schema.*looplab db upgrade"):
        readonly_engine(str(path))


def _stamp(path: Path, rev: str) -> None:
    conn = sqlite3.connect(path)
    conn.execute("UPDATE looplab_alembic_version SET version_num = ?", (rev,))
    conn.commit()
    conn.close()


def test_unknown_revision_is_refused_and_the_file_left_untouched(db_path):
    engine(str(db_path))
    from orchestrator.db import dispose_all

    dispose_all()
    _stamp(db_path, "9999_from_the_future")
    before = file_digest(db_path)
    msg = rf"9999_from_the_future, unknown to this looplab \(head is {head_revision()}\): upgrade looplab"
    with pytest.raises(DatabaseError, match=msg):
        engine(str(db_path))
    with pytest.raises(DatabaseError, match="unknown to this looplab"):
        readonly_engine(str(db_path))
    assert file_digest(db_path) == before


def test_two_processes_creating_one_database_at_once_do_not_race(db_path):
    code = "import sys; from orchestrator.db import engine; engine(sys.argv[1]); print('ok')"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(db_path)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    conn = sqlite3.connect(db_path)
    assert conn.execute("SELECT version_num FROM looplab_alembic_version").fetchall() == [(head_revision(),)]
    conn.close()
