"""Queue: the morning view (what finished, failed, stalled or warned since a chosen time, and the alerts
sent with their delivery: orchestrator.health_view.happened_since, as `looplab status --since` prints it);
what is queued, running, done and failed; the disk the jobs' artifacts take; progress of each running
job; recent errors.

Reads only the jobs table and `latest_metrics` (never the metric history), so it stays cheap enough
to refresh every few seconds; the disk line walks the jobs' artifact dirs, at most once a minute
(`DISK_TTL_S`).
"""

from __future__ import annotations

import time

import streamlit as st

from looplab.analysis.variants import MISSING, present
from looplab.dashboard import listing, ui
from looplab.orchestrator import frames, owners, retention
from looplab.orchestrator.errors import USER_ERRORS
from looplab.orchestrator.health_view import DEFAULT_DASHBOARD, happened_since, parse_since, with_links
from looplab.orchestrator.states import JobStatus

REFRESH_S = 5
DISK_TTL_S = 60  # the artifact dirs are walked at most once a minute (a study's are thousands of files)

st.title("Queue")
url = ui.url()
live = st.toggle(f"Auto-refresh every {REFRESH_S} s", value=True, key="queue_autorefresh")


@st.cache_data(ttl=DISK_TTL_S, show_spinner=False)
def disk(url: str, job_ids: tuple[int, ...]) -> retention.DiskInUse:
    return retention.disk_in_use(frames.engine(url), list(job_ids))


def disk_line(used: retention.DiskInUse) -> str:
    """One line: the artifacts' bytes, and what `looplab gc` would free of them."""
    if not used.dirs:
        return "Disk: no artifact dir yet"
    line = f"Disk: {retention.fmt_bytes(used.total)} in {used.dirs} artifact dir(s)"
    if used.reclaimable:
        line += f"; `looplab gc` would free {retention.fmt_bytes(used.reclaimable)} (resume state of succeeded jobs)"
    return line


@st.cache_data(ttl=REFRESH_S, show_spinner=False)
def since(url: str, at: float, root: str, db: str | None) -> dict:
    return with_links(happened_since(frames.engine(url), at), root, db)


def dashboard_root() -> str:
    """This dashboard's address as the browser sees it (its links stay on it), without the page."""
    here = str(st.context.url or "").split("?")[0].rstrip("/")
    for page in ("/queue", "/home"):
        here = here.removesuffix(page)
    return here or DEFAULT_DASHBOARD


def morning_view() -> None:
    """What happened since a time the person chooses (default: the last 12 hours)."""
    st.subheader("Since")
    asked = st.text_input("What happened since (8h, 90m, 07:30, 2026-12-03 18:00)", value="12h", key="since")
    try:
        at = parse_since(asked)
    except USER_ERRORS as e:
        st.error(str(e))
        return
    # to the minute: the cache holds one view a minute; each job links to its run, on this database
    seen = since(url, float(int(at // 60) * 60), dashboard_root(), st.query_params.get("db"))
    labels = {JobStatus.SUCCEEDED: "finished", JobStatus.FAILED: "failed since"}
    counts = {labels.get(k, k): v for k, v in seen["counts"].items()}
    for col, (label, n) in zip(st.columns(len(counts)), counts.items()):
        col.metric(label, n)
    st.caption(
        f"since {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(at))} (times in UTC); each job's `run` "
        "link opens the Runs page on it"
    )
    pending = seen["counts"]["alerts pending"]
    if pending:  # what has not reached a person yet comes first, in a colour that stands out
        st.error(f"{pending} alert(s) not delivered yet: `looplab alerts --send` delivers them now")
    for name, title in (("alerts", "Alerts"), ("finished", "Finished"), ("health", "Health events")):
        df = seen[name]
        if not df.empty:
            st.markdown(f"**{title}** ({len(df)})")
            ui.table(df, precision=3, key=f"since_{name}")


@st.fragment(run_every=REFRESH_S if live else None)
def queue_view() -> None:
    jobs = ui.jobs(url)
    grids = ui.selected("grid")
    if grids:
        jobs = jobs[jobs["grid"].isin(grids)]
    if not ui.require_jobs(jobs):
        return
    counts = listing.status_counts(jobs)
    for col, row in zip(st.columns(len(counts)), counts.itertuples(index=False)):
        col.metric(row.status, row.jobs)
    st.caption(disk_line(disk(url, tuple(int(i) for i in jobs["job_id"]))))

    st.subheader("Running")
    running = listing.running_jobs(
        jobs, ui.latest(url, tuple(jobs.loc[jobs["status"] == JobStatus.RUNNING, "job_id"]))
    )
    if running.empty:
        st.caption("no job is running")
    for r in running.itertuples(index=False):
        who = " · ".join(str(x) for x in (r.kind, r.recipe, r.size) if isinstance(x, str))
        seed = f" · seed {int(r.seed)}" if present(r.seed) else ""
        frac = float(r.progress) if present(r.progress) else 0.0
        tps = f"{r.tokens_per_s:,.0f} tok/s" if present(r.tokens_per_s) else "— tok/s"
        st.progress(frac, text=f"#{r.job_id} {who}{seed} — {frac:.0%} · {tps} · ETA {r.eta}")
    if not running.empty:
        ui.table(running, precision=2, key="running_table")

    st.subheader("Recent failures")
    failures = listing.recent_failures(jobs)
    if failures.empty:
        st.caption("no failed job")
    else:
        ui.table(failures.drop(columns=["error"]), key="failures_table")
        for r in failures.itertuples(index=False):
            with st.expander(f"#{r.job_id} {r.kind} {r.recipe or ''}: {r.error_summary}"):
                st.code(r.error or MISSING, language="text")

    st.subheader("All jobs")
    show = jobs.assign(status=listing.shown_status(jobs))  # a job a hold stopped reads `held`
    show = show.drop(columns=["error", "grid_id"]).sort_values("job_id", ascending=False)
    ui.table(show, precision=1, key="jobs_table", height=320)

    st.subheader("Audit trail")
    trail = owners.audit_frame(frames.engine(url), job_ids=[int(i) for i in jobs["job_id"]], limit=200)
    if trail.empty:
        st.caption("nothing recorded yet")
    else:
        st.caption("who submitted, cancelled, retried, re-prioritised or preempted each job (newest last)")
        ui.table(trail.drop(columns=["id"]).rename(columns={"at": "done_at"}), key="audit_table", height=240)
    st.caption(f"updated {time.strftime('%H:%M:%S')}")


morning_view()
queue_view()
