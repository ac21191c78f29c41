"""Depth: validation loss against the inference loop count per recipe (mean over seeds with the
min–max spread), and how much each round changes the hidden state."""

from __future__ import annotations

import altair as alt
import streamlit as st

from dashboard import analysis, ui

st.title("Depth")
url = ui.url()
runs = ui.filter_runs(ui.runs(url))
depth = ui.filter_by_runs(ui.depth(url), runs)
if depth.empty:
    st.info("No depth sweep results yet: attach `then=['depth_sweep']` to a train grid, or wait for the "
            "sweeps to finish.")  # fmt: skip
    st.stop()

st.header("Validation loss vs loops")
curves = analysis.depth_curves(depth)
curves["series"] = curves["recipe"] + " · " + curves["size"].astype(str)
base = alt.Chart(curves).encode(
    x=alt.X("loops:Q", title="inference loops", scale=alt.Scale(type="log", base=2)),
    color=alt.Color("series:N", title=None),
)
chart = base.mark_area(opacity=0.15).encode(y="min:Q", y2="max:Q") + base.mark_line(point=True).encode(
    y=alt.Y("mean:Q", title="val_loss (mean over seeds)", scale=alt.Scale(zero=False)),
    tooltip=[
        "series",
        "loops",
        alt.Tooltip("mean:Q", format=".4f"),
        alt.Tooltip("std:Q", format=".4f"),
        "n_seeds",
    ],
)
st.altair_chart(chart.properties(height=400), width="stretch")
wide = curves.pivot_table(index=["recipe", "size"], columns="loops", values="mean").reset_index()
wide.columns = [c if isinstance(c, str) else f"{c} loops" for c in wide.columns]
ui.table(wide, key="depth_wide")

st.header("Hidden-state change per round")
deltas = ui.filter_by_runs(ui.round_deltas(url), runs)
if deltas.empty:
    st.caption("no per-round measurements yet")
else:
    counts = sorted(deltas["loops"].unique())
    loops = st.selectbox("Forward pass with", counts, index=len(counts) - 1, key="delta_loops",
                         format_func=lambda n: f"{n} loops")  # fmt: skip
    rd = analysis.round_delta_curves(deltas, loops=loops)
    rd["series"] = rd["recipe"] + " · " + rd["size"].astype(str)
    b = alt.Chart(rd).encode(x=alt.X("round:O", title="round"), color=alt.Color("series:N", title=None))
    ch = b.mark_line(point=True).encode(
        y=alt.Y("mean:Q", title="‖h_t − h_{t−1}‖ / ‖h_{t−1}‖", scale=alt.Scale(type="log")),
        tooltip=["series", "round", alt.Tooltip("mean:Q", format=".4g"), "n_seeds"],
    )
    st.altair_chart(ch.properties(height=320), width="stretch")
    ui.table(rd.drop(columns=["series"]), key="round_deltas")
