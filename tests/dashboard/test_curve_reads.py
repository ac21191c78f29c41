"""The downsampled curve read (`orchestrator.frames.curves`) returns exactly the points of the full read
downsampled by `analysis.curves.downsample` (every 2^L-th point, the first and the last), on both
backends, at every size: curves written through the one writer (appends, a resume that cuts them, a
point stored out of order, a re-reported value, a batch of duplicates) and a long curve bulk-loaded and
indexed by `reindex_curves`; and the levels and counts the writer keeps are those the rule defines."""

from __future__ import annotations

import random

import pandas as pd
import pytest
import sqlalchemy as sa

from looplab.analysis import curves
from looplab.orchestrator import Grid, frames, jobqueue
from looplab.orchestrator.db import dispose_all, engine
from looplab.orchestrator.writer import reindex_curves, write_events
from looplab.workers.reporter import Event, EventKind
from tests.orchestrator import fake_jobs

COLUMNS = ["job_id", "key", "step", "tokens", "wall_s", "value"]
SIZES = (2, 3, 5, 7, 20, 64, 500, 10**6)  # max_points: from the smallest stride to reading everything


@pytest.fixture
def eng(migrated_db_url):
    yield engine(migrated_db_url)
    dispose_all()  # the read-only engines of frames, too


def claimed_jobs(eng, n: int) -> list[int]:
    ids, _ = jobqueue.submit(
        eng, [Grid("c", base={"tokens": 100}, sweep={"seed": list(range(n))})], fake_jobs
    )
    for job_id in ids:
        assert jobqueue.claim(eng, job_id, "driver", "/tmp/c") == 1
    return ids


def metric(key: str, step: int, value: float) -> Event:
    return Event(
        EventKind.METRIC,
        0.0,
        {"key": key, "step": step, "value": value, "tokens": 10 * step, "wall_s": step / 4},
    )


def full_read(eng, job_ids) -> pd.DataFrame:
    with eng.connect() as conn:
        return pd.read_sql(
            sa.text(
                f"SELECT {', '.join(COLUMNS)} FROM metrics WHERE job_id IN :ids ORDER BY job_id, key, step"
            ).bindparams(sa.bindparam("ids", expanding=True)),
            conn,
            params={"ids": list(job_ids)},
        )


def assert_reads_match(eng, url: str, job_ids: list[int], keys: tuple[str, ...]) -> None:
    full = full_read(eng, job_ids)
    full = full[full["key"].isin(keys)]
    for m in SIZES:
        got = frames.curves(url, job_ids, keys, max_points=m)
        want = curves.downsample(full, max_points=m)
        pd.testing.assert_frame_equal(
            got[COLUMNS].reset_index(drop=True),
            want[COLUMNS].reset_index(drop=True),
            check_dtype=False,
            obj=f"max_points={m}",
        )
        per_curve = got.groupby(["job_id", "key"]).size()
        assert (per_curve <= m).all(), m


def assert_levels_as_the_rule_says(eng, job_ids: list[int]) -> None:
    """Each stored point's level is `curve_level` of its position; each curve's latest_metrics row is its
    last point with its count."""
    full = full_read(eng, job_ids)
    with eng.connect() as conn:
        levels = pd.read_sql(sa.text("SELECT job_id, key, step, curve_level FROM metrics"), conn)
        latest = pd.read_sql(sa.text("SELECT job_id, key, step, points FROM latest_metrics"), conn)
    levels = levels.sort_values(["job_id", "key", "step"])
    position = levels.groupby(["job_id", "key"]).cumcount()
    assert levels["curve_level"].tolist() == [curves.curve_level(int(p)) for p in position]
    ends = full.groupby(["job_id", "key"])["step"].agg(["max", "size"]).reset_index()
    ends.columns = ["job_id", "key", "step", "points"]
    got = latest.sort_values(["job_id", "key"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(
        got, ends.sort_values(["job_id", "key"]).reset_index(drop=True), check_dtype=False
    )


@pytest.mark.parametrize(
    ("n", "m", "level"),
    [
        (0, 500, 0),
        (1, 500, 0),
        (500, 500, 0),
        (501, 500, 1),
        (999, 500, 1),
        (1000, 500, 2),
        (300_000, 500, 10),
        (9, 2, 3),
    ],
)
def test_stride_level_is_the_smallest_power_of_two_that_fits(n, m, level):
    assert curves.stride_level(n, m) == level
    kept = (n - 1) // 2**level + 1 + ((n - 1) % 2**level != 0) if n else 0
    assert kept <= m


def test_curve_level_counts_trailing_zero_bits():
    assert [curves.curve_level(p) for p in range(9)] == [curves.CURVE_LEVEL_TOP, 0, 1, 0, 2, 0, 1, 0, 3]
    assert curves.curve_level(3 * 2**20) == 20 and curves.curve_level(2**45) == curves.CURVE_LEVEL_TOP


def test_curves_written_by_the_writer_read_as_the_full_read_downsampled(eng, migrated_db_url):
    a, b = claimed_jobs(eng, 2)
    rng = random.Random(0)
    for start in range(1, 1201, 150):  # batches of 150 steps; b reports val_loss every 7th step
        write_events(
            eng,
            [
                (a, 1, [metric("train_loss", s, rng.random()) for s in range(start, start + 150)]),
                (
                    b,
                    1,
                    [
                        metric(k, s, rng.random())
                        for s in range(start, start + 150)
                        for k in ("train_loss", "val_loss")
                        if k == "train_loss" or s % 7 == 0
                    ],
                ),
            ],
        )
    assert_levels_as_the_rule_says(eng, [a, b])
    assert_reads_match(eng, migrated_db_url, [a, b], ("train_loss", "val_loss"))

    # a resume at step 700 cuts a's curve, whose points after it come again (and some more)
    write_events(
        eng,
        [
            (
                a,
                1,
                [
                    Event(EventKind.RESUMED, 0.0, {"step": 700}),
                    *[metric("train_loss", s, -rng.random()) for s in range(701, 1000)],
                ],
            )
        ],
    )
    # b: a point stored out of order (before the last: positions shift), a re-reported value, and a
    # batch that reports one step twice (the last report wins)
    write_events(
        eng,
        [
            (
                b,
                1,
                [
                    metric("val_loss", 3, 9.0),
                    metric("train_loss", 1200, 7.0),
                    metric("train_loss", 1201, 1.0),
                    metric("train_loss", 1201, 2.0),
                ],
            )
        ],
    )
    assert_levels_as_the_rule_says(eng, [a, b])
    assert_reads_match(eng, migrated_db_url, [a, b], ("train_loss", "val_loss"))
    last = frames.curves(migrated_db_url, [a, b], ("train_loss",), max_points=5).groupby("job_id").last()
    assert last.loc[a, "step"] == 999 and (last.loc[b, "step"], last.loc[b, "value"]) == (1201, 2.0)


@pytest.mark.slow  # docs/testing.md: 300,000 points loaded per backend
def test_a_long_bulk_loaded_curve_reads_as_the_full_read_downsampled(eng, migrated_db_url):
    """100,001 points (strides up to 2^15 at 5 points), loaded without the writer and indexed by
    reindex_curves, then one live point appended by the writer: every size reads the rule's points and
    the live curve ends at its newest point."""
    (job_id,) = claimed_jobs(eng, 1)
    rows = [
        {"job_id": job_id, "key": "train_loss", "step": 3 * s, "tokens": s, "wall_s": s / 8, "value": s / 7}
        for s in range(100_001)
    ]
    with eng.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO metrics (job_id, key, step, tokens, wall_s, value) "
                "VALUES (:job_id, :key, :step, :tokens, :wall_s, :value)"
            ),
            rows,
        )
    reindex_curves(eng)
    assert_levels_as_the_rule_says(eng, [job_id])
    assert_reads_match(eng, migrated_db_url, [job_id], ("train_loss",))
    write_events(eng, [(job_id, 1, [metric("train_loss", 300_001, 0.5)])])
    assert_levels_as_the_rule_says(eng, [job_id])
    assert_reads_match(eng, migrated_db_url, [job_id], ("train_loss",))
    got = frames.curves(migrated_db_url, [job_id], ("train_loss",), max_points=500)
    assert got["step"].iloc[-1] == 300_001 and got["step"].iloc[0] == 0 and len(got) <= 500
