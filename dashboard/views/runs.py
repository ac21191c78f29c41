"""Runs: training and validation curves against tokens, wall time or step, grouped by configuration
with a band over seeds (W&B/Aim style), the validation loss at several loop counts during training
(train-time depth curves), and the table of runs and their seed aggregates. The raw curves are the
bold lines; a smoothing chosen on the page (an EMA or a window, off by default and for curves shorter
than analysis.smoothing.MIN_POINTS) is drawn light over them and named in the caption, never the
numbers of the tables; the health events of the drawn runs are markers on them (orchestrator/health.py).

Every selected run is drawn: each curve is downsampled (in SQL) so that all of them together stay
within `PLOT_POINTS` points."""

from __future__ import annotations

import altair as alt
import streamlit as st

from looplab.analysis import curves, variants
from looplab.analysis.smoothing import SMOOTHED_OPACITY, SMOOTHING, describe, smooth
from looplab.dashboard import ui
from looplab.orchestrator import frames
from looplab.orchestrator.states import JobStatus

PLOT_POINTS = 60_000  # metric points read for one chart, shared among the selected runs
X_AXES = {"tokens": "tokens", "wall time (s)": "wall_s", "step": "step"}
GROUP_CHOICES = ["variant_label", "recipe", "size", "budget", "grid", "seed", *variants.ARCH_COLUMNS]


def with_superseded(chart, x: str):
    """The segments rewinds superseded (the spiked steps as first trained), faint and dashed over the
    runs' curves: seen, never part of a curve, a band or a table."""
    gone = ui.superseded(url, ids, metric)
    if gone.empty:
        return chart
    gone = gone.assign(
        segment=[f"#{j} rewind {n}" for j, n in zip(gone["job_id"], gone["rewind"], strict=True)]
    )
    faint = (
        alt.Chart(gone)
        .mark_line(opacity=0.35, strokeDash=[4, 3], color="gray")
        .encode(x=f"{x}:Q", y="value:Q", detail="segment:N", tooltip=["segment", "step", "value"])
    )
    return chart + faint


url, _, runs = ui.runs_page("Runs")
# a failed run is drawn when a link asks for it (the morning view's: a run a health rule stopped)
drawn = runs["status"].isin([JobStatus.RUNNING, JobStatus.SUCCEEDED]) | runs["job_id"].isin(
    ui.linked_jobs(quiet=True) or ()
)
shown = runs[drawn].sort_values("job_id")
ids = tuple(int(i) for i in shown["job_id"])
depth_keys = ui.depth_metric_keys(url, ids)
metric_keys = [*frames.CURVE_KEYS, *sorted(set(depth_keys["key"]), key=lambda k: int(k.split("@")[1]))]

# validation loss first; runs that never evaluated (a run stopped early, opened from a link) open on what
# they reported instead of an empty chart
reported = set(ui.reported_keys(url, ids)["key"])
first = next((k for k in ("val_loss", *frames.CURVE_KEYS) if k in reported), "val_loss")
c1, c2, c3, c4, c5 = st.columns(5)
metric = c1.selectbox("Metric", metric_keys, index=metric_keys.index(first), key="runs_metric")
x_label = c2.selectbox("x axis", list(X_AXES), key="runs_x")
groups = [g for g in GROUP_CHOICES if g in runs.columns]
group_by = c3.multiselect(
    "Group by",
    groups,
    default=["variant_label", "size", "budget"],
    key="runs_group",
    format_func=lambda c: variants.ARCH_LABELS.get(c, c),
)
band = c4.toggle("Seed band (min–max)", value=True, key="runs_band")
smoothing = c5.selectbox("Smoothing", list(SMOOTHING), index=0, key="runs_smoothing")  # raw by default
x = X_AXES[x_label]
if x == "wall_s":
    st.caption(
        "Against wall time, each run's learning rate decays over its own budget: a point in the middle "
        "of a longer run is **not decayed** (see Compare → iso-time)."
    )

points = curves.points_per_curve(len(ids), total=PLOT_POINTS, most=frames.MAX_POINTS)
points_read = ui.curves(url, ids, (metric,), points)
if points_read.empty:
    st.info("no metric points for this selection yet")
else:
    group_by = group_by or ["variant_label"]
    # one label per run, then onto its points (labelling every point costs as much as the read)
    labels = shown[["job_id"]].assign(config=curves.join_labels(shown, group_by).to_numpy())
    cur = smooth(points_read.merge(labels, on="job_id"), smoothing)
    n_configs = cur["config"].nunique()
    bins = max(20, min(200, 5000 // n_configs))
    # the raw values are the bold line (and the band, and the tooltip): what a run reached
    bands = curves.curve_bands(cur.assign(value=cur["raw"]), by=["config"], x=x, bins=bins)
    # the whole label in the legend: what tells two variants apart is often at its end
    legend = alt.Legend(labelLimit=0)
    base = alt.Chart(bands).encode(x=alt.X(f"{x}:Q", title=x_label), color=ui.color("config", legend=legend))
    tooltip = ui.seed_tooltip("config", alt.Tooltip(f"{x}:Q", format=",.0f"), std=False)
    chart = ui.mean_with_spread(
        base, y_title=metric, tooltip=tooltip, spread="area" if band else None, points=False
    )
    if smoothing != "none":  # the smoothed curve, light, over the raw one
        smoothed = curves.curve_bands(cur, by=["config"], x=x, bins=bins)
        chart = chart + (
            alt.Chart(smoothed)
            .mark_line(opacity=SMOOTHED_OPACITY, strokeWidth=1, strokeDash=[6, 2])
            .encode(x=f"{x}:Q", y="mean:Q", color=ui.color("config", legend=legend), detail="config")
        )
    chart = with_superseded(chart, x)
    markers = ui.health_markers(url, cur, x)
    chart = ui.with_health_markers(chart, markers, x)
    st.altair_chart(chart.properties(height=420).interactive(), width="stretch")
    st.caption(describe(smoothing, cur))
    ui.health_caption(markers)
    rewound = ui.rewinds(url, ids)
    if not rewound.empty:
        st.caption(
            f"{len(rewound)} loss spike(s) rewound: the steps first trained are drawn faint and dashed "
            "(superseded, never averaged or exported); the skipped data rows are listed below"
        )
        ui.table(rewound.drop(columns=["ts"]), key="runs_rewinds")
    st.caption(
        f"{len(ids):,} run{'s' if len(ids) != 1 else ''} drawn (running and finished ones of the selection, "
        "and any a link asks for), each curve read at "
        f"≤ {points} points."
    )

st.subheader("Validation loss at several loop counts during training")
with_depth = shown[shown["job_id"].isin(depth_keys["job_id"])]
if with_depth.empty:
    st.caption("no run of this selection recorded `val_loss@N` (training evaluates them for looped recipes)")
else:
    names = {
        int(
            r.job_id
        ): f"#{r.job_id} {r.variant_label} · seed {int(r.seed) if variants.present(r.seed) else '?'}"
        for r in with_depth.itertuples()
    }
    per_run = depth_keys.groupby("job_id")["key"].nunique()
    default = int(per_run[per_run == per_run.max()].index.max())  # the newest run with the most loop counts
    picked = st.multiselect(
        "Runs", list(names), default=[default], format_func=names.get, key="runs_depth_pick"
    )
    keys = tuple(sorted(set(depth_keys.loc[depth_keys["job_id"].isin(picked), "key"])))
    td = curves.train_depth_curves(ui.curves(url, tuple(picked), keys), with_depth)
    if not td.empty:
        chart = (
            alt.Chart(td)
            .mark_line(point=True)
            .encode(
                x=alt.X("tokens:Q", title="tokens"),
                y=alt.Y("value:Q", title="validation loss", scale=alt.Scale(zero=False)),
                color=ui.color("eval_loops", numeric=True, title="loops at evaluation"),
                strokeDash=alt.StrokeDash("run:N", title="run"),
                tooltip=[
                    "run",
                    "eval_loops",
                    alt.Tooltip("tokens:Q", format=",.0f"),
                    alt.Tooltip("value:Q", format=".4f"),
                ],
            )
        )
        st.altair_chart(chart.properties(height=360).interactive(), width="stretch")
        st.caption("At the last evaluation:")
        ui.table(curves.train_depth_last(td), key="runs_depth_last")

st.subheader("Runs")
cols = [
    *variants.RUN_KEYS,
    "batch_size",
    "micro_batch_size",
    "workers",
    "tokens",
    "train_seconds",
    "tokens_per_s",
    "final_train_loss",
    "final_val_loss",
    "loop_mode",
    "train_loops",
    *variants.ARCH_COLUMNS,
    "flops_per_token",
    "train_flops",
    "mfu",
    "padding_waste",
    "variant_id",
]
cols = list(dict.fromkeys(c for c in cols if c in runs.columns))
ui.table(runs[cols].sort_values("job_id"), key="runs_table", height=320)
st.caption(
    "batch_size: sequences per optimizer step (the global batch); micro_batch_size: sequences per "
    "forward; workers: the data-parallel workers that trained it (train_seconds are wall seconds of "
    "that many devices at once)."
)

st.subheader("Mean over seeds")
agg = variants.seed_aggregate(
    runs, "final_val_loss", by=["grid", "variant_id", "variant_label", "size", "budget"]
)
ui.table(agg.rename(columns={"mean": "final_val_loss (mean)"}), key="runs_agg")
