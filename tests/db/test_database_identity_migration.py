"""Revision 0022 (`database_identity`) on a database made before it: its rows are kept, the identity is
written at its first use (not by the revision: a copy of a template database migrated once must get an
identity of its own), is the same on every later use, differs between databases, and the revision
round-trips."""

from __future__ import annotations

import importlib
import uuid

import sqlalchemy as sa
from alembic import command
from sqlalchemy import create_engine, inspect
from sqlalchemy.pool import NullPool

from looplab.orchestrator import alerts
from looplab.orchestrator.db import alembic_config, engine
from tests.db.added_columns import table_rows

REVISION = importlib.import_module("looplab.migrations.versions.0022_database_identity")
JOB = (
    "INSERT INTO jobs (id, kind, config, config_hash, status, priority, attempts, max_attempts, created_at) "
    "VALUES (1, 'train', '{}', 'a', 'succeeded', 0, 1, 3, 0)"
)


def _tables(url: str) -> set[str]:
    raw = create_engine(url, poolclass=NullPool)
    try:
        return set(inspect(raw).get_table_names())
    finally:
        raw.dispose()


def test_the_identity_is_written_at_first_use_once_and_the_revision_round_trips(db_url):
    command.upgrade(alembic_config(db_url), REVISION.down_revision)
    raw = create_engine(db_url, poolclass=NullPool)
    with raw.begin() as conn:
        conn.execute(sa.text(JOB))
    raw.dispose()
    before = table_rows(db_url, "jobs", "id")
    eng = engine(db_url)  # upgrades to head
    assert "database_identity" in _tables(db_url)
    assert table_rows(db_url, "database_identity", "id").empty  # not written by the revision
    first = alerts.ensure_identity(eng)
    assert str(uuid.UUID(first)) == first and alerts.ensure_identity(eng) == first
    # the columns the revision found stay as they were (a later one, 0024, adds `owner`)
    assert table_rows(db_url, "jobs", "id")[before.columns].equals(before)
    cfg = alerts.AlertConfig((alerts.channel("c", {"type": "command", "command": "true"}),))
    msg = alerts.notify(eng, cfg, "test", "t", "x", group="g", now=1e9)
    assert msg == alerts.message_id("g", 1e9, cfg.window_s, first)
    assert msg != alerts.message_id("g", 1e9, cfg.window_s, str(uuid.uuid4()))  # another database's
    eng.dispose()
    command.downgrade(alembic_config(db_url), REVISION.down_revision)
    assert "database_identity" not in _tables(db_url)
    command.upgrade(alembic_config(db_url), "head")
    assert table_rows(db_url, "jobs", "id")[before.columns].equals(before)
