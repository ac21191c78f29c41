"""A database made before revision 0018: its depth sweeps read back unchanged, their far-copy losses
labelled with the window mask they were measured with, and their job specs keep their hashes."""

from __future__ import annotations

import importlib

import pandas as pd
import sqlalchemy as sa
from alembic import command
from sqlalchemy import Engine, create_engine
from sqlalchemy.pool import NullPool

from looplab.orchestrator import frames
from looplab.orchestrator.canonical import sha256
from looplab.orchestrator.db import alembic_config, engine
from looplab.workers import jobs
from looplab.workers.evaluate import depth_sweep

REVISION = importlib.import_module("looplab.migrations.versions.0018_metrics")
OLD_COLUMNS = ["job_id", "loops", "val_loss", "val_bpb", "far_copy_loss", "near_loss"]
# a depth sweep's canonical spec as stored before `far_distance` existed
OLD_SPEC = {
    "checkpoint": None,
    "loops": [1, 4],
    "eval_tokens": 1024,
    "batch_size": 8,
    "micro_batch_size": None,
    "h0_seed": 1234,
    "split_far_copy": True,
    "interaction_loops": [4, 8],
    "interaction_tokens": 4096,
    "device": "auto",
}


def sweep_at(url: str, revision: str, depth_rows: str) -> Engine:
    """A database at `revision` holding a train run (job 1) and its depth sweep (job 2) with the
    `depth_evals` rows that INSERT statement `depth_rows` adds; the raw engine, for more rows."""
    command.upgrade(alembic_config(url), revision)
    raw = create_engine(url, poolclass=NullPool)
    job = (
        "INSERT INTO jobs (id, kind, config, config_hash, status, priority, attempts, max_attempts, "
        "created_at, recipe, size, seed) VALUES (:id, :kind, '{}', :hash, 'succeeded', 0, 1, 3, 0, "
        "'lean', 'tiny', 0)"
    )
    with raw.begin() as conn:
        conn.execute(
            sa.text(job),
            [{"id": 1, "kind": "train", "hash": "a"}, {"id": 2, "kind": "depth_sweep", "hash": "b"}],
        )
        conn.execute(sa.text("INSERT INTO job_deps (job_id, depends_on) VALUES (2, 1)"))
        conn.execute(sa.text(depth_rows))
    return raw


def _old_database(url: str) -> None:
    """A train run (job 1) and its depth sweep (job 2) at revision 0018's parent: one loop count with the
    old far-copy split, one without a split, and their round geometry."""
    raw = sweep_at(
        url,
        REVISION.down_revision,
        "INSERT INTO depth_evals (job_id, loops, val_loss, val_bpb, far_copy_loss, near_loss) "
        "VALUES (2, 1, 3.5, 1.25, 4.0, 3.25), (2, 4, 3.0, 1.0, NULL, NULL)",
    )
    with raw.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO round_deltas (job_id, loops, round, rel_change, angle, state_var) "
                "VALUES (2, 4, 1, 0.5, 0.25, 2.0), (2, 4, 2, 0.125, 0.0625, 2.5)"
            )
        )
    raw.dispose()


def test_old_sweeps_read_back_unchanged_and_labelled_with_their_mask(db_url):
    _old_database(db_url)
    raw = create_engine(db_url, poolclass=NullPool)
    with raw.connect() as conn:
        before = pd.read_sql(sa.text("SELECT * FROM depth_evals ORDER BY loops"), conn)
        deltas_before = pd.read_sql(sa.text("SELECT * FROM round_deltas ORDER BY round"), conn)
    engine(db_url)  # upgrades to head
    with raw.connect() as conn:
        after = pd.read_sql(sa.text("SELECT * FROM depth_evals ORDER BY loops"), conn)
        deltas_after = pd.read_sql(sa.text("SELECT * FROM round_deltas ORDER BY round"), conn)
        view = pd.read_sql(sa.text("SELECT loops, far_definition, far_mask FROM depth ORDER BY loops"), conn)
    raw.dispose()
    pd.testing.assert_frame_equal(after[OLD_COLUMNS], before[OLD_COLUMNS])
    pd.testing.assert_frame_equal(deltas_after[deltas_before.columns], deltas_before)
    # the split measured before is definition 1 (the window mask); a row without a split has none
    assert after["far_definition"].tolist()[0] == 1 and pd.isna(after["far_definition"].tolist()[1])
    assert after[["far_share", "far_distance", "bf16_round"]].isna().all().all()
    assert deltas_after[["change_ratio", "bf16_resolution"]].isna().all().all()
    assert view["far_mask"].tolist()[0].startswith("v1: also occurs beyond the attention window")
    assert pd.isna(view["far_mask"].tolist()[1])
    depth = frames.depth(db_url)
    assert depth["far_copy_loss"].tolist()[0] == 4.0 and depth["far_definition"].tolist()[0] == 1


def test_a_sweep_spec_from_before_far_distance_keeps_its_hash():
    """The new field at its default is left out of the canonical spec, so the identity (what the config
    hash is computed from) of a stored spec is what it was; another distance is another job."""
    old = jobs.identity("depth_sweep", OLD_SPEC)
    again = jobs.identity("depth_sweep", depth_sweep.Spec.from_dict(OLD_SPEC).to_dict())
    assert sha256(again) == sha256(old)
    other = depth_sweep.Spec.from_dict({**OLD_SPEC, "far_distance": 64}).to_dict()
    assert sha256(jobs.identity("depth_sweep", other)) != sha256(old)
