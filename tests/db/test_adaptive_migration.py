"""Revision 0013_adaptive on SQLite and PostgreSQL: from the previous head with data kept, the adaptive
tables hold what the job reports (an infinite threshold and bucket bound included) and the views label
it with the trained model; a downgrade removes only them. (Every revision's generic checks — no drift
against the ORM, every table's rows kept — are tests/db/test_migrations.py's.)"""

from __future__ import annotations

import math

import sqlalchemy as sa
from alembic import command
from sqlalchemy import create_engine, inspect
from sqlalchemy.pool import NullPool

from looplab.orchestrator.db import alembic_config

PREVIOUS = "0012_imports"
TABLES = {"adaptive_evals", "adaptive_exit_rounds", "adaptive_task_scores", "adaptive_decodes"}
JOB = (
    "INSERT INTO jobs (id, kind, config, config_hash, status, recipe, size, seed, loops, priority, attempts, "
    "max_attempts, created_at) VALUES (:id, :kind, '{}', :h, 'succeeded', :recipe, 'tiny', 0, 4, 0, 1, 3, 0)"
)


def test_upgrade_from_the_previous_head_keeps_data_and_the_views_label_the_cells(db_url):
    cfg = alembic_config(db_url)
    command.upgrade(cfg, PREVIOUS)
    raw = create_engine(db_url, poolclass=NullPool)
    try:
        with raw.begin() as conn:
            conn.execute(
                sa.text(JOB),
                [
                    dict(id=1, kind="train", h="a", recipe="lean"),
                    dict(id=2, kind="adaptive", h="b", recipe=None),
                ],
            )
            conn.execute(sa.text("INSERT INTO job_deps (job_id, depends_on) VALUES (2, 1)"))
            conn.execute(sa.text("INSERT INTO depth_evals (job_id, loops, val_loss) VALUES (1, 4, 1.25)"))
        command.upgrade(cfg, "head")
        assert TABLES <= set(inspect(raw).get_table_names())
        with raw.begin() as conn:
            assert conn.execute(sa.text("SELECT loops, val_loss FROM depth_evals")).all() == [(4, 1.25)]
            conn.execute(
                sa.text(
                    "INSERT INTO adaptive_evals (job_id, config, rule, threshold, kv_strategy, kv_m, min_rounds, "
                    "max_rounds, changes_function, val_loss, tokens, mean_rounds) VALUES (2, :config, 'state', "
                    ":t, 'last_m', 2, 2, 4, :changes, 1.3, 4096, 2.0)"
                ),
                dict(config="state<inf | last_m2", t=math.inf, changes=True),
            )
            conn.execute(
                sa.text(
                    "INSERT INTO adaptive_exit_rounds (job_id, config, split, bucket, round, bucket_lo, bucket_hi, "
                    "count) VALUES (2, 'state<inf | last_m2', 'loss', 5, 2, 4.0, :hi, 4096)"
                ),
                dict(hi=math.inf),
            )
        with raw.connect() as conn:
            got = conn.execute(
                sa.text(
                    "SELECT adaptive_job_id, train_job_id, recipe, trained_loops, threshold, "
                    "kv_m, changes_function FROM adaptive"
                )
            ).one()
            assert tuple(got[:4]) == (2, 1, "lean", 4) and math.isinf(got[4]) and got[5] == 2 and bool(got[6])
            hist = conn.execute(
                sa.text("SELECT recipe, split, round, bucket_hi, count FROM exit_rounds")
            ).one()
            assert tuple(hist[:3]) == ("lean", "loss", 2) and math.isinf(hist[3]) and hist[4] == 4096
        command.downgrade(cfg, PREVIOUS)
        names = set(inspect(raw).get_table_names())
        assert not TABLES & names and {"jobs", "depth_evals"} <= names
        with raw.connect() as conn:
            assert conn.execute(sa.text("SELECT COUNT(*) FROM jobs")).scalar() == 2
    finally:
        raw.dispose()
