"""Tasks: multiple-choice accuracy against the inference loop count, per variant and per subset (proof
depth, chain length), seeds pooled, with 95 % Wilson intervals; the chance level (dashed) and each
variant's trained loop count (dotted) marked. Tasks are grouped as reasoning or knowledge."""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from looplab.analysis import tasks
from looplab.dashboard import ui


def _loops_axis(curves: pd.DataFrame) -> alt.X:
    ticks = sorted({int(v) for v in pd.concat([curves["loops"], curves["train_loops"]]).dropna()})
    return alt.X(
        "loops:Q",
        title="inference loops",
        scale=alt.Scale(type="log", base=2),
        axis=alt.Axis(values=ticks, format="d"),
    )


def _marks(curves: pd.DataFrame, color: alt.Color, detail: str, by_variant: bool) -> alt.LayerChart:
    """Lines with points, the Wilson interval as error bars, chance as a dashed rule and the trained
    loop count as a dotted vertical rule (in the variant's colour when the lines are variants)."""
    base = alt.Chart(curves).encode(x=_loops_axis(curves), color=color, detail=detail)
    tooltip = [
        "variant_label",
        "subset",
        "loops",
        alt.Tooltip("acc:Q", format=".3f"),
        alt.Tooltip("ci_low:Q", format=".3f"),
        alt.Tooltip("ci_high:Q", format=".3f"),
        "n",
        "n_seeds",
        alt.Tooltip("chance:Q", format=".3f"),
        "train_loops",
    ]
    chance = (
        alt.Chart(curves.dropna(subset=["chance"]).drop_duplicates("chance"))
        .mark_rule(strokeDash=[6, 4], color="gray")
        .encode(y="chance:Q", tooltip=[alt.Tooltip("chance:Q", title="chance", format=".3f")])
    )
    marked = curves.dropna(subset=["train_loops"]).drop_duplicates(["variant_label", "train_loops"])
    trained = alt.Chart(marked).encode(
        x="train_loops:Q", tooltip=["variant_label", alt.Tooltip("train_loops:Q", title="trained loops")]
    )
    trained = (
        trained.mark_rule(strokeDash=[2, 3]).encode(color=color)
        if by_variant
        else trained.mark_rule(strokeDash=[2, 3], color="black")
    )
    return alt.layer(*ui.accuracy_marks(base, tooltip), chance, trained)


st.title("Tasks")
url = ui.url()
runs = ui.filter_runs(ui.runs(url))
scores = ui.filter_by_runs(ui.task_scores(url), runs)
if scores.empty:
    st.info(
        "No task scores yet: attach `then=['eval']` to a train grid (generated reasoning tasks by "
        "default), or wait for the evals to finish."
    )
    st.stop()

curves = tasks.accuracy_curves(scores)
groups = tasks.task_groups(scores)
st.caption(" · ".join(f"**{group}**: {', '.join(names)}" for group, names in groups.items()))
choices = [(group, name) for group, names in groups.items() for name in names]
group, task = st.selectbox("Task", choices, format_func=lambda c: f"{c[1]} ({c[0]})", key="tasks_task")
of_task = curves[curves["task"] == task]

st.header("Accuracy vs loops")
whole = of_task[of_task["subset"] == tasks.ALL]
st.caption(
    "The whole task, seeds pooled; bars: 95 % Wilson interval; dashed: chance; dotted: the loop "
    "count each variant was trained at."
)
chart = _marks(whole, ui.color("variant_label", title="variant"), "variant_label:N", by_variant=True)
st.altair_chart(chart.properties(height=380), width="stretch")
ui.table(tasks.accuracy_wide(of_task), key="tasks_wide")

subsets = [s for s in tasks.subset_order(of_task["subset"]) if s != tasks.ALL]
if subsets:
    st.header("Accuracy by subset")
    variants_of_task = sorted(of_task["variant_label"].unique())
    variant = st.selectbox("Variant", variants_of_task, key="tasks_variant")
    mine = of_task[(of_task["variant_label"] == variant) & (of_task["subset"] != tasks.ALL)]
    order = alt.Scale(scheme="viridis", domain=subsets)
    c1, c2 = st.columns(2)
    with c1:
        st.caption("Accuracy vs loops, one line per subset; dotted: the trained loop count")
        by_loops = _marks(
            mine,
            alt.Color("subset:O", scale=order, sort=subsets, title="subset"),
            "subset:N",
            by_variant=False,
        )
        st.altair_chart(by_loops.properties(height=360), width="stretch")
    with c2:
        st.caption("Accuracy vs subset, one line per loop count")
        by_subset = (
            alt.Chart(mine)
            .mark_line(point=True)
            .encode(
                x=alt.X("subset:O", sort=subsets, title="subset"),
                y=alt.Y("acc:Q", title="accuracy", scale=alt.Scale(domain=[0, 1])),
                color=alt.Color("loops:O", scale=alt.Scale(scheme="plasma"), title="loops"),
                tooltip=["subset", "loops", alt.Tooltip("acc:Q", format=".3f"), "n"],
            )
        )
        st.altair_chart(by_subset.properties(height=360), width="stretch")
    shown = [
        "variant_label",
        "subset",
        "loops",
        "acc",
        "ci_low",
        "ci_high",
        "acc_norm",
        "n",
        "n_seeds",
        "chance",
        "train_loops",
    ]
    ui.table(mine[shown], key="tasks_subsets")

st.header("By category")
st.caption(
    "Mean accuracy over the tasks of each category (each task's whole item set, seeds pooled), and over "
    "every task as the total; each task counts once, whatever its number of items."
)
by_category = tasks.category_scores(scores)
st.altair_chart(
    alt.Chart(by_category)
    .mark_line(point=True)
    .encode(
        x=_loops_axis(by_category.assign(train_loops=None)),
        y=alt.Y("acc:Q", title="mean accuracy", scale=alt.Scale(domain=[0, 1])),
        color=ui.color("variant_label", title="variant"),
        strokeDash=alt.StrokeDash("category:N", title="category"),
        tooltip=[
            "variant_label",
            "category",
            "loops",
            alt.Tooltip("acc:Q", format=".3f"),
            "n_tasks",
            "tasks",
        ],
    )
    .properties(height=340),
    width="stretch",
)
ui.table(by_category, key="tasks_categories")

st.header("Loss as a proxy")
proxy = tasks.loss_proxy(scores, runs)
if proxy.empty or proxy["rho"].isna().all():
    st.caption("needs three or more runs with a validation loss and task scores at their trained loop count")
else:
    st.caption(
        "Across the selected runs: the rank correlation (Spearman's ρ) between each run's final validation "
        "loss and its mean accuracy per category at the loop count it was trained at, with a 95 % "
        "bootstrap interval over runs. Strongly negative: the loss ranks runs as their task scores do."
    )
    ui.table(proxy, key="tasks_proxy")
