"""Extrapolation: how each variant behaves at inference depths other than the one it was trained at.
Validation loss (and task accuracy, where eval jobs ran) against the effective depth, the trained depth
marked; the loop geometry per round at one depth; the interaction matrix of one variant as a heatmap.
Every number comes from `analysis.extrapolation`; this page only draws."""

from __future__ import annotations

import altair as alt
import streamlit as st

from looplab.analysis import extrapolation, tasks
from looplab.dashboard import ui

DEPTH_AXIS = "effective depth at inference (layers)"

st.title("Extrapolation")
url = ui.url()
runs, depth = ui.selected_sweeps(url, "run `looplab demo --study loop-design`")


def trained_rules(marks, color: alt.Color) -> alt.Chart:
    """A dotted vertical rule at each variant's trained depth, in the variant's colour."""
    return (
        alt.Chart(marks)
        .mark_rule(strokeDash=[2, 3], strokeWidth=2)
        .encode(
            x="trained_depth:Q",
            color=color,
            tooltip=["variant_label", alt.Tooltip("trained_depth:Q", title="trained depth")],
        )
    )


# the pages' colour-blind-safe palette (16 distinct hues; tableau20 paired light and dark of one hue)
variant_color = ui.color("variant_label", title="variant")

st.header("Loss vs effective depth")
curves = extrapolation.loss_curves(depth)
st.caption(
    "Validation loss of the depth sweeps, mean over seeds with the min–max band; dotted: the depth "
    "each variant was trained at. Effective depth = prelude + recurrent layers × loops + coda."
)
base = alt.Chart(curves).encode(x=alt.X("inference_depth:Q", title=DEPTH_AXIS), color=variant_color)
tooltip = ui.seed_tooltip("variant_label", "loops", "inference_depth", "trained_depth")
loss_chart = ui.mean_with_spread(base, y_title="val_loss (mean over seeds)", tooltip=tooltip)
marks = extrapolation.trained_marks(curves)
st.altair_chart(
    alt.layer(loss_chart, trained_rules(marks, variant_color)).properties(height=400), width="stretch"
)
ui.table(extrapolation.summary(curves), key="extrapolation_summary")

scores = ui.filter_by_runs(ui.task_scores(url), runs)
accuracy = extrapolation.accuracy_curves(scores)
if not accuracy.empty:
    st.header("Task accuracy vs effective depth")
    task = st.selectbox("Task", sorted(accuracy["task"].unique()), key="extrapolation_task")
    of_task = accuracy[accuracy["task"] == task]
    st.caption("Seeds pooled; bars: 95 % Wilson interval; dotted: the trained depth.")
    acc_base = alt.Chart(of_task).encode(x=alt.X("inference_depth:Q", title=DEPTH_AXIS), color=variant_color)
    tooltip = [
        "variant_label",
        "loops",
        "inference_depth",
        alt.Tooltip("acc:Q", format=".3f"),
        "n",
        "n_seeds",
    ]
    task_marks = of_task.dropna(subset=["trained_depth"]).drop_duplicates("variant_label")
    chart = alt.layer(*ui.accuracy_marks(acc_base, tooltip), trained_rules(task_marks, variant_color))
    st.altair_chart(chart.properties(height=360), width="stretch")
    st.caption(
        "By category: the mean over each category's tasks of their accuracy (and over every task as the "
        "total), each task counted once, at each loop count."
    )
    ui.table(tasks.category_scores(scores), key="extrapolation_categories")

st.header("Loop geometry per round")
deltas = ui.filter_by_runs(ui.round_deltas(url), runs)
c1, c2 = st.columns(2)
metric = c1.selectbox(
    "Metric",
    list(extrapolation.GEOMETRY_METRICS),
    key="extrapolation_metric",
    format_func=extrapolation.GEOMETRY_METRICS.get,
)
depths = extrapolation.geometry_depths(deltas, metric)
if not depths:
    st.caption("no per-round measurements of this metric yet")
else:
    loops = ui.loops_picker(depths, key="extrapolation_depth", where=c2)
    geo = extrapolation.geometry_curves(deltas, metric, loops)
    positive = bool((geo["min"] > 0).all()) if not geo.empty else False
    # round 1 (from the initial state) is often orders of magnitude above the rest: log by default
    log_y = positive and st.checkbox("log scale", value=True, key="extrapolation_log")
    st.caption(
        "Mean over seeds per round (min–max band); round t compares h_t with h_{t−1}, round 1 starts "
        "from the initial state. Definitions: model/geometry.py."
    )
    geo_base = alt.Chart(geo).encode(
        x=alt.X("round:Q", title="round", axis=alt.Axis(format="d")), color=variant_color
    )
    geo_tooltip = ["variant_label", "round", alt.Tooltip("mean:Q", format=".4g"), "n_seeds"]
    geo_chart = ui.mean_with_spread(
        geo_base, y_title=extrapolation.GEOMETRY_METRICS[metric], tooltip=geo_tooltip, log_y=log_y
    )
    st.altair_chart(geo_chart.properties(height=360), width="stretch")
    ui.table(
        geo[["variant_label", "loops", "round", "mean", "std", "min", "max", "n_seeds"]],
        key="extrapolation_geo",
    )

st.header("Round interactions")
interactions = ui.filter_by_runs(ui.round_interactions(url), runs)
options = extrapolation.interaction_options(interactions)
if options.empty:
    st.caption("no interaction matrices yet (the depth sweep's `interaction_loops`)")
else:
    c1, c2 = st.columns(2)
    variant = c1.selectbox("Variant", sorted(options["variant_label"].unique()), key="extrapolation_variant")
    counts = options.loc[options["variant_label"] == variant, "loops"].tolist()
    loops = ui.loops_picker(counts, key="extrapolation_interaction_loops", where=c2)
    matrix = extrapolation.interaction_matrix(interactions, variant, loops)
    st.caption(
        "Cell (i, j): how much skipping round i changes round j's update, ‖Δ_j − Δ_j^(skip i)‖ / ‖Δ_j‖ "
        "averaged over tokens, then over seeds. 0: round j does not build on round i."
    )
    heat = (
        alt.Chart(matrix)
        .mark_rect()
        .encode(
            x=alt.X("round:O", title="round j (affected)", axis=alt.Axis(labelAngle=0)),
            y=alt.Y("skipped:O", title="round i (skipped)"),
            # from 0 (round j does not build on round i), so a spread of 1.199-1.209 reads as the
            # near-uniform matrix it is, not as strong contrasts
            color=alt.Color("mean:Q", title="interaction", scale=alt.Scale(scheme="viridis", domainMin=0)),
            tooltip=["skipped", "round", alt.Tooltip("mean:Q", format=".4g"), "n_seeds"],
        )
    )
    st.altair_chart(heat.properties(height=360), width="stretch")
    if not matrix.empty:
        st.caption(
            f"Colour scale from 0; the cells span {matrix['mean'].min():.4g}–{matrix['mean'].max():.4g} "
            f"(a spread of {matrix['mean'].max() - matrix['mean'].min():.2g})."
        )
    ui.table(
        matrix[["variant_label", "loops", "skipped", "round", "mean", "std", "n_seeds"]],
        key="extrapolation_interactions",
    )
