"""Compare: variants at equal data (iso-data), equal training compute (iso-FLOP) and equal training
time (iso-time), across seeds, with differences below the noise threshold marked as noise; loss
against any architecture column; training throughput per variant."""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from dashboard import analysis, ui, variants
from orchestrator.states import JobStatus

st.title("Compare")
url = ui.url()
all_runs = variants.with_variants(ui.runs(url))
if not ui.require_jobs(all_runs):
    st.stop()
runs = ui.filter_runs(all_runs)
c1, c2 = st.columns(2)
with c1:
    reference = ui.reference_picker(list(runs["variant_label"]))
threshold = c2.number_input("Noise threshold (loss)", min_value=0.0, value=analysis.NOISE_THRESHOLD, step=0.005,
                            format="%.3f", key="noise_threshold")  # fmt: skip

done = runs[runs["status"] == JobStatus.SUCCEEDED]  # a running or failed run is no result (yet)
evals = analysis.eval_loss_per_run(done, ui.filter_by_runs(ui.depth(url), done))

st.header("Iso-data")
st.caption(
    "Same size and token budget; one row per variant (recipe + model overrides), seeds side by side. Looped "
    "variants with a sampled loop count are compared at the best loop count of their depth sweep "
    "(`best_loops`); fixed-loop ones at their trained count; a plain transformer by its final validation "
    f"loss. |diff| < {threshold:g} is marked **noise**; — is missing data."
)
iso = analysis.iso_data_table(evals, reference=reference, threshold=threshold)
if iso.empty:
    st.info("no finished token-budget runs in this selection yet")
else:
    st.markdown("**Mean validation loss over seeds** (rows: size × token budget, columns: variants)")
    ui.table(analysis.iso_data_matrix(iso).reset_index(), key="iso_matrix")
    st.markdown(f"**Per seed, mean, difference to `{reference}`**")
    ui.table(iso, key="iso_data")

st.header("Iso-FLOP")
tolerance_pct = st.number_input("Equal compute within (%)", min_value=0.0, max_value=50.0,
                                value=100 * analysis.FLOP_TOLERANCE, step=1.0, format="%.1f",
                                key="flop_tolerance")  # fmt: skip
tolerance = tolerance_pct / 100
st.caption(
    "Training FLOPs = FLOPs per token (forward + backward, expected over the loop sampler, padded rounds "
    f"included) × tokens trained. Runs of one size within {tolerance_pct:g} % of each other's FLOPs are "
    "compared (`flops` is their mean); the loss is the one iso-data uses. A cheaper variant trains more "
    "tokens for the same compute (`tokens`)."
)
curve = analysis.iso_flop_curve(evals, tolerance=tolerance)
if curve.empty:
    st.info("no finished run with a FLOP count in this selection yet")
else:
    base = alt.Chart(curve).encode(
        x=alt.X(
            "train_flops:Q", title="training FLOPs", scale=alt.Scale(type="log"), axis=alt.Axis(format=".1e")
        ),
        color=ui.color("variant_label", title="variant"),
    )
    bars = base.mark_rule(opacity=0.5).encode(y=alt.Y("min:Q"), y2="max:Q")
    line = base.mark_line(point=True).encode(
        y=alt.Y("mean:Q", title="loss (mean over seeds)", scale=alt.Scale(zero=False)),
        tooltip=[
            "variant_label",
            "size",
            alt.Tooltip("train_flops:Q", format=".3e"),
            alt.Tooltip("mean:Q", format=".4f"),
            "n_seeds",
        ],  # fmt: skip
    )
    st.altair_chart((line + bars).properties(height=360), width="stretch")  # legend from the line
    flop_table = analysis.iso_flop_table(evals, reference=reference, tolerance=tolerance, threshold=threshold)
    st.markdown(f"**Runs at equal FLOPs: per seed, mean, difference to `{reference}`**")
    ui.table(flop_table, key="iso_flop")

st.header("Loss by architecture")
budgets = [b for b in dict.fromkeys(evals["budget"]) if isinstance(b, str)] if "budget" in evals else []
if not budgets:
    st.info("no finished runs in this selection yet")
else:
    counts = evals["budget"].value_counts()
    b1, b2, b3 = st.columns(3)
    budget = b1.selectbox("Budget", budgets, index=budgets.index(counts.idxmax()), key="arch_budget")
    at_budget = evals[evals["budget"] == budget]
    choices = variants.plot_columns(at_budget, extra=("train_flops", "flops_per_token"))
    with b2:
        x = ui.axis_picker("x axis", choices, "train_loops", key="arch_x")
    with b3:
        color = ui.axis_picker("Colour", choices, "d_model", key="arch_color")
    points = analysis.by_architecture(at_budget, x=x, color=color)
    kind = {c: "Q" if pd.api.types.is_numeric_dtype(points[c]) else "N" for c in (x, color)}
    base = alt.Chart(points).encode(
        x=alt.X(f"{x}:{kind[x]}", title=variants.ARCH_LABELS.get(x, x), scale=alt.Scale(zero=False)),
        color=ui.color(color, kind[color] == "Q", title=variants.ARCH_LABELS.get(color, color)),
    )
    chart = base.mark_line(point=True).encode(
        y=alt.Y("mean:Q", title="loss (mean over seeds)", scale=alt.Scale(zero=False)),
        tooltip=["variant_label", x, color, alt.Tooltip("mean:Q", format=".4f"), "n_seeds"],
    ) + base.mark_rule(opacity=0.5).encode(y="min:Q", y2="max:Q")
    st.caption(f"One point per variant at budget {budget} (the loss iso-data uses), min–max over seeds.")
    st.altair_chart(chart.properties(height=340), width="stretch")
    ui.table(points, key="by_arch")

st.header("Iso-time")
st.caption("A run retrained with the wall-clock training time of a reference run (budget `match_time_of`); "
           "both finished their learning-rate decay, so their final losses compare.")  # fmt: skip
pairs = analysis.iso_time_pairs(done, threshold=threshold)
if pairs.empty:
    st.info("no iso-time pair yet: submit a train job with budget {'match_time_of': <job id>}")
else:
    ui.table(analysis.iso_time_summary(pairs, threshold=threshold), key="iso_time_summary")
    ui.table(pairs, key="iso_time_pairs")
    ids = tuple(sorted(set(pairs["job_id"]) | set(pairs["ref_job_id"])))
    wt = analysis.wall_time_curves(ui.curves(url, ids, ("val_loss",)), all_runs)
    if not wt.empty:
        st.markdown("**Validation loss vs training wall time** — intermediate points are *not decayed*; "
                    "only each finished run's last point is a decayed result.")  # fmt: skip
        base = alt.Chart(wt).encode(x=alt.X("wall_s:Q", title="training wall time (s)"),
                                    y=alt.Y("value:Q", title="val_loss", scale=alt.Scale(zero=False)),
                                    color=ui.color("series"))  # fmt: skip
        pts = base.mark_point(filled=True, size=70).encode(
            shape=alt.Shape("point:N", title=None), tooltip=["series", "wall_s", "value", "point"]
        )
        st.altair_chart((base.mark_line(opacity=0.6) + pts).properties(height=360), width="stretch")

st.header("Training throughput")
tp = analysis.throughput_table(done, reference=reference)
ui.table(tp, precision=3, key="throughput")
