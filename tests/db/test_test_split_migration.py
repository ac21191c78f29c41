"""A database made before revision 0020: its depth sweeps read back unchanged with no test loss, the
revision round-trips, and a sweep spec from before `test_split` keeps its hash."""

from __future__ import annotations

import importlib

import pandas as pd
import sqlalchemy as sa
from sqlalchemy import create_engine
from sqlalchemy.pool import NullPool

from looplab.orchestrator import frames
from looplab.orchestrator.canonical import sha256
from looplab.orchestrator.db import engine
from looplab.workers import jobs
from looplab.workers.evaluate import depth_sweep
from tests.db.added_columns import round_trip_keeps_rows, table_rows
from tests.db.test_metrics_migration import OLD_SPEC, sweep_at

REVISION = importlib.import_module("looplab.migrations.versions.0020_test_split")
NEW = ["test_loss", "test_bpb"]


def _old_database(url: str) -> None:
    """A train run (job 1) and its depth sweep (job 2) at 0020's parent, with two depth rows."""
    sweep_at(
        url,
        REVISION.down_revision,
        "INSERT INTO depth_evals (job_id, loops, val_loss, val_bpb, far_copy_loss, near_loss, "
        "far_share, far_distance, far_definition, bf16_round) VALUES "
        "(2, 1, 3.5, 1.25, 4.0, 3.25, 0.0625, 500, 2, NULL), (2, 4, 3.0, 1.0, NULL, NULL, 0, 500, 2, 3)",
    ).dispose()


def _depth_rows(url: str) -> pd.DataFrame:
    return table_rows(url, "depth_evals", "loops")


def test_stored_sweeps_read_back_unchanged_with_no_test_loss(db_url):
    _old_database(db_url)
    before = _depth_rows(db_url)
    assert not set(NEW) & set(before.columns)
    engine(db_url)  # upgrades to head
    after = _depth_rows(db_url)
    pd.testing.assert_frame_equal(after[before.columns], before)
    assert after[NEW].isna().all().all()
    raw = create_engine(db_url, poolclass=NullPool)
    with raw.connect() as conn:
        view = pd.read_sql(
            sa.text("SELECT loops, val_loss, test_loss, test_bpb FROM depth ORDER BY loops"), conn
        )
    raw.dispose()
    assert view["val_loss"].tolist() == [3.5, 3.0] and view[NEW].isna().all().all()
    depth = frames.depth(db_url)
    assert depth["val_loss"].tolist() == [3.5, 3.0] and depth[NEW].isna().all().all()


def test_0020_round_trips_and_keeps_the_rows(db_url):
    _old_database(db_url)
    round_trip_keeps_rows(db_url, REVISION, "depth_evals", "loops", NEW)


def test_a_sweep_spec_from_before_test_split_keeps_its_hash():
    """`test_split` at its default (off) is left out of the canonical spec; on, it is another job."""
    old = jobs.identity("depth_sweep", OLD_SPEC)
    again = depth_sweep.Spec.from_dict(OLD_SPEC).to_dict()
    assert "test_split" not in again and sha256(jobs.identity("depth_sweep", again)) == sha256(old)
    on = depth_sweep.Spec.from_dict({**OLD_SPEC, "test_split": True}).to_dict()
    assert on["test_split"] is True and sha256(jobs.identity("depth_sweep", on)) != sha256(old)
