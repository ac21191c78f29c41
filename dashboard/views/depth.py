"""Depth: validation loss against the inference loop count per variant (mean over seeds with the
min–max spread), coloured by any architecture column, how much each round changes the hidden
state (round 1, the change from the random initial state, in its own panel), the far-copy loss of two
variants compared on the same tokens, whether the test split orders the variants as validation does
(where sweeps evaluated it), and how the rounds converge against bf16 resolution."""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from looplab.analysis import convergence, curves, far_copy, heldout, variants
from looplab.dashboard import ui

X_AXES = {"loops": "inference loops", "inference_depth": "effective depth at inference (layers)"}


def round_lines(frame: pd.DataFrame, y_title: str, tooltip: list, log: bool = False, **encode):
    """The mean over seeds (`mean`) against the round of one forward pass, a line per variant; `log`: a
    logarithmic y axis; `encode`: further channels (a dash per metric)."""
    y = alt.Y("mean:Q", title=y_title, scale=alt.Scale(type="log") if log else alt.Undefined)
    return (
        alt.Chart(frame)
        .mark_line(point=True)
        .encode(
            x=alt.X("round:O", title="round"),
            y=y,
            color=ui.color("variant_label", title="variant"),
            tooltip=tooltip,
            **encode,
        )
    )


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
tooltip = ui.seed_tooltip("variant_label", "size", "loops", x)
chart = ui.mean_with_spread(base, y_title=f"{value} (mean over seeds)", tooltip=tooltip)
st.altair_chart(chart.properties(height=400), width="stretch")
ui.table(curves.depth_wide(by_loops), key="depth_wide")

st.header("Hidden-state change per round")
deltas = ui.filter_by_runs(ui.round_deltas(url), runs)
if deltas.empty:
    st.caption("no per-round measurements yet")
else:
    counts = sorted(deltas["loops"].unique())
    loops = ui.loops_picker(counts, key="delta_loops")
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
        tooltip = ["variant_label", "round", alt.Tooltip("mean:Q", format=".4g"), "n_seeds"]
        chart = round_lines(rest, "relative change", tooltip, log=True)
        p2.altair_chart(chart.properties(height=320, title="Rounds 2 and later"), width="stretch")
    shown = ["variant_label", "size", "loops", "round", "mean", "std", "min", "max", "n_seeds", "variant_id"]
    ui.table(rd[shown], key="round_deltas")

st.header("Far copies")
old_mask = int((depth.get("far_definition") == 1).sum()) if "far_definition" in depth else 0
distances = sorted(far_copy.comparable_distances(depth))
if old_mask:
    st.caption(
        f"{old_mask} depth rows were measured with the earlier window mask (definition 1: the target also "
        "occurs beyond the attention window, even when it occurs inside it too); they are left out here."
    )
if not distances:
    st.caption("no far-copy split of the current definition yet (depth sweeps with split_far_copy)")
else:
    distance = st.selectbox(
        "Far beyond", distances, index=len(distances) - 1, key="far_distance", format_func="{} tokens".format
    )
    st.caption(
        f"A target token is a far copy when its previous occurrence in the sequence lies more than {distance} "
        "tokens back and it does not occur within that distance. Every sweep of runs on one corpus and "
        "tokenizer scores the same tokens, so two variants compare on the same far tokens, paired by seed."
    )
    ui.table(far_copy.far_share(depth, distance), key="far_share")
    labels = sorted(far_copy.comparable(depth, distance)["variant_label"].unique())
    f1, f2 = st.columns(2)
    with f1:
        reference = ui.reference_picker(labels, label="Reference", key="far_reference")
    others = [v for v in labels if v != reference] or labels
    side = f2.selectbox("Variant", others, index=0, key="far_side")
    paired = far_copy.paired_difference(depth, side, reference, distance)
    if paired.empty:
        st.caption("the two variants share no loop count with a far-copy split")
    else:
        points = paired.drop(columns="per_seed")  # a chart's data holds plain values only
        st.altair_chart(
            alt.Chart(points)
            .mark_errorbar()
            .encode(
                x=alt.X("loops:O", title="inference loops"),
                y=alt.Y("low:Q", title=f"{side} − {reference} (95 % interval)"),
                y2="high:Q",
                color=alt.Color("metric:N"),
                xOffset="metric:N",
            )
            + alt.Chart(points)
            .mark_point(filled=True)
            .encode(
                x="loops:O",
                y="diff:Q",
                color="metric:N",
                xOffset="metric:N",
                tooltip=["metric", "loops", alt.Tooltip("diff:Q", format=".4f"), "method", "n", "n_ref"],
            ),
            width="stretch",
        )
        shown = paired.assign(per_seed=paired["per_seed"].map(far_copy.format_per_seed))
        ui.table(shown, key="far_paired")

st.header("Test split vs validation")
pairs = heldout.sign_agreement(depth)
if pairs.empty:
    st.caption(
        "no two variants have a test loss at one loop count yet (depth sweeps with test_split: true; the "
        "test split is the validation stream's next tokens, so stored sweeps have none)"
    )
else:
    st.markdown(heldout.summary(pairs) + ".")
    st.caption(
        "For each pair of variants at each loop count: the difference of their mean losses over seeds "
        "(variant − reference) on validation and on the test split, each with its interval over seeds; they "
        "agree when the signs match, and the pair is resolved when both intervals exclude 0."
    )
    ui.table(pairs, key="test_agreement")

st.header("Convergence against bf16")
rounds_df = ui.filter_by_runs(ui.round_deltas(url), runs)
known = (
    rounds_df[rounds_df["bf16_resolution"].notna()] if "bf16_resolution" in rounds_df else rounds_df.iloc[0:0]
)
if known.empty:
    st.caption("no sweep measured the change ratio and bf16 resolution yet")
else:
    st.caption(
        "Change ratio: mean ‖h_t − h_{t−1}‖ over mean ‖h_{t−1} − h_{t−2}‖ (below 1 the rounds converge). "
        "bf16 round: the first round whose relative change ‖Δ_t‖ / ‖h_{t−1}‖ falls below ‖bf16(h) − h‖ / ‖h‖ "
        "of the state it changes, from where a bf16 forward cannot hold the change."
    )
    counts = sorted(known["loops"].unique())
    conv_loops = ui.loops_picker(counts, key="conv_loops")
    conv = convergence.round_curves(known, conv_loops)
    ratio = conv[conv["metric"] == "change_ratio"]
    versus = conv[conv["metric"] != "change_ratio"]
    c3, c4 = st.columns(2)
    tooltip = ["variant_label", "round", alt.Tooltip("mean:Q", format=".3f"), "n_seeds"]
    chart = round_lines(ratio, "change ratio", tooltip)
    c3.altair_chart(chart.properties(height=300, title="Change over the previous round's"), width="stretch")
    tooltip = ["variant_label", "metric", "round", alt.Tooltip("mean:Q", format=".4g")]
    chart = round_lines(
        versus, "relative size", tooltip, log=True, strokeDash=alt.StrokeDash("metric:N", title=None)
    )
    c4.altair_chart(chart.properties(height=300, title="Relative change vs bf16 resolution"), width="stretch")
    ui.table(convergence.bf16_rounds(known), key="bf16_rounds")
