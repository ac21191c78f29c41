"""Runs: training and validation curves against tokens, wall time or step, grouped by configuration
with a band over seeds (W&B/Aim style), plus the table of runs and their seed aggregates."""

from __future__ import annotations

import altair as alt
import streamlit as st

from dashboard import analysis, data, ui
from orchestrator.states import JobStatus

MAX_RUNS = 60  # curves are read for at most this many runs (the newest of the selection)
X_AXES = {"tokens": "tokens", "wall time (s)": "wall_s", "step": "step"}
GROUP_CHOICES = ["recipe", "size", "budget", "grid", "seed"]

st.title("Runs")
url = ui.url()
all_runs = ui.runs(url)
if not ui.require_jobs(all_runs):
    st.stop()
runs = ui.filter_runs(all_runs)

c1, c2, c3, c4 = st.columns(4)
metric = c1.selectbox("Metric", list(data.CURVE_KEYS), index=1, key="runs_metric")
x_label = c2.selectbox("x axis", list(X_AXES), key="runs_x")
group_by = c3.multiselect("Group by", GROUP_CHOICES, default=["recipe", "size", "budget"], key="runs_group")
band = c4.toggle("Seed band (min–max)", value=True, key="runs_band")
x = X_AXES[x_label]
if x == "wall_s":
    st.caption("Against wall time, each run's learning rate decays over its own budget: a point in the middle "
               "of a longer run is **not decayed** (see Compare → iso-time).")  # fmt: skip

live_or_done = runs[runs["status"].isin([JobStatus.RUNNING, JobStatus.SUCCEEDED])]
shown = live_or_done.sort_values("job_id").tail(MAX_RUNS)
if len(shown) < len(live_or_done):
    st.caption(
        f"curves of the newest {MAX_RUNS} runs of the selection: narrow the sidebar filters to see others"
    )
curves = ui.curves(url, tuple(shown["job_id"]), (metric,))
if curves.empty:
    st.info("no metric points for this selection yet")
else:
    group_by = group_by or ["recipe"]
    cur = curves.merge(shown[["job_id", *[g for g in GROUP_CHOICES if g in shown]]], on="job_id")
    cur["config"] = analysis.join_labels(cur, group_by)
    n_configs = cur["config"].nunique()
    bands = analysis.curve_bands(cur, by=["config"], x=x, bins=max(20, min(200, 5000 // n_configs)))
    base = alt.Chart(bands).encode(x=alt.X(f"{x}:Q", title=x_label), color=alt.Color("config:N", title=None))
    line = base.mark_line().encode(
        y=alt.Y("mean:Q", title=metric, scale=alt.Scale(zero=False)),
        tooltip=[
            "config",
            alt.Tooltip(f"{x}:Q", format=",.0f"),
            alt.Tooltip("mean:Q", format=".4f"),
            "n_seeds",
        ],  # fmt: skip
    )
    chart = (base.mark_area(opacity=0.2).encode(y="min:Q", y2="max:Q") + line) if band else line
    st.altair_chart(chart.properties(height=420).interactive(), width="stretch")

st.subheader("Runs")
cols = ["job_id", "grid", "recipe", "size", "seed", "budget", "status", "tokens", "train_seconds",
        "tokens_per_s", "final_train_loss", "final_val_loss", "loop_mode", "train_loops"]  # fmt: skip
ui.table(runs[cols].sort_values("job_id"), key="runs_table", height=320)

st.subheader("Mean over seeds")
agg = analysis.seed_aggregate(runs, "final_val_loss", by=["grid", "recipe", "size", "budget"])
ui.table(agg.rename(columns={"mean": "final_val_loss (mean)"}), key="runs_agg")
