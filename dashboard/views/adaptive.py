"""Adaptive: validation loss (and task accuracy) against compute per exit rule, with the fixed-depth
curve of the depth sweep as the reference and the noise floor as a band around it; the rounds each
rule saves at equal loss; exit-round histograms by token position and by loss bucket; KV MiB against
loss per KV strategy; decode latency with exits. The numbers are analysis/adaptive.py's."""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from looplab.analysis import adaptive, comparison, stats, variants
from looplab.dashboard import ui
from looplab.orchestrator import frames

X_AXES = {
    "mean_rounds": "recurrent rounds per token (mean)",
    "equivalent_rounds": "compute per token, in fixed rounds' worth (the rule's readouts included)",
}
CHANGES = (
    "`first` and `last_m` change the function even without exits (rounds read round 1's keys and "
    "values): their points are compared with the trained model's fixed depth all the same."
)


@st.cache_data(ttl=ui.TTL_S, show_spinner=False)
def _load(url: str, what: str) -> pd.DataFrame:
    read = {
        "evals": frames.adaptive,
        "hist": frames.exit_rounds,
        "tasks": frames.adaptive_tasks,
        "decode": frames.adaptive_decodes,
    }
    return read[what](url)


def rule_lines(frame: pd.DataFrame, x: alt.X, y: alt.Y, figures: list, **encode) -> alt.Chart:
    """A line per exit rule (its colour) and KV strategy (its dash) through the rule's thresholds; the
    tooltip names the cell, then `figures`; `encode`: further channels."""
    return (
        alt.Chart(frame)
        .mark_line(point=True)
        .encode(
            x=x,
            y=y,
            color=ui.color("rule", title="exit rule"),
            strokeDash=alt.StrokeDash("strategy:N", title="KV strategy"),
            tooltip=["rule", "strategy", "threshold", *figures],
            **encode,
        )
    )


st.title("Adaptive")
url = ui.url()
runs = ui.filter_runs(ui.runs(url))
evals = variants.with_variants(ui.filter_by_runs(_load(url, "evals"), runs))
if evals.empty:
    st.info(
        "No adaptive results yet: attach `then=['adaptive']` to a train grid (or run "
        "`looplab demo --study adaptive`), or wait for those jobs to finish."
    )
    st.stop()
depth = ui.filter_by_runs(ui.depth(url), runs)
noise = stats.noise_floor(comparison.eval_loss_per_run(ui.runs(url), ui.depth(url)))
threshold = ui.loss_input(
    "Equal-loss threshold without a noise floor",
    adaptive.EQUAL_THRESHOLD,
    key="adaptive_threshold",
    where=st.sidebar,
)
st.caption(
    f"Noise floor: {noise.describe(threshold)}. Equal loss = the difference to the fixed depth at "
    "max_rounds lies inside that interval (or below it)."
)

st.header("Loss vs compute")
points = adaptive.frontier(evals)
reference = adaptive.reference_curve(depth, noise, threshold)
c1, c2, c3 = st.columns(3)
labels = sorted(points["variant_label"].unique())
variant = c1.selectbox("Variant", labels, key="adaptive_variant")
x = c2.selectbox("x axis", list(X_AXES), format_func=X_AXES.get, key="adaptive_x")
strategies = sorted(points["strategy"].unique())
shown = c3.multiselect(
    "KV strategies",
    strategies,
    default=[s for s in strategies if s == adaptive.KVStrategy.PER_ROUND] or strategies,
    key="adaptive_strategies",
)
mine = points[(points["variant_label"] == variant) & points["strategy"].isin(shown)]
if adaptive.emulated(evals[evals["variant_label"] == variant]):
    st.caption(
        f"**{variant}: exits emulated** from separate forwards at loops 1..max_rounds (its model family "
        "has no readout at any round): each token takes the logits of the forward at its exit round, "
        "FLOPs are the family's forwards', the rule's readouts uncounted; cells end in `(emulated)`."
    )
ref = reference[reference["variant_label"] == variant]
layers = []
if not ref.empty:
    ref_base = alt.Chart(ref).encode(x=alt.X("loops:Q", title=X_AXES[x]))
    layers.append(ref_base.mark_area(opacity=0.15, color="#888").encode(y="low:Q", y2="high:Q"))
    layers.append(
        ref_base.mark_line(color="#444", strokeDash=[4, 3], point=True).encode(
            y=alt.Y("val_loss:Q", title="val_loss (mean over seeds)", scale=alt.Scale(zero=False)),
            tooltip=[
                "loops",
                alt.Tooltip("val_loss:Q", format=".4f"),
                alt.Tooltip("band:Q", format=".4f"),
                "n_seeds",
            ],
        )
    )
layers.append(
    rule_lines(
        mine,
        alt.X(f"{x}:Q", title=X_AXES[x]),
        alt.Y("val_loss:Q", scale=alt.Scale(zero=False)),
        [
            alt.Tooltip("val_loss:Q", format=".4f"),
            alt.Tooltip("mean_rounds:Q", format=".2f"),
            alt.Tooltip("equivalent_rounds:Q", format=".2f"),
            "n_seeds",
        ],
        detail="strategy:N",
    )
)
st.altair_chart(alt.layer(*layers).properties(height=420), width="stretch")
st.caption(
    "Grey dashed: the fixed depth (depth sweep), its band the equal-loss interval; each exit rule a line "
    "through its thresholds; `router`: a routed family's own recursions per token (Mixture-of-Recursions), "
    "one point. " + CHANGES
)

st.header("Rounds saved at equal loss")
saved = adaptive.rounds_saved(evals, depth, noise, threshold)
st.caption(
    "Per rule and KV strategy, the cheapest threshold at equal loss to the fixed depth max_rounds: "
    "`rounds_saved` = max_rounds − mean rounds, `compute_saved` the same in FLOPs (the rule's readouts "
    "charged), `vs_fixed` = the shallowest equal fixed depth − the rule's compute (negative: simply "
    "running fewer fixed rounds is cheaper)."
)
ui.table(saved.drop(columns=["variant_id"]), key="adaptive_saved")

st.header("Best rule at each loss")
per_round = [i for i, s in enumerate(strategies) if s == adaptive.KVStrategy.PER_ROUND]
best_strategy = st.selectbox(
    "KV strategy", strategies, index=(per_round or [0])[0], key="adaptive_best_strategy"
)
st.caption(
    "At each loss level (every variant's fixed-depth loss), among all variants' cells under this KV "
    "strategy with a mean loss at most the level, learned (`gate`) and post hoc alike, the one that "
    "spends the fewest rounds' worth of compute, with its interval over seeds (`rounds_low`–`rounds_high`)."
)
ui.table(adaptive.best_at_loss(evals, best_strategy), precision=4, key="adaptive_best")

tasks = ui.filter_by_runs(_load(url, "tasks"), runs)
if not tasks.empty:
    st.header("Task accuracy vs compute")
    acc = adaptive.accuracy_frontier(tasks, evals)
    acc = acc[(acc["variant_label"] == variant) & acc["strategy"].isin(shown)]
    tooltip = [alt.Tooltip("acc:Q", format=".3f"), alt.Tooltip("mean_rounds:Q", format=".2f"), "n_seeds"]
    chart = rule_lines(
        acc,
        alt.X(f"{x}:Q", title=X_AXES[x] + " (on validation text)"),
        alt.Y("acc:Q", title="accuracy"),
        tooltip,
        column=alt.Column("task:N"),
    )
    st.altair_chart(chart.properties(height=260, width=320))

st.header("Exit rounds")
hist = ui.filter_by_runs(_load(url, "hist"), runs)
in_variant = hist[hist["train_job_id"].isin(evals.loc[evals["variant_label"] == variant, "train_job_id"])]
configs = sorted(in_variant["config"].unique()) if not in_variant.empty else []
if not configs:
    st.caption("no exit-round histograms for this selection")
else:
    default = adaptive.first_rule_cell(configs, shown)
    config = st.selectbox("Cell", configs, index=default, key="adaptive_config")
    p1, p2 = st.columns(2)
    for column, split, title in (
        (p1, "position", "by token position"),
        (p2, "loss", "by loss at the fixed depth (nats)"),
    ):
        h = adaptive.exit_histogram(hist[hist["config"] == config], split)
        h = h[h["variant_label"] == variant]
        column.altair_chart(
            alt.Chart(h)
            .mark_bar()
            .encode(
                x=alt.X("bucket_label:N", title=title, sort=None),
                y=alt.Y("share:Q", title="share of the tokens"),
                color=alt.Color("round:O", title="exit round", scale=alt.Scale(scheme="viridis")),
                tooltip=[
                    "bucket_label",
                    "round",
                    "count",
                    alt.Tooltip("share:Q", format=".3f"),
                    alt.Tooltip("mean_round:Q", format=".2f"),
                ],
            )
            .properties(height=300, title=f"Exit rounds {title}"),
            width="stretch",
        )

st.header("KV cache vs loss")
kv = adaptive.kv_table(evals)
st.caption(
    "KV MiB of one sequence of the model's context in bf16: `kv_mib` what a static cache allocates (equal to "
    "the buffers allocated), `kv_mib_needed` what the strategy must keep given the exits (`latest` keeps "
    "only computed rounds). " + CHANGES
)
st.altair_chart(
    alt.Chart(kv[kv["variant_label"] == variant])
    .mark_point(filled=True, size=70)
    .encode(
        x=alt.X("kv_mib_needed:Q", title="KV MiB needed"),
        y=alt.Y("val_loss:Q", scale=alt.Scale(zero=False)),
        color=ui.color("strategy", title="KV strategy"),
        shape="rule:N",
        tooltip=[
            "strategy",
            "rule",
            "threshold",
            alt.Tooltip("kv_mib:Q", format=".3f"),
            alt.Tooltip("kv_mib_needed:Q", format=".3f"),
            alt.Tooltip("val_loss:Q", format=".4f"),
        ],
    )
    .properties(height=320),
    width="stretch",
)
ui.table(kv.drop(columns=["variant_id"]), key="adaptive_kv")

decodes = ui.filter_by_runs(_load(url, "decode"), runs)
if not decodes.empty:
    st.header("Decoding with exits")
    st.caption(
        "ms per decode step (one token for every row of the batch) with the exit rule against the fixed "
        "depth, teacher-forced on validation text. `masked`: every round runs, stopped rows are held (static "
        "shapes; no time saved); `batch_stop`: a step ends once every row has stopped, so the batch waits "
        "for its slowest row (`mean_step_rounds`). `equal_loss_rounds`: the shallowest fixed depth whose "
        "validation loss is at most the cell's (empty: none up to max_rounds is), `equal_loss_ms_per_token` "
        "its decode time, timed the same way: exits pay off only if they beat it."
    )
    shown_cols = [
        "variant_label",
        "seed",
        "config",
        "batch_size",
        "mode",
        "ms_per_token",
        "fixed_ms_per_token",
        "speedup",
        "equal_loss_rounds",
        "equal_loss_ms_per_token",
        "tokens_per_s",
        "mean_exit_round",
        "mean_step_rounds",
        "kv_mib",
        "kv_mib_needed",
        "device",
        "concurrent_jobs",
    ]
    ui.table(decodes[shown_cols], precision=3, key="adaptive_decode")
