"""Depth: validation loss against the inference loop count per variant (mean over seeds with the
min–max spread), coloured by any architecture column, and how much each round changes the hidden
state (round 1, the change from the random initial state, in its own panel)."""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from analysis import curves, variants
from dashboard import ui

X_AXES = {"loops": "inference loops", "inference_depth": "effective depth at inference (layers)"}

st.title("Depth")
url = ui.url()
runs, depth = ui.selected_sweeps(url)

st.header("Validation loss vs loops")
# an imported model has its own tokenizer: a loss per token would compare vocabularies, bits per byte of
# the same validation text do not
imported = "imported_from" in depth and depth["imported_from"].notna().any()
value = "val_bpb" if imported else "val_loss"
if imported:
    st.caption(
        "Imported models use their own tokenizer, so the losses are in bits per byte (val_bpb) of the "
        "same validation text, re-tokenized for each model."
    )
by_loops = curves.depth_curves(depth, value)
c1, c2 = st.columns(2)
x_options = [x for x in X_AXES if by_loops[x].notna().any()]
x = c1.selectbox("x axis", x_options, format_func=X_AXES.get, key="depth_x")
with c2:
    color = ui.axis_picker("Colour", variants.plot_columns(by_loops), "variant_label", key="depth_color")
numeric_color = pd.api.types.is_numeric_dtype(by_loops[color])
base = alt.Chart(by_loops).encode(
    x=alt.X(f"{x}:Q", title=X_AXES[x], scale=alt.Scale(type="log", base=2)),
    color=ui.color(color, numeric_color, title=variants.ARCH_LABELS.get(color, color)),
    detail="variant_label:N",  # one line per variant, whatever the colour
)
tooltip = [
    "variant_label",
    "size",
    "loops",
    x,
    alt.Tooltip("mean:Q", format=".4f"),
    alt.Tooltip("std:Q", format=".4f"),
    "n_seeds",
]
chart = ui.mean_with_spread(base, y_title=f"{value} (mean over seeds)", tooltip=tooltip)
st.altair_chart(chart.properties(height=400), width="stretch")
ui.table(curves.depth_wide(by_loops), key="depth_wide")

st.header("Hidden-state change per round")
deltas = ui.filter_by_runs(ui.round_deltas(url), runs)
if deltas.empty:
    st.caption("no per-round measurements yet")
else:
    counts = sorted(deltas["loops"].unique())
    loops = st.selectbox(
        "Forward pass with",
        counts,
        index=len(counts) - 1,
        key="delta_loops",
        format_func=lambda n: f"{n} loops",
    )
    rd = curves.round_delta_curves(deltas, loops=loops)
    first, rest = curves.split_first_round(rd)
    st.caption(
        "‖h_t − h_{t−1}‖ / ‖h_{t−1}‖ per round, mean over seeds. Round 1 is the change from the random "
        "initial state h0 — set by h0's scale, often ten times the later rounds — so it has its own "
        "panel and the later rounds their own scale."
    )
    p1, p2 = st.columns([1, 3])
    if not first.empty:
        p1.altair_chart(
            alt.Chart(first)
            .mark_bar()
            .encode(
                x=alt.X("variant_label:N", title=None),
                y=alt.Y("mean:Q", title="round 1 (from h0)"),
                color=ui.color("variant_label", legend=None),
                tooltip=["variant_label", alt.Tooltip("mean:Q", format=".4g"), "n_seeds"],
            )
            .properties(height=320, title="Round 1"),
            width="stretch",
        )
    if not rest.empty:
        p2.altair_chart(
            alt.Chart(rest)
            .mark_line(point=True)
            .encode(
                x=alt.X("round:O", title="round"),
                y=alt.Y("mean:Q", title="relative change", scale=alt.Scale(type="log")),
                color=ui.color("variant_label", title="variant"),
                tooltip=["variant_label", "round", alt.Tooltip("mean:Q", format=".4g"), "n_seeds"],
            )
            .properties(height=320, title="Rounds 2 and later"),
            width="stretch",
        )
    shown = ["variant_label", "size", "loops", "round", "mean", "std", "min", "max", "n_seeds", "variant_id"]
    ui.table(rd[shown], key="round_deltas")
