"""Plan: the planner's estimate of each finished job (stored at submission) against its actual wall
time, so the planner's error is visible per job, per estimate source and per kind."""

from __future__ import annotations

import altair as alt
import streamlit as st

from looplab.dashboard import ui
from looplab.orchestrator import frames

st.title("Plan")
st.caption(
    "Planned: the estimate `looplab submit` stored (`looplab plan` shows the same before submitting); "
    "actual: the wall time of the job's attempts. ratio = actual / planned. Sources: `measured` "
    "(throughput of the same variant in this database), `flop_model` (FLOPs over this machine's "
    "calibrated FLOP/s), `flop_fit` (the same times this machine's factor for the kind, learnt from "
    "finished jobs of other variants), `finished` (finished jobs of the same kind), `budget` (a time budget). "
    "`concurrent_jobs`: other jobs beside it (contention slows a job down)."
)
url = ui.url()
df = frames.planned_vs_actual(frames.engine(url))
grids = ui.selected("grid")
if not df.empty and grids:
    df = df[df["grid"].isin(grids)]
if df.empty:
    st.info(
        "No finished job with a plan estimate yet: jobs submitted with a calibration cached "
        "(run `looplab plan` once) or with finished runs of their variant get one."
    )
    st.stop()

summary = (
    df.assign(abs_error=(df["ratio"] - 1).abs())
    .groupby(["kind", "source"], dropna=False)
    .agg(
        jobs=("job_id", "size"),
        median_ratio=("ratio", "median"),
        median_abs_error=("abs_error", "median"),
        planned_s=("planned_seconds", "sum"),
        actual_s=("actual_seconds", "sum"),
    )
    .reset_index()
)
ui.table(summary, precision=2, key="plan_summary")
chart = (
    alt.Chart(df)
    .mark_circle(size=70)
    .encode(
        x=alt.X("planned_seconds:Q", title="planned (s)", scale=alt.Scale(type="log")),
        y=alt.Y("actual_seconds:Q", title="actual (s)", scale=alt.Scale(type="log")),
        color=ui.color("source", title="source"),
        shape=alt.Shape("kind:N"),
        tooltip=["job_id", "kind", "variant_label", "planned_seconds", "actual_seconds", "ratio", "source"],
    )
    .properties(height=360)
)
diagonal = (
    alt.Chart(df)
    .mark_line(color="gray", strokeDash=[4, 4])
    .encode(x="planned_seconds:Q", y="planned_seconds:Q")
)
st.altair_chart(chart + diagonal, width="stretch")
ui.table(df, precision=2, key="plan_jobs")
