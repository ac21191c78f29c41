"""Revision 0024 (owners and the audit trail) on a database made before it: existing grids and jobs
become the migrating user's, the trail starts empty and then records what happens, and the revision
round-trips (down: the columns, tables, triggers and policies gone, the rows as they were)."""

from __future__ import annotations

import getpass
import importlib

import pandas as pd
import sqlalchemy as sa
from alembic import command
from sqlalchemy import create_engine, inspect
from sqlalchemy.pool import NullPool

from looplab.orchestrator.db import alembic_config
from tests.db.added_columns import table_rows

REVISION = importlib.import_module("looplab.migrations.versions.0024_owners_and_audit")
ROWS = [
    "INSERT INTO grids (id, name, spec, spec_hash, created_at) VALUES (1, 'g', '{}', 'h', 0)",
    "INSERT INTO jobs (id, grid_id, kind, config, config_hash, status, priority, attempts, max_attempts, "
    "created_at) VALUES (1, 1, 'train', '{}', 'a', 'failed', 0, 1, 3, 0)",
]


def _execute(url: str, *statements: str) -> None:
    raw = create_engine(url, poolclass=NullPool)
    with raw.begin() as conn:
        for statement in statements:
            conn.execute(sa.text(statement))
    raw.dispose()


def _schema(url: str) -> tuple[set[str], set[str]]:
    raw = create_engine(url, poolclass=NullPool)
    try:
        insp = inspect(raw)
        return set(insp.get_table_names()), {c["name"] for c in insp.get_columns("jobs")}
    finally:
        raw.dispose()


def test_existing_rows_get_an_owner_the_trail_records_and_the_revision_round_trips(db_url):
    cfg = alembic_config(db_url)
    command.upgrade(cfg, REVISION.down_revision)
    _execute(db_url, *ROWS)
    before = table_rows(db_url, "jobs", "id")
    command.upgrade(cfg, REVISION.revision)
    me = "postgres" if db_url.startswith("postgresql") else getpass.getuser()
    jobs = table_rows(db_url, "jobs", "id")
    pd.testing.assert_frame_equal(jobs[before.columns], before)
    assert jobs["owner"].tolist() == [me] and table_rows(db_url, "grids", "id")["owner"].tolist() == [me]
    assert table_rows(db_url, "audit", "id").empty  # the revision itself is nobody's action
    _execute(
        db_url, "UPDATE jobs SET status = 'queued' WHERE id = 1", "UPDATE jobs SET priority = 4 WHERE id = 1"
    )
    trail = table_rows(db_url, "audit", "id")
    assert trail[["actor", "action", "job_id", "grid_id", "detail"]].values.tolist() == [
        [me, "retry", 1, 1, "failed -> queued"],
        [me, "priority", 1, 1, "0 -> 4"],
    ]
    command.downgrade(cfg, REVISION.down_revision)
    tables, columns = _schema(db_url)
    assert not {"audit", "local_user"} & tables and "owner" not in columns
    _execute(db_url, "UPDATE jobs SET status = 'cancelled' WHERE id = 1")  # no trigger left behind
    command.upgrade(cfg, "head")
    assert table_rows(db_url, "audit", "id").empty
    assert table_rows(db_url, "jobs", "id")["status"].tolist() == ["cancelled"]
