"""Checks shared by the tests of a revision that adds NULL-able columns to a table (0020, 0021): the
table's rows read back, and a round trip through the revision keeps them."""

from __future__ import annotations

import pandas as pd
import sqlalchemy as sa
from alembic import command
from sqlalchemy import create_engine, inspect
from sqlalchemy.pool import NullPool

from looplab.orchestrator.db import alembic_config


def table_rows(url: str, table: str, order: str) -> pd.DataFrame:
    """Every row of `table` (or view) ordered by `order`, read without the app's engine."""
    raw = create_engine(url, poolclass=NullPool)
    with raw.connect() as conn:
        rows = pd.read_sql(sa.text(f"SELECT * FROM {table} ORDER BY {order}"), conn)
    raw.dispose()
    return rows


def round_trip_keeps_rows(url: str, revision, table: str, order: str, new: list[str]) -> None:
    """Up to `revision` (a module), down to its parent (the `new` columns gone) and up to head: the
    table's rows are the same throughout and the new columns NULL."""
    before = table_rows(url, table, order)
    cfg = alembic_config(url)
    command.upgrade(cfg, revision.revision)
    command.downgrade(cfg, revision.down_revision)
    raw = create_engine(url, poolclass=NullPool)
    assert not set(new) & {c["name"] for c in inspect(raw).get_columns(table)}
    raw.dispose()
    pd.testing.assert_frame_equal(table_rows(url, table, order), before)
    command.upgrade(cfg, "head")
    after = table_rows(url, table, order)
    pd.testing.assert_frame_equal(after[before.columns], before)
    assert after[new].isna().all().all()
