"""What happened since a time (the morning view: `looplab status --since`, `looplab alerts`, the Queue
page) and the health events of runs (markers on the curves): readers of what the health rules
(orchestrator/health.py) and the alert outbox (orchestrator/alerts.py) stored.
"""

from __future__ import annotations

import os
import time
from typing import Any
from urllib.parse import quote

import sqlalchemy as sa

from looplab.model.errors import ConfigError
from looplab.orchestrator.alerts import DELIVERED
from looplab.orchestrator.health import Level, Rule
from looplab.orchestrator.states import JobStatus


def parse_since(text: str, now: float | None = None) -> float:
    """A time as epoch seconds from what a person types: a duration back from now ("90m", "8h", "2d",
    "45s"), a clock time today ("07:30"; yesterday's when that is still to come) or an ISO date-time
    ("2026-12-03 18:00"); a ConfigError names what is accepted."""
    import datetime as dt

    now = time.time() if now is None else now
    t = str(text).strip()
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    try:
        if t and t[-1] in units:
            return now - float(t[:-1]) * units[t[-1]]
        if len(t) in (4, 5) and ":" in t:
            hh, mm = (int(x) for x in t.split(":"))
            day = dt.datetime.fromtimestamp(now).replace(hour=hh, minute=mm, second=0, microsecond=0)
            at = day.timestamp()
            return at - 86400 if at > now else at
        return dt.datetime.fromisoformat(t).timestamp()
    except ValueError:
        raise ConfigError(
            f"since: cannot read {text!r}; accepted: a duration back from now (90m, 8h, 2d), a clock time "
            "today (07:30) or an ISO date-time (2026-12-03 18:00)"
        ) from None


DASHBOARD_ENV = "LOOPLAB_DASHBOARD_URL"  # where people open the dashboard, for the links of the CLI
DEFAULT_DASHBOARD = "http://127.0.0.1:8501"  # `looplab dashboard`'s own address
LINK = "run"  # the morning view's column of links to each job's run on the dashboard


def run_link(job: int, base: str | None = None, db: str | None = None) -> str:
    """The dashboard's Runs page opened on job `job` alone (`?job=`, dashboard/ui.py `linked_jobs`):
    under `base` (default $LOOPLAB_DASHBOARD_URL, else `looplab dashboard`'s address), with the
    database `db` when the page that links was opened on one (`?db=`)."""
    base = (base or os.environ.get(DASHBOARD_ENV) or DEFAULT_DASHBOARD).rstrip("/")
    return f"{base}/runs?job={int(job)}" + (f"&db={quote(db, safe='')}" if db else "")


def with_links(seen: dict[str, Any], base: str | None = None, db: str | None = None) -> dict[str, Any]:
    """`happened_since`'s frames with a `run` column: each job's link (`run_link`), none for a message
    about no job."""
    import pandas as pd

    for name in ("finished", "health", "alerts"):
        df = seen[name]
        df[LINK] = [None if pd.isna(j) else run_link(j, base, db) for j in df["job"].astype(object)]
    return seen


def happened_since(eng: Any, since: float) -> dict[str, Any]:
    """The morning view: what happened since `since` (epoch seconds), as DataFrames `finished` (jobs that
    succeeded or failed), `health` (findings) and `alerts` (messages with their delivery), and `counts`
    (finished, failed, stalled, warned, alerts delivered and pending)."""
    import pandas as pd

    finished = pd.read_sql(
        sa.text(
            "SELECT j.id AS job, j.kind, g.name AS grid, j.recipe, j.status, j.attempts, j.finished_at, "
            "j.error FROM jobs j LEFT JOIN grids g ON g.id = j.grid_id "
            "WHERE j.finished_at >= :since AND j.status IN (:ended_ok, :ended_failed) ORDER BY j.finished_at"
        ),
        eng,
        params={"since": since, "ended_ok": str(JobStatus.SUCCEEDED), "ended_failed": str(JobStatus.FAILED)},
    )
    finished["error"] = finished["error"].map(
        lambda e: e.strip().splitlines()[0] if isinstance(e, str) else ""
    )
    health = pd.read_sql(
        sa.text(
            "SELECT job_id AS job, attempt, step, rule, level, figure, message, ts AS seen_at FROM health_events "
            "WHERE ts >= :since ORDER BY ts"
        ),
        eng,
        params={"since": since},
    )
    sent = pd.read_sql(
        sa.text(
            "SELECT msg_id, channel, topic, job_id AS job, subject, repeats, status, tries, last_error, "
            "created_at, delivered_at FROM alert_outbox WHERE created_at >= :since "
            "ORDER BY CASE WHEN status = :delivered THEN 1 ELSE 0 END, created_at"
        ),
        eng,
        params={"since": since, "delivered": DELIVERED},
    )
    # what a person asks of an alert: did it go (and when), or why not yet; a delivered one's earlier
    # failures are history, not its state; pending ones come first
    sent["delivery"] = [
        f"delivered after {t} tr{'y' if t == 1 else 'ies'}"
        if s == DELIVERED
        else f"pending after {t} tr{'y' if t == 1 else 'ies'}" + (f": {e}" if e else "")
        for s, t, e in zip(sent["status"], sent["tries"], sent["last_error"])
    ]
    sent = sent.drop(columns=["last_error", "tries"])
    for df in (finished, health, sent):  # ids as integers (a message about no job has none)
        df["job"] = df["job"].astype("Int64")
    counts = {
        str(JobStatus.SUCCEEDED): int((finished["status"] == JobStatus.SUCCEEDED).sum()),
        str(JobStatus.FAILED): int((finished["status"] == JobStatus.FAILED).sum()),
        "stalled": int(health.loc[health["rule"] == str(Rule.STALL), "job"].nunique()),
        "warned": int(health.loc[health["level"] == str(Level.WARNING), "job"].nunique()),
        "alerts delivered": int((sent["status"] == DELIVERED).sum()),
        "alerts pending": int((sent["status"] != DELIVERED).sum()),
    }
    return {"finished": finished, "health": health, "alerts": sent, "counts": counts}


def events_frame(eng: Any, job_ids: list[int] | tuple[int, ...]) -> Any:
    """The health events of `job_ids` (a DataFrame: job_id, attempt, step, rule, level, key, figure,
    message, ts), for markers on the curves."""
    import pandas as pd

    cols = ["job_id", "attempt", "step", "rule", "level", "key", "figure", "message", "ts"]
    if not job_ids:
        return pd.DataFrame(columns=cols)
    stmt = sa.text(
        f"SELECT {', '.join(cols)} FROM health_events WHERE job_id IN :ids ORDER BY ts"
    ).bindparams(sa.bindparam("ids", expanding=True))
    return pd.read_sql(stmt, eng, params={"ids": [int(i) for i in job_ids]})
