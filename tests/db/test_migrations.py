"""Alembic migrations: round trip, no drift against the ORM, data survives every upgrade.

The MLflow way of testing a migration chain: the migrated schema equals the ORM (compare_metadata),
every older revision is recognised as old, and rows written under an old schema are all still
there, unchanged, after upgrading to head.
"""

from __future__ import annotations

import sqlite3

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import MetaData, create_engine, inspect
from sqlalchemy.pool import NullPool

from orchestrator.db import (
    VERSION_TABLE,
    VIEW_NAMES,
    alembic_config,
    engine,
    head_revision,
    readonly_engine,
)
from orchestrator.errors import DatabaseError
from orchestrator.schema import Base
from tests.db.fill import fill, read

REVISIONS = [
    s.revision for s in reversed(list(ScriptDirectory.from_config(alembic_config()).walk_revisions()))
]


def _objects(path) -> dict[str, set[str]]:
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'").fetchall()
    finally:
        conn.close()
    out: dict[str, set[str]] = {"table": set(), "view": set(), "index": set()}
    for type_, name in rows:
        out.setdefault(type_, set()).add(name)
    return out


def _orm_indexes() -> set[str]:
    return {ix.name for t in Base.metadata.tables.values() for ix in t.indexes}


def test_revisions_form_one_line_starting_at_initial():
    assert REVISIONS[0] == "0001_initial"
    assert REVISIONS[-1] == head_revision()
    assert len(REVISIONS) >= 2


def test_round_trip_upgrade_downgrade_upgrade(db_path):
    cfg = alembic_config(str(db_path))
    command.upgrade(cfg, "head")
    objs = _objects(db_path)
    assert objs["table"] == set(Base.metadata.tables) | {VERSION_TABLE}
    assert objs["view"] == set(VIEW_NAMES)
    assert _orm_indexes() <= objs["index"]

    command.downgrade(cfg, "base")
    objs = _objects(db_path)
    assert objs["table"] <= {VERSION_TABLE}
    assert objs["view"] == set() and objs["index"] == set()

    command.upgrade(cfg, "head")
    objs = _objects(db_path)
    assert objs["table"] == set(Base.metadata.tables) | {VERSION_TABLE}
    assert objs["view"] == set(VIEW_NAMES)


def test_migrated_schema_matches_orm(db_path):
    eng = engine(str(db_path))
    with eng.connect() as conn:
        ctx = MigrationContext.configure(
            conn,
            opts={
                "compare_type": True,
                "include_name": lambda name, type_, _p: type_ != "table" or name in Base.metadata.tables,
            },
        )
        diff = compare_metadata(ctx, Base.metadata)
    assert diff == []


@pytest.mark.parametrize("old", REVISIONS[:-1])
def test_data_survives_upgrade_to_head(tmp_path, old):
    """Build a database at `old`, fill every table, upgrade to head: every row is still there."""
    path = tmp_path / f"at_{old}.db"
    command.upgrade(alembic_config(str(path)), old)
    raw = create_engine(f"sqlite:///{path}", poolclass=NullPool)
    old_meta = MetaData()
    old_meta.reflect(raw)
    with raw.begin() as conn:
        inserted = fill(conn, old_meta, skip={VERSION_TABLE})
    assert set(inserted) == set(old_meta.tables) - {VERSION_TABLE}

    # an older revision is recognised as old by the read-only path, and upgraded by engine()
    with pytest.raises(DatabaseError, match="looplab db upgrade"):
        readonly_engine(str(path))
    engine(str(path))
    with raw.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
        assert ctx.get_current_revision() == head_revision()

    new_meta = MetaData()
    new_meta.reflect(raw)
    with raw.connect() as conn:
        for name, rows in inserted.items():
            columns = [c.name for c in old_meta.tables[name].columns]
            got = read(conn, new_meta.tables[name], columns)

            def key(r, columns=columns):
                return tuple(r[c] for c in columns)

            assert sorted(map(key, got)) == sorted(map(key, rows)), name
    raw.dispose()


def test_failed_upgrade_leaves_database_unchanged(db_path, monkeypatch):
    """Migrations run in one SQLite transaction: a failure half-way leaves no half-built schema."""
    from alembic.operations import Operations

    def boom(*a, **kw):
        raise RuntimeError("injected failure")

    monkeypatch.setattr(Operations, "create_index", boom)
    with pytest.raises(RuntimeError, match="injected failure"):
        engine(str(db_path))
    objs = _objects(db_path)
    assert objs["table"] == set() and objs["view"] == set()


def test_every_orm_table_is_reflected_with_its_columns(db_path):
    """After upgrade the ORM can be used as is: every mapped table is reflected with its columns."""
    eng = engine(str(db_path))
    insp = inspect(eng)
    for name, table in Base.metadata.tables.items():
        assert {c["name"] for c in insp.get_columns(name)} == set(table.columns.keys())
