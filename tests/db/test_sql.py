"""`looplab sql`: every write form is refused before the database is touched; reads work; a runaway
query is stopped by the statement timeout. On SQLite and on PostgreSQL (the module's `filled` database).

The guard is checked two ways: the refusal message for each form, and the database before and after
(SQLite: the file's sha256; PostgreSQL: every table's rows and the schema). Separate tests bypass the
guard to show the read-only transaction holds too.
"""

from __future__ import annotations

import csv
import io
import json
import re

import pytest
from sqlalchemy import make_url

from looplab.lab.cli import main
from looplab.model.errors import ConfigError
from looplab.orchestrator.db import dispose_all, engine, session
from looplab.orchestrator.errors import DatabaseError
from looplab.orchestrator.schema import GridRow, Job, Metric
from looplab.orchestrator.sql import QueryTimeout, WriteRefused, check_readonly, fetch, query
from tests.pg import BACKENDS, Databases, snapshot

WRITES = [
    ("INSERT INTO grids (name, spec, spec_hash, created_at) VALUES ('x', '{}', 'x', 0)", "INSERT"),
    (
        "insert or replace into grids (id, name, spec, spec_hash, created_at) values (1, 'x', '{}', 'x', 0)",
        "INSERT",
    ),
    ("REPLACE INTO grids (id, name, spec, spec_hash, created_at) VALUES (1, 'x', '{}', 'x', 0)", "REPLACE"),
    ("UPDATE jobs SET status = 'failed'", "UPDATE"),
    ("DELETE FROM metrics", "DELETE"),
    (
        "INSERT INTO grids (name, spec, spec_hash, created_at) VALUES ('x', '{}', 'x', 0) "
        "ON CONFLICT (spec_hash) DO UPDATE SET name = 'y'",
        "INSERT",
    ),
    ("UPSERT INTO grids VALUES (1)", "UPSERT"),
    ("DROP TABLE jobs", "DROP"),
    ("DROP VIEW runs", "DROP"),
    ("CREATE TABLE t (x)", "CREATE"),
    ("CREATE INDEX ix ON jobs (kind)", "CREATE"),
    ("CREATE TEMP VIEW v AS SELECT 1", "CREATE"),
    ("ALTER TABLE jobs ADD COLUMN x INTEGER", "ALTER"),
    ("ATTACH DATABASE 'other.db' AS other", "ATTACH"),
    ("DETACH DATABASE other", "DETACH"),
    ("PRAGMA journal_mode = DELETE", "PRAGMA journal_mode"),
    ("PRAGMA main.user_version=7", "PRAGMA user_version"),
    ("PRAGMA journal_mode(DELETE)", "PRAGMA journal_mode"),
    ("PRAGMA wal_checkpoint(TRUNCATE)", "PRAGMA wal_checkpoint"),
    ("PRAGMA query_only = OFF", "PRAGMA query_only"),
    ("PRAGMA optimize", "PRAGMA optimize"),
    ("EXPLAIN PRAGMA journal_mode = DELETE", "PRAGMA journal_mode"),
    ("VACUUM", "VACUUM"),
    ("VACUUM INTO 'copy.db'", "VACUUM"),
    ("REINDEX", "REINDEX"),
    ("ANALYZE", "ANALYZE"),
    ("BEGIN", "BEGIN"),
    ("BEGIN IMMEDIATE TRANSACTION", "BEGIN"),
    ("COMMIT", "COMMIT"),
    ("END", "END"),
    ("SAVEPOINT s1", "SAVEPOINT"),
    ("RELEASE s1", "RELEASE"),
    ("SELECT 1; DELETE FROM metrics", "multiple statements"),
    ("SELECT 1;;SELECT 2", "multiple statements"),
    ("WITH x AS (SELECT 1) DELETE FROM metrics", "DELETE"),
    ("WITH x AS (SELECT 1) INSERT INTO grids SELECT * FROM grids", "INSERT"),
    ("/* harmless */ DELETE FROM metrics", "DELETE"),
    ("-- a comment\nDROP TABLE jobs", "DROP"),
    ("SELECT 1 /* ; */ ; UPDATE jobs SET status = 'x'", "multiple statements"),
    ("EXPLAIN DELETE FROM metrics", "DELETE"),
    ("EXPLAIN ANALYZE DELETE FROM metrics", "DELETE"),
    ("", "an empty statement"),
    # PostgreSQL forms: SELECT INTO makes a table, these functions change state from a SELECT
    ("SELECT * INTO copy_of_jobs FROM jobs", "INTO"),
    ("TRUNCATE metrics", "TRUNCATE"),
    ("COPY jobs TO '/tmp/x'", "COPY"),
    ("SET default_transaction_read_only = off", "SET"),
    ("SELECT set_config('default_transaction_read_only', 'off', false)", "set_config()"),
    # quoted, the same function: behind the lab's proxy it would switch the dashboard to another person's role
    ("""SELECT "set_config"('role', 'carol', false)""", "set_config()"),
    ("SELECT pg_terminate_backend(pid) FROM pg_stat_activity", "pg_terminate_backend()"),
    ("SELECT nextval('jobs_id_seq')", "nextval()"),
    ("SELECT pg_advisory_lock(1)", "pg_advisory_lock()"),
    ("GRANT SELECT ON jobs TO public", "GRANT"),
    ("DO $$ BEGIN DELETE FROM metrics; END $$", "DO"),
    ("CALL p()", "CALL"),
]

READS = [
    "SELECT * FROM runs",
    "SELECT * FROM curves",
    "SELECT * FROM depth",
    "SELECT * FROM decode",
    "select count(*) from metrics;",
    "WITH m AS (SELECT job_id, MAX(step) AS s FROM metrics GROUP BY job_id) SELECT * FROM m",
    "SELECT replace(name, 'g', 'h') AS n FROM grids",
    "SELECT 'DELETE FROM metrics; DROP TABLE jobs' AS harmless -- UPDATE in a comment",
    'SELECT "key" FROM metrics WHERE "key" = \'x;y\'',
]
READS_BY_BACKEND = {
    "sqlite": [
        "EXPLAIN QUERY PLAN SELECT * FROM curves WHERE job_id = 1",
        "PRAGMA table_info(runs)",
        "PRAGMA journal_mode",
    ],
    "postgresql": [
        "EXPLAIN SELECT * FROM curves WHERE job_id = 1",
        "EXPLAIN ANALYZE SELECT count(*) FROM runs",
        "SELECT current_setting('transaction_read_only') AS ro",
    ],
}
# Never ends by itself: each row adds one more. Only the statement timeout stops it.
RUNAWAY = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r"


@pytest.fixture(scope="module", params=BACKENDS)
def filled(request, tmp_path_factory):
    """One small database per backend for the module: every test here must leave it unchanged anyway.
    Its URL; the PostgreSQL one skips without a server (fails in CI, see tests/conftest.py)."""
    server = request.getfixturevalue("pg_server") if request.param == "postgresql" else None
    if request.param == "postgresql" and server is None:
        pytest.skip("no PostgreSQL server here (apt-get install -y postgresql)")
    dbs = Databases(request.param, tmp_path_factory.mktemp("sql"), server)
    url = dbs.new()
    with session(engine(url)) as s:
        s.add(GridRow(id=1, name="g1", spec="{}", spec_hash="g", created_at=1.0))
        s.add(
            Job(
                id=1,
                grid_id=1,
                kind="train",
                config="{}",
                config_hash="a",
                recipe="lean",
                size="tiny",
                seed=0,
                created_at=2.0,
            )
        )
        s.add_all([Metric(job_id=1, key="val_loss", step=i, value=4.0 - i / 4) for i in range(4)])
    dispose_all()  # checkpoint the WAL into the file, so the digest covers everything
    yield url
    dbs.close()


def _backend(url: str) -> str:
    return make_url(url).get_backend_name()


@pytest.mark.parametrize("sql,what", WRITES, ids=[w[0][:40] for w in WRITES])
def test_write_forms_are_refused_and_the_database_is_unchanged(filled, capsys, sql, what):
    if _backend(filled) == "postgresql" and sql.startswith(("PRAGMA", "EXPLAIN PRAGMA", "VACUUM INTO")):
        pytest.skip("a SQLite-only form: the textual check does not depend on the backend")
    before = snapshot(filled)
    with pytest.raises(WriteRefused, match="only read-only statements are accepted"):
        check_readonly(sql)
    assert main(["--db", filled, "sql", sql]) == 2
    err = capsys.readouterr().err
    assert "looplab sql: only read-only statements are accepted (SELECT, WITH, EXPLAIN); refused: " in err
    assert what in err
    assert snapshot(filled) == before


@pytest.mark.parametrize(
    "sql", READS + [f"{backend}: {sql}" for backend, reads in READS_BY_BACKEND.items() for sql in reads]
)
def test_read_forms_are_accepted(filled, sql):
    backend, _, own = sql.partition(": ")
    if own and backend in READS_BY_BACKEND:
        if backend != _backend(filled):
            pytest.skip(f"a {backend} statement")
        sql = own
    check_readonly(sql)
    before = snapshot(filled)
    columns, _rows = fetch(filled, sql)
    assert columns
    assert snapshot(filled) == before


def test_query_returns_a_dataframe(filled):
    df = query(filled, "SELECT job_id, recipe, key, step, value FROM curves ORDER BY step")
    assert list(df.columns) == ["job_id", "recipe", "key", "step", "value"]
    assert df["value"].tolist() == [4.0, 3.75, 3.5, 3.25]


@pytest.mark.parametrize(
    "sql",
    [
        "DELETE FROM metrics",
        # a data-modifying CTE: PostgreSQL runs the DELETE although the statement is "a WITH"
        "WITH gone AS (DELETE FROM metrics RETURNING job_id) SELECT count(*) FROM gone",
        "INSERT INTO grids (name, spec, spec_hash, created_at) VALUES ('x', '{}', 'x', 0)",
    ],
)
def test_the_readonly_transaction_is_a_second_line_of_defence(filled, monkeypatch, sql):
    """With the textual check switched off, the read-only engine / transaction itself refuses."""
    import looplab.orchestrator.sql as sql_mod

    if sql.startswith("WITH gone") and _backend(filled) == "sqlite":
        pytest.skip("SQLite has no data-modifying CTE")
    before = snapshot(filled)
    monkeypatch.setattr(sql_mod, "check_readonly", lambda sql: None)
    with pytest.raises(DatabaseError, match="readonly|read-only|query_only"):
        fetch(filled, sql)
    assert snapshot(filled) == before


def test_a_session_setting_changed_by_one_query_does_not_make_the_next_one_writable(filled, monkeypatch):
    """PostgreSQL: a query that switches the session's read-only default off (set_config, refused by the
    check, here let through) does not open the next query of the pooled connection to writes."""
    import looplab.orchestrator.sql as sql_mod

    if _backend(filled) != "postgresql":
        pytest.skip("a PostgreSQL session setting")
    before = snapshot(filled)
    monkeypatch.setattr(sql_mod, "check_readonly", lambda sql: None)
    fetch(filled, "SELECT set_config('default_transaction_read_only', 'off', false)")
    with pytest.raises(DatabaseError, match="read-only transaction"):
        fetch(filled, "WITH gone AS (DELETE FROM metrics RETURNING job_id) SELECT count(*) FROM gone")
    assert snapshot(filled) == before


def test_a_runaway_query_is_stopped_by_the_timeout(filled, capsys):
    before = snapshot(filled)
    with pytest.raises(QueryTimeout, match=r"statement timeout of 0\.5 s") as stopped:
        fetch(filled, RUNAWAY, timeout_s=0.5)
    assert stopped.value.timeout_s == 0.5
    assert main(["--db", filled, "sql", "--timeout", "0.3", RUNAWAY]) == 2
    assert "looplab sql: error: query stopped: it ran longer than the statement timeout of 0.3 s" in (
        capsys.readouterr().err
    )
    assert snapshot(filled) == before
    # the connection is usable afterwards, and a quick query is not affected by a short timeout
    assert fetch(filled, "SELECT count(*) AS n FROM metrics", timeout_s=0.5) == (["n"], [(4,)])


@pytest.mark.parametrize("bad", [0, -1, float("nan"), "10", True])
def test_a_bad_timeout_is_refused_naming_the_field(bad):
    with pytest.raises(ConfigError, match="timeout"):
        fetch("sqlite:///never-opened.db", "SELECT 1", timeout_s=bad)


def test_a_bad_timeout_flag_is_refused(filled, capsys):
    assert main(["--db", filled, "sql", "--timeout", "0", "SELECT 1"]) == 2
    assert "looplab sql: error: --timeout: must be > 0.0, got 0.0" in capsys.readouterr().err


def test_table_csv_and_json_output(filled, capsys):
    q = "SELECT recipe, step, value, NULL AS empty FROM curves ORDER BY step"
    assert main(["--db", filled, "sql", q]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["recipe", "step", "value", "empty"]
    assert lines[2].split() == ["lean", "0", "4", "NULL"]
    assert lines[-1] == "(4 rows)"
    # numbers right-aligned, so the columns line up
    assert len({len(line) for line in lines[1:-1]}) == 1

    assert main(["--db", filled, "sql", "--csv", q]) == 0
    rows = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert rows[0] == ["recipe", "step", "value", "empty"]
    assert rows[1:] == [["lean", str(i), str(4.0 - i / 4), ""] for i in range(4)]

    assert main(["--db", filled, "sql", "--json", q]) == 0
    recs = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert recs == [{"recipe": "lean", "step": i, "value": 4.0 - i / 4, "empty": None} for i in range(4)]


def test_wide_cells_are_truncated(filled, capsys):
    wide = "printf('%.100c', 'x')" if _backend(filled) == "sqlite" else "repeat('x', 100)"
    assert main(["--db", filled, "sql", f"SELECT {wide} AS wide"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[2].endswith("…") and len(out[2]) == 40


def test_sql_errors_are_one_line(filled, capsys):
    assert main(["--db", filled, "sql", "SELECT * FROM no_such_table"]) == 2
    err = capsys.readouterr().err
    assert re.search(r"no such table: no_such_table|relation \"no_such_table\" does not exist", err)
    assert len(err.strip().splitlines()) <= 3  # PostgreSQL adds the LINE 1 / caret context
