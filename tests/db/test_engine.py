"""Opening the database: URL resolution, SQLite settings, read-only engines, unknown revisions.

Tests that take `db_url` run on SQLite and on PostgreSQL; the others are about SQLite files (pragmas,
the lock file, a missing directory or file) and say so."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

from looplab.model.errors import ConfigError
from looplab.orchestrator.db import dispose_all, engine, head_revision, readonly_engine, resolve_url, session
from looplab.orchestrator.errors import DatabaseError
from looplab.orchestrator.schema import GridRow
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
    # PostgreSQL: a bare scheme gets the driver looplab installs (psycopg 3); a named driver stays
    assert resolve_url("postgresql://u@h/db") == "postgresql+psycopg://u@h/db"
    assert resolve_url("postgres://u:pw@h:5433/db") == "postgresql+psycopg://u:pw@h:5433/db"
    assert resolve_url("postgresql+psycopg://u@h/db") == "postgresql+psycopg://u@h/db"


@pytest.mark.parametrize("bad", ["", "   ", "nosuchdb://x/y", "sqlite+nodriver:///x.db"])
def test_resolve_url_rejects_garbage_naming_the_flag(bad):
    with pytest.raises(ConfigError, match="--db"):
        resolve_url(bad)


def test_engine_sets_sqlite_pragmas_and_is_cached(db_path):  # SQLite only: its pragmas and lock file
    eng = engine(str(db_path))
    assert engine(f"sqlite:///{db_path}") is eng
    with eng.connect() as c:
        assert c.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert c.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert c.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30000
        assert c.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL
    assert db_path.with_name("looplab.db.lock").exists()


def test_engine_in_missing_directory_is_a_config_error(tmp_path):  # SQLite only: a file's directory
    with pytest.raises(ConfigError, match="does not exist"):
        engine(str(tmp_path / "nope" / "x.db"))


def test_session_commits_on_success_and_rolls_back_on_error(db_url):
    eng = engine(db_url)
    with session(eng) as s:
        s.add(GridRow(name="g", spec="{}", spec_hash="a", created_at=time.time()))
    with pytest.raises(RuntimeError), session(eng) as s:
        s.add(GridRow(name="h", spec="{}", spec_hash="b", created_at=time.time()))
        s.flush()
        raise RuntimeError("boom")
    with eng.connect() as c:
        assert [r[0] for r in c.execute(text("SELECT name FROM grids"))] == ["g"]


def test_foreign_keys_are_enforced(db_url):
    eng = engine(db_url)
    with pytest.raises(Exception, match="(?i)FOREIGN KEY"), eng.begin() as c:
        c.exec_driver_sql("INSERT INTO metrics (job_id, key, step, value) VALUES (999, 'x', 0, 1.0)")


def test_readonly_engine_refuses_writes(db_url):
    engine(db_url)
    ro = readonly_engine(db_url)
    with ro.connect() as c:
        if db_url.startswith("sqlite"):
            assert c.exec_driver_sql("PRAGMA query_only").scalar() == 1
        else:
            assert c.exec_driver_sql("SHOW transaction_read_only").scalar() == "on"
        assert c.exec_driver_sql("SELECT COUNT(*) FROM runs").scalar() == 0
        with pytest.raises(DBAPIError, match="readonly|read-only|query_only"):
            c.exec_driver_sql(
                "INSERT INTO grids (name, spec, spec_hash, created_at) VALUES ('g', '{}', 'h', 0)"
            )


def test_readonly_engine_on_missing_file_says_what_to_do(tmp_path):  # SQLite only: a missing file
    path = tmp_path / "missing.db"
    with pytest.raises(DatabaseError, match=r"looplab db upgrade.*--db"):
        readonly_engine(str(path))
    assert not path.exists()


def test_readonly_engine_on_foreign_file_says_upgrade(db_url):
    _raw_sql(db_url, "CREATE TABLE t (x INTEGER)")
    with pytest.raises(DatabaseError, match="no looplab schema.*looplab db upgrade"):
        readonly_engine(db_url)


def _raw_sql(url: str, *statements: str) -> None:
    """Run `statements` on a connection of their own (no looplab engine, nothing cached)."""
    raw = sa.create_engine(url, poolclass=NullPool)
    with raw.begin() as conn:
        for statement in statements:
            conn.exec_driver_sql(statement)
    raw.dispose()


def _snapshot(url: str) -> object:
    """SQLite: the file's bytes; PostgreSQL: the stamped revision and the tables there are."""
    if url.startswith("sqlite"):
        return file_digest(Path(url.removeprefix("sqlite:///")))
    raw = sa.create_engine(url, poolclass=NullPool)
    with raw.connect() as conn:
        stamp = conn.exec_driver_sql("SELECT version_num FROM looplab_alembic_version").all()
    tables = sorted(sa.inspect(raw).get_table_names())
    raw.dispose()
    return stamp, tables


def test_unknown_revision_is_refused_and_the_database_left_untouched(db_url):
    engine(db_url)
    dispose_all()
    _raw_sql(db_url, "UPDATE looplab_alembic_version SET version_num = '9999_from_the_future'")
    before = _snapshot(db_url)
    msg = rf"9999_from_the_future, unknown to this looplab \(head is {head_revision()}\): upgrade looplab"
    with pytest.raises(DatabaseError, match=msg):
        engine(db_url)
    with pytest.raises(DatabaseError, match="unknown to this looplab"):
        readonly_engine(db_url)
    assert _snapshot(db_url) == before


def test_two_processes_creating_one_database_at_once_do_not_race(db_url):
    """SQLite: a file lock; PostgreSQL: an advisory lock. Either way one process migrates, the other
    waits and finds the schema at head."""
    code = "import sys; from looplab.orchestrator.db import engine; engine(sys.argv[1]); print('ok')"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, db_url],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    raw = sa.create_engine(db_url, poolclass=NullPool)
    with raw.connect() as conn:
        stamps = conn.exec_driver_sql("SELECT version_num FROM looplab_alembic_version").all()
    raw.dispose()
    assert [tuple(r) for r in stamps] == [(head_revision(),)]


def test_grant_reader_makes_a_role_that_reads_and_cannot_write(db_url):
    """`looplab db grant-reader ROLE` (PostgreSQL): the role reads every table and view; its writes fail
    for want of privileges even after it switches its session's read-only default off."""
    from looplab.lab.cli import main
    from looplab.orchestrator.db import grant_reader

    if db_url.startswith("sqlite"):
        with pytest.raises(ConfigError, match="--db: grant-reader needs a PostgreSQL database"):
            grant_reader(db_url, "reader")
        return
    with pytest.raises(ConfigError, match="ROLE: expected a PostgreSQL role name"):
        grant_reader(db_url, "bad; DROP TABLE jobs")
    role = f"reader_{sa.make_url(db_url).database}"
    assert main(["--db", db_url, "db", "grant-reader", role]) == 0
    assert main(["--db", db_url, "db", "grant-reader", role]) == 0  # again: the role exists, no error
    as_reader = sa.make_url(db_url).set(username=role)
    raw = sa.create_engine(as_reader, poolclass=NullPool)
    try:
        with raw.connect() as conn:
            assert conn.exec_driver_sql("SELECT count(*) FROM runs").scalar() == 0
            assert conn.exec_driver_sql("SELECT count(*) FROM jobs").scalar() == 0
            assert conn.exec_driver_sql("SHOW default_transaction_read_only").scalar() == "on"
            conn.rollback()
            conn.exec_driver_sql("SET default_transaction_read_only = off")
            conn.commit()
            with pytest.raises(DBAPIError, match="permission denied"):
                conn.exec_driver_sql(
                    "INSERT INTO grids (name, spec, spec_hash, created_at) VALUES ('g', '{}', 'h', 0)"
                )
    finally:
        raw.dispose()
        dispose_all()
        _raw_sql(db_url, f'DROP OWNED BY "{role}"', f'DROP ROLE "{role}"')
