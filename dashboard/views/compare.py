"""Compare: recipes at equal data (iso-data) and at equal training time (iso-time), across seeds,
with differences below the noise threshold marked as noise; training throughput per recipe."""

from __future__ import annotations

import altair as alt
import streamlit as st

from dashboard import analysis, ui
from orchestrator.states import JobStatus

st.title("Compare")
url = ui.url()
all_runs = ui.runs(url)
if not ui.require_jobs(all_runs):
    st.stop()
runs = ui.filter_runs(all_runs)
c1, c2 = st.columns(2)
with c1:
    reference = ui.reference_picker(list(runs["recipe"]))
threshold = c2.number_input("Noise threshold (loss)", min_value=0.0, value=analysis.NOISE_THRESHOLD, step=0.005,
                            format="%.3f", key="noise_threshold")  # fmt: skip

st.header("Iso-data")
st.caption(
    "Same size and token budget. Looped recipes with a sampled loop count are compared at the best loop "
    "count of their depth sweep (`best_loops`); fixed-loop recipes at their trained count; a plain "
    f"transformer by its final validation loss. |diff| < {threshold:g} is marked **noise**; — is missing data."
)
done = runs[runs["status"] == JobStatus.SUCCEEDED]  # a running or failed run is no result (yet)
evals = analysis.eval_loss_per_run(done, ui.filter_by_runs(ui.depth(url), done))
iso = analysis.iso_data_table(evals, reference=reference, threshold=threshold)
if iso.empty:
    st.info("no finished token-budget runs in this selection yet")
else:
    st.markdown("**Mean validation loss over seeds** (rows: size × token budget, columns: recipes)")
    ui.table(analysis.iso_data_matrix(iso).reset_index(), key="iso_matrix")
    st.markdown(f"**Per seed, mean, difference to `{reference}`**")
    ui.table(iso, key="iso_data")

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
                                    color=alt.Color("series:N", title=None))  # fmt: skip
        pts = base.mark_point(filled=True, size=70).encode(
            shape=alt.Shape("point:N", title=None), tooltip=["series", "wall_s", "value", "point"]
        )
        st.altair_chart((base.mark_line(opacity=0.6) + pts).properties(height=360), width="stretch")

st.header("Training throughput")
tp = analysis.throughput_table(done, reference=reference)
ui.table(tp, precision=3, key="throughput")
