"""Revision 0021 on a database made before it: its adaptive decode rows read back unchanged (table, view
and frame) with no fixed depth at equal loss, and the revision round-trips keeping them."""

from __future__ import annotations

import importlib

import pandas as pd
import sqlalchemy as sa
from alembic import command
from sqlalchemy import create_engine
from sqlalchemy.pool import NullPool

from looplab.orchestrator import frames
from looplab.orchestrator.db import alembic_config, engine
from tests.db.added_columns import round_trip_keeps_rows, table_rows

REVISION = importlib.import_module("looplab.migrations.versions.0021_equal_loss_decode")
NEW = ["equal_loss_rounds", "equal_loss_ms_per_token"]
JOB = (
    "INSERT INTO jobs (id, kind, config, config_hash, status, recipe, size, seed, loops, priority, attempts, "
    "max_attempts, created_at) VALUES (:id, :kind, '{}', :h, 'succeeded', :recipe, 'tiny', 0, 4, 0, 1, 3, 0)"
)
DECODE = (
    "INSERT INTO adaptive_decodes (job_id, config, batch_size, mode, context_len, ms_per_token, "
    "fixed_ms_per_token, speedup, mean_exit_round, mean_step_rounds) VALUES "
    "(2, 'state<0.1 | per_round', 1, 'masked', 32, 2.0, 3.0, 1.5, 2.5, 4.0), "
    "(2, 'fixed | per_round', 1, 'masked', 32, 3.0, 3.0, 1.0, 4.0, 4.0)"
)


def _old_database(url: str) -> None:
    """A train run (job 1) and its adaptive job (job 2) with two decode rows, at 0021's parent."""
    command.upgrade(alembic_config(url), REVISION.down_revision)
    raw = create_engine(url, poolclass=NullPool)
    with raw.begin() as conn:
        conn.execute(
            sa.text(JOB),
            [dict(id=1, kind="train", h="a", recipe="lean"), dict(id=2, kind="adaptive", h="b", recipe=None)],
        )
        conn.execute(sa.text("INSERT INTO job_deps (job_id, depends_on) VALUES (2, 1)"))
        conn.execute(sa.text(DECODE))
    raw.dispose()


def _rows(url: str, what: str = "adaptive_decodes") -> pd.DataFrame:
    return table_rows(url, what, "config")


def test_stored_decode_rows_read_back_unchanged_with_no_equal_loss_depth(db_url):
    _old_database(db_url)
    before = _rows(db_url)
    assert not set(NEW) & set(before.columns)
    engine(db_url)  # upgrades to head (and re-creates the views)
    after = _rows(db_url)
    pd.testing.assert_frame_equal(after[before.columns], before)
    assert after[NEW].isna().all().all()
    view = _rows(db_url, "adaptive_decode")
    assert view["ms_per_token"].tolist() == [3.0, 2.0] and view[NEW].isna().all().all()
    assert set(view["train_job_id"]) == {1}
    got = frames.adaptive_decodes(db_url)
    assert sorted(got["speedup"]) == [1.0, 1.5] and got[NEW].isna().all().all()


def test_0021_round_trips_and_keeps_the_rows(db_url):
    _old_database(db_url)
    round_trip_keeps_rows(db_url, REVISION, "adaptive_decodes", "config", NEW)
