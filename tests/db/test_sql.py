"""`looplab sql`: every write form is refused before the database is touched; reads work.

The guard is checked two ways: the refusal message for each form, and the database file's sha256
before and after. A separate test bypasses the guard to show the read-only connection holds too.
"""

from __future__ import annotations

import csv
import io
import json

import pytest

from orchestrator.cli import main
from orchestrator.db import dispose_all, engine, session
from orchestrator.schema import GridRow, Job, Metric
from orchestrator.sql import WriteRefused, check_readonly, fetch, query
from tests.db.conftest import file_digest

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
    ("", "an empty statement"),
]

READS = [
    "SELECT * FROM runs",
    "SELECT * FROM curves",
    "SELECT * FROM depth",
    "SELECT * FROM decode",
    "select count(*) from metrics;",
    "WITH m AS (SELECT job_id, MAX(step) AS s FROM metrics GROUP BY job_id) SELECT * FROM m",
    "EXPLAIN QUERY PLAN SELECT * FROM curves WHERE job_id = 1",
    "PRAGMA table_info(runs)",
    "PRAGMA journal_mode",
    "SELECT replace(name, 'g', 'h') AS n FROM grids",
    "SELECT 'DELETE FROM metrics; DROP TABLE jobs' AS harmless -- UPDATE in a comment",
    'SELECT "key" FROM metrics WHERE "key" = \'x;y\'',
]


@pytest.fixture(scope="module")
def filled(tmp_path_factory):
    """One small database for the module: every test here must leave it unchanged anyway."""
    db_path = tmp_path_factory.mktemp("sql") / "looplab.db"
    with session(engine(str(db_path))) as s:
        s.add(GridRow(id=1, name="g1", spec="{}", spec_hash="g", created_at=1.0))
        s.add(Job(id=1, grid_id=1, kind="train", config="{}", config_hash="a", recipe="lean", size="tiny",
                  seed=0, created_at=2.0))  # fmt: skip
        s.add_all([Metric(job_id=1, key="val_loss", step=i, value=4.0 - i / 4) for i in range(4)])
    dispose_all()  # checkpoint the WAL into the file, so the digest covers everything
    return db_path


@pytest.mark.parametrize("sql,what", WRITES, ids=[w[0][:40] for w in WRITES])
def test_write_forms_are_refused_and_the_file_is_unchanged(filled, capsys, sql, what):
    before = file_digest(filled)
    with pytest.raises(WriteRefused, match="only read-only statements are accepted"):
        check_readonly(sql)
    assert main(["--db", str(filled), "sql", sql]) == 2
    err = capsys.readouterr().err
    assert "looplab sql: only read-only statements are accepted (SELECT, WITH, EXPLAIN); refused: " in err
    assert what in err
    assert file_digest(filled) == before


@pytest.mark.parametrize("sql", READS)
def test_read_forms_are_accepted(filled, sql):
    check_readonly(sql)
    before = file_digest(filled)
    fetch(str(filled), sql)
    assert file_digest(filled) == before


def test_query_returns_a_dataframe(filled):
    df = query(str(filled), "SELECT job_id, recipe, key, step, value FROM curves ORDER BY step")
    assert list(df.columns) == ["job_id", "recipe", "key", "step", "value"]
    assert df["value"].tolist() == [4.0, 3.75, 3.5, 3.25]


def test_the_readonly_connection_is_a_second_line_of_defence(filled, monkeypatch):
    import orchestrator.sql as sql_mod

    before = file_digest(filled)
    monkeypatch.setattr(sql_mod, "check_readonly", lambda sql: None)
    with pytest.raises(Exception, match="readonly|read-only|query_only"):
        fetch(str(filled), "DELETE FROM metrics")
    assert file_digest(filled) == before


def test_table_csv_and_json_output(filled, capsys):
    q = "SELECT recipe, step, value, NULL AS empty FROM curves ORDER BY step"
    assert main(["--db", str(filled), "sql", q]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["recipe", "step", "value", "empty"]
    assert lines[2].split() == ["lean", "0", "4", "NULL"]
    assert lines[-1] == "(4 rows)"
    # numbers right-aligned, so the columns line up
    assert len({len(line) for line in lines[1:-1]}) == 1

    assert main(["--db", str(filled), "sql", "--csv", q]) == 0
    rows = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert rows[0] == ["recipe", "step", "value", "empty"]
    assert rows[1:] == [["lean", str(i), str(4.0 - i / 4), ""] for i in range(4)]

    assert main(["--db", str(filled), "sql", "--json", q]) == 0
    recs = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert recs == [{"recipe": "lean", "step": i, "value": 4.0 - i / 4, "empty": None} for i in range(4)]


def test_wide_cells_are_truncated(filled, capsys):
    assert main(["--db", str(filled), "sql", "SELECT printf('%.100c', 'x') AS wide"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[2].endswith("…") and len(out[2]) == 40


def test_sql_errors_are_one_line(filled, capsys):
    assert main(["--db", str(filled), "sql", "SELECT * FROM no_such_table"]) == 2
    assert "no such table: no_such_table" in capsys.readouterr().err
