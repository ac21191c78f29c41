"""Scaling: the iso-depth law L = E + A·(N_once + r^φ·N_rec)^(−α) + B·D^(−β) fitted to the finished
runs (`analysis.iso_depth`): the runs against the fitted law (loss vs effective parameters and vs
training FLOPs, coloured by r), the residuals, φ with its bootstrap interval, the parameter table, which
form the data support, what one recurrence is worth, and the compute-optimal width and tokens per r.

Runs: every finished run of recipe iso_depth, or, when the sidebar selects grids, every fixed-loop run
of the selection."""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from looplab.analysis import iso_depth, scaling
from looplab.dashboard import ui
from looplab.orchestrator.errors import USER_ERRORS
from looplab.orchestrator.states import JobStatus

LAW = r"L = E + A\,(N_\mathrm{once} + r^{\varphi} N_\mathrm{rec})^{-\alpha} + B\,D^{-\beta}"


@st.cache_data(show_spinner="fitting the law (bootstrap over runs) ...", max_entries=16)
def fitted(runs: pd.DataFrame, bootstrap: int, seed: int, robust: str, flops: float | None):
    return iso_depth.fit_iso_depth(runs, flops=flops, bootstrap=bootstrap, seed=seed, robust=robust)


st.title("Scaling")
st.latex(LAW)
url = ui.url()
runs = ui.filter_runs(ui.runs(url))
if not ui.selected("grid"):
    runs = runs[runs["recipe"] == iso_depth.ISO_DEPTH_RECIPE]
study_runs = iso_depth.runs_for_fit(runs[runs["status"] == JobStatus.SUCCEEDED])
if study_runs.empty:
    st.info(
        "No finished iso-depth runs yet: submit the study (`lab.studies.iso_depth_grid`, or "
        "`looplab demo --study iso-depth`), or pick a grid of fixed-loop runs in the sidebar."
    )
    st.stop()

c1, c2, c3, c4 = st.columns(4)
bootstrap = c1.number_input(
    "Bootstrap resamples", 0, 5000, scaling.DEFAULT_BOOTSTRAP, step=50, key="fit_boot"
)
seed = c2.number_input("Bootstrap seed", 0, 2**31 - 1, 0, key="fit_seed")
robust = c3.selectbox("Least-squares loss", scaling.ROBUST_LOSSES, key="fit_robust")
default_flops = iso_depth.default_budget(study_runs)
flops = c4.number_input(
    "FLOP budget of the compute-optimal answers",
    min_value=1.0,
    value=float(default_flops or 1e15),
    format="%.3e",
    key="fit_flops",
)
try:
    study = fitted(study_runs, int(bootstrap), int(seed), robust, float(flops))
except USER_ERRORS as e:  # a ConfigError: these runs cannot identify the law
    st.warning(f"The law cannot be fitted to these {len(study_runs)} runs: {e}")
    st.stop()
fit = study.fit
lo, hi = fit.intervals["phi"]
pct = f"{fit.confidence:.0%}"
m1, m2, m3, m4 = st.columns(4)
m1.metric("φ", f"{fit.phi:.3f}", help=f"{pct} bootstrap interval over runs")
m2.metric(f"φ {pct} interval", f"[{lo:.3f}, {hi:.3f}]")
m3.metric("R²", f"{fit.r2:.4f}")
m4.metric("RMSE", f"{fit.rmse:.4f}")
if fit.at_bound:
    st.warning(
        f"{', '.join(fit.at_bound)}: at the edge of the search range, so not identified by these runs "
        "(their intervals span the range). More runs, wider budgets or widths are needed."
    )
st.caption(
    f"{fit.n_runs} runs; intervals from {fit.n_bootstrap_fitted} of {fit.n_bootstrap} bootstrap resamples "
    f"(seed {fit.seed}); a block looped r times counts as r^φ distinct blocks."
)

st.header("Runs against the fitted law")
table = fit.table.copy()
table["r"] = table["r"].astype(int)
group = "budget_flops" if "budget_flops" in table and table["budget_flops"].notna().all() else "tokens"
table["budget"] = table[group].map(lambda v: f"{v:.2g}")
x_axes = {"n_eff": "effective parameters N_once + r^φ N_rec"}
if "flops" in table:
    x_axes["flops"] = "training FLOPs"
left, right = st.columns(2)
for column, (x, title) in zip((left, right), x_axes.items(), strict=False):
    # one fitted line per r and budget (vs parameters) or per r and width (vs FLOPs)
    detail = "budget" if x == "n_eff" else ("d_model" if "d_model" in table else "budget")
    base = alt.Chart(table).encode(
        x=alt.X(f"{x}:Q", title=title, scale=alt.Scale(type="log")),
        color=ui.color("r", numeric=True, title="r"),
    )
    points = base.mark_point(filled=True, size=60).encode(
        y=alt.Y("loss:Q", title="final validation loss", scale=alt.Scale(zero=False)),
        tooltip=[
            c
            for c in ("job_id", "variant_label", "r", "d_model", "tokens", "loss", "predicted")
            if c in table
        ],
    )
    lines = base.mark_line(strokeDash=[4, 3]).encode(y="predicted:Q", detail=f"{detail}:N", order=f"{x}:Q")
    column.altair_chart((points + lines).properties(height=360, title=f"loss vs {title}"), width="stretch")
st.caption(
    "Points: the runs; dashed lines: the fitted law at the same runs (per r and budget on the left, per "
    "r and width on the right)."
)

st.header("Residuals")
rule = alt.Chart(pd.DataFrame({"zero": [0.0]})).mark_rule(color="gray").encode(y="zero:Q")
residuals = (
    alt.Chart(table)
    .mark_point(filled=True, size=60)
    .encode(
        x=alt.X("predicted:Q", title="fitted loss", scale=alt.Scale(zero=False)),
        y=alt.Y("residual:Q", title="observed − fitted"),
        color=ui.color("r", numeric=True, title="r"),
        tooltip=[
            c
            for c in ("job_id", "variant_label", "r", "tokens", "loss", "predicted", "residual")
            if c in table
        ],
    )
)
st.altair_chart((rule + residuals).properties(height=300), width="stretch")
shown = [
    c
    for c in ("job_id", "variant_label", "r", "d_model", "tokens", "n_eff", "loss", "predicted", "residual")
    if c in table
]
ui.table(table[shown], key="scaling_runs")

st.header("Parameters")
ui.table(
    fit.parameter_table().rename(columns={"lo": f"{pct} lo", "hi": f"{pct} hi"}),
    precision=4,
    key="scaling_params",
)
st.caption("A and B in the units of the data (parameters, tokens).")

st.header("Which form the data support")
forms = study.forms[["form", "phi", "n_params", "rmse", "loo_rmse", "aic", "r2", "supported"]]
ui.table(forms, key="scaling_forms")
st.caption(
    "φ free, φ = 1 (loops count as distinct layers), φ = 0 (loops are worth nothing); supported: the lowest "
    "leave-one-run-out RMSE (each run predicted by the law fitted without it). AIC is shown for reference."
)

st.header("What one recurrence is worth")
ui.table(study.worth.rename(columns={"lo": f"{pct} lo", "hi": f"{pct} hi"}), key="scaling_worth")
st.caption(
    "blocks = r^φ: a block looped r times is worth that many distinct blocks in loss, at a compute cost of r."
)

st.header("Compute-optimal width and tokens")
if study.optimal is None or study.optimal.empty:
    st.caption("needs runs at two or more widths per r (with their FLOPs per token)")
else:
    ui.table(study.optimal, key="scaling_optimal")
    st.caption(
        f"At {study.flops:.3g} training FLOPs: the width and tokens that minimise the fitted loss per r (D = "
        "C / FLOPs per token(width), from the runs' FLOP model values), and the loss gap to r = 1 at equal "
        "compute; at_edge: the optimum is on the edge of the searched widths."
    )
