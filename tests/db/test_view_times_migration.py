"""Revision 0023 (`view_times_and_grid`) changes no table: it exists so a database already at 0022, whose
views were made by the release before, gets the new views (ISO times, `grid` everywhere, `recipe` in
`decode`) the first time the new looplab opens it. On SQLite and PostgreSQL (`db_url`)."""

from __future__ import annotations

import importlib

from alembic import command
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from looplab.orchestrator.db import alembic_config, engine, readonly_engine

REVISION = importlib.import_module("looplab.migrations.versions.0023_view_times_and_grid")


def _raw(url: str, *sql: str) -> None:
    raw = create_engine(url, poolclass=NullPool)
    try:
        with raw.begin() as c:
            for s in sql:
                c.exec_driver_sql(s)
    finally:
        raw.dispose()


def _columns(url: str, view: str) -> list[str]:
    raw = create_engine(url, poolclass=NullPool)
    try:
        with raw.connect() as c:
            return list(c.execute(text(f"SELECT * FROM {view} WHERE 1 = 0")).keys())
    finally:
        raw.dispose()


def test_a_database_at_0022_gets_the_new_views_when_opened(db_url):
    assert REVISION.down_revision == "0022_database_identity"
    cfg = alembic_config(db_url)
    command.upgrade(cfg, "0022_database_identity")
    # what the release before left: its own `runs` (epoch times only) over a stored run
    _raw(
        db_url,
        "INSERT INTO grids (id, name, spec, spec_hash, created_at) VALUES (1, 'tour', '{}', 'g', 0)",
        "INSERT INTO jobs (id, kind, config, config_hash, status, priority, attempts, max_attempts, created_at, "
        "finished_at, grid_id, recipe) VALUES (1, 'train', '{}', 'a', 'succeeded', 0, 1, 3, 60, 1800000000, 1, 'lean')",
        "CREATE VIEW runs AS SELECT id AS job_id, created_at, finished_at FROM jobs",
    )
    assert "created" not in _columns(db_url, "runs")

    engine(db_url)  # the ordinary open: migrates to head, re-creating the views

    with readonly_engine(db_url).connect() as c:
        row = c.execute(text("SELECT job_id, grid, recipe, created, finished, finished_at FROM runs")).one()
    assert tuple(row) == (1, "tour", "lean", "1970-01-01T00:01:00Z", "2027-01-15T08:00:00Z", 1_800_000_000)
    assert "grid" in _columns(db_url, "curves") and "grid" in _columns(db_url, "depth")
    assert {"grid", "recipe", "arch"} <= set(_columns(db_url, "decode"))

    # round trip: down to 0022 (no table touched, the job kept) and back to the same views
    command.downgrade(cfg, "0022_database_identity")
    command.upgrade(cfg, "head")
    with readonly_engine(db_url).connect() as c:
        assert c.execute(text("SELECT grid, finished FROM runs")).one() == ("tour", "2027-01-15T08:00:00Z")
