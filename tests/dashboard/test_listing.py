"""looplab.dashboard.listing: the Queue page's numbers (jobs per state, running jobs, recent failures) on a
hand-built job listing."""

from __future__ import annotations

import pandas as pd

from looplab.dashboard import listing

NAN = float("nan")


def frame(rows, **kw):
    return pd.DataFrame(rows, **kw)


def test_queue_summaries():
    jobs = frame(
        [
            dict(
                job_id=1,
                kind="train",
                recipe="a",
                size="t",
                seed=0,
                status="running",
                progress_done=25.0,
                progress_total=100.0,
                eta_s=125.0,
                heartbeat_at=990.0,
                finished_at=None,
                error=None,
            ),
            dict(
                job_id=2,
                kind="train",
                recipe="a",
                size="t",
                seed=1,
                status="failed",
                progress_done=None,
                progress_total=None,
                eta_s=None,
                heartbeat_at=None,
                finished_at=500.0,
                error="Traceback (most recent call last):\n  ...\nValueError: boom",
            ),
            dict(
                job_id=3,
                kind="depth_sweep",
                recipe=None,
                size=None,
                seed=None,
                status="queued",
                progress_done=None,
                progress_total=None,
                eta_s=None,
                heartbeat_at=None,
                finished_at=None,
                error=None,
            ),
        ]
    )
    c = listing.status_counts(jobs).set_index("status")["jobs"]
    assert (c["running"], c["failed"], c["queued"], c["succeeded"]) == (1, 1, 1, 0)
    latest = frame([{"job_id": 1, "key": "tokens_per_s", "value": 1234.0}])
    r = listing.running_jobs(jobs, latest, now=1000.0).iloc[0]
    assert (r["progress"], r["tokens_per_s"], r["eta"], r["heartbeat_age_s"]) == (
        0.25,
        1234.0,
        "2m 05s",
        10.0,
    )
    f = listing.recent_failures(jobs)
    assert list(f["job_id"]) == [2] and f.loc[0, "error_summary"] == "ValueError: boom"


def test_a_held_job_is_counted_and_shown_held_not_failed():
    """A job a health rule held for a person is failed in the database; the Queue page counts it apart,
    as `looplab status` does (orchestrator/health.py `Finding.error` opens its error so)."""
    from looplab.orchestrator.health import HOLD, Finding, Level, Rule

    at_chance = Finding(Rule.AT_CHANCE, Level.ERROR, 40, "train_loss", 5.545, "train loss at chance", HOLD)
    held = at_chance.error(job_id=1)
    jobs = pd.DataFrame(
        {
            "job_id": [1, 2, 3],
            "status": ["failed", "failed", "succeeded"],
            "error": [held, "ValueError: x", None],
        }
    )
    c = listing.status_counts(jobs).set_index("status")["jobs"]
    assert (c["held"], c["failed"], c["succeeded"]) == (1, 1, 1)
    assert list(listing.status_counts(jobs)["status"][:5]) == [
        "queued",
        "running",
        "succeeded",
        "failed",
        "held",
    ]
    assert list(listing.shown_status(jobs)) == ["held", "failed", "succeeded"]


def test_format_duration():
    assert [listing.format_duration(x) for x in (None, NAN, 42, 185, 3725)] == [
        "—",
        "—",
        "42s",
        "3m 05s",
        "1h 02m",
    ]
