"""Compare: variants at equal data (iso-data), equal training compute (iso-FLOP) and equal training
time (iso-time), across seeds. Every difference to the reference comes with a 95 % interval, the seeds
on each side and a verdict read off the interval; the noise floor measured from repeated seeds is shown
beside each comparison, and an iso-data difference is also given as extra training data (an L(D) fit).
Loss against any architecture column; training throughput per variant. The health events of the
runs drawn one by one (the iso-time curves) are markers on their curves, as on Runs."""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from looplab.analysis import comparison, curves, stats, timing, variants
from looplab.analysis.smoothing import SMOOTHED_OPACITY, SMOOTHING, describe, smooth
from looplab.dashboard import ui
from looplab.orchestrator.states import JobStatus

url, all_runs, runs = ui.runs_page("Compare")
c1, c2, c3 = st.columns(3)
with c1:
    reference = ui.reference_picker(list(runs["variant_label"]))
delta = ui.loss_input(
    "Difference to resolve δ (loss), for `seeds_needed`",
    comparison.NOISE_THRESHOLD,
    key="power_delta",
    lowest=0.001,
    where=c2,
)
threshold = ui.loss_input(
    "Fallback threshold (loss), only where no interval exists",
    comparison.NOISE_THRESHOLD,
    key="noise_threshold",
    where=c3,
)

done = runs[runs["status"] == JobStatus.SUCCEEDED]  # a running or failed run is no result (yet)
evals = comparison.eval_loss_per_run(done, ui.filter_by_runs(ui.depth(url), done))
noise = stats.noise_floor(evals)


def show_noise_floor() -> None:
    """The measured noise floor (or the fallback) beside a comparison."""
    if noise.measured:
        st.markdown(f"**Noise floor:** {noise.describe(threshold)}.")
    else:
        st.warning(f"{noise.describe(threshold)}: every difference with one seed per side is judged by it.")


with st.expander("How a difference is judged", expanded=False):
    st.markdown(
        f"""`diff` = variant − reference (lower loss is better), with a 95 % interval `ci_low`–`ci_high` and
the seeds on each side (`n_seeds`, `n_ref`); `method` says how the interval was made:
- **paired t**: both sides have the same ≥ 3 seeds (the same seed = the same data order and
  initialisation), a t interval on the per-seed differences, so a seed effect both share cancels;
- **Welch t**: ≥ 3 seeds a side, not the same seeds;
- **bootstrap** ({stats.BOOTSTRAP_RESAMPLES} seeded resamples): a side has 2 seeds. A bootstrap can only
  redraw the seeds it has: with n = 2 its interval is about the range of the two values and cannot show
  a spread they did not. Where a noise floor was measured the interval is widened to at least the
  noise-floor one (**bootstrap ∪ noise floor**);
- **noise floor**: a side has 1 seed: diff ± t·σ·√(1/n + 1/n_ref), σ the pooled noise floor and t at its
  degrees of freedom (one seed per side: diff ± t·σ·√2);
- **n too small**: one seed a side and no noise floor: no interval; only there the fixed threshold
  ({threshold:g}) decides (**noise** below it).

`verdict`: **better** / **worse** when the interval excludes 0, else **not resolved**.
`seeds_needed`: seeds per side to resolve a true difference δ = {delta:g} at the noise floor σ
(two-sided α = 0.05, power 0.8, unpaired): n = 2·((z₀.₉₇₅ + z₀.₈)·σ/δ)², rounded up; pairing by seed
needs at most that many."""
    )
show_noise_floor()

st.header("Iso-data")
st.caption(
    "Same size and token budget; one row per variant (recipe + model overrides), seeds side by side. Looped "
    "variants with a sampled loop count are compared at the best loop count of their depth sweep "
    "(`best_loops`); fixed-loop ones at their trained count; a plain transformer by its final validation "
    "loss. — is missing data."
)
iso = comparison.iso_data_table(evals, reference=reference, threshold=threshold, noise=noise, delta=delta)
if iso.empty:
    st.info("no finished token-budget runs in this selection yet")
else:
    st.markdown("**Mean validation loss over seeds** (rows: size × token budget, columns: variants)")
    ui.table(comparison.iso_data_matrix(iso).reset_index(), key="iso_matrix")
    st.markdown(f"**Per seed, mean, difference to `{reference}` with its 95 % interval**")
    ui.table(iso, key="iso_data")
    shown = iso[iso["ci_low"].notna()].copy()  # the rows that have an interval, drawn as bars
    shown["budget"] = [f"{variants.human_count(tokens)} tokens" for tokens in shown["budget_tokens"]]
    shown["row"] = curves.join_labels(shown, ["variant_label", "size", "budget"])
    if not shown.empty:
        # the verdicts a row with an interval can have, as plain strings for the chart's JSON
        verdicts = [v.value for v in (stats.Verdict.BETTER, stats.Verdict.WORSE, stats.Verdict.NOT_RESOLVED)]
        base = alt.Chart(shown).encode(y=alt.Y("row:N", title=None, sort=None, axis=alt.Axis(labelLimit=400)))
        bars = base.mark_rule(strokeWidth=3).encode(
            x=alt.X("ci_low:Q", title=f"diff to {reference} (loss), 95 % interval"),
            x2="ci_high:Q",
            color=alt.Color(
                "verdict:N", scale=alt.Scale(domain=verdicts, range=[ui.VERDICT_STROKES[v] for v in verdicts])
            ),
        )
        dots = base.mark_point(filled=True, color="black").encode(
            x="diff:Q", tooltip=["variant_label", "diff", "ci_low", "ci_high", "method", "n_seeds", "n_ref"]
        )
        zero = alt.Chart(pd.DataFrame({"x": [0.0]})).mark_rule(strokeDash=[4, 4]).encode(x="x:Q")
        st.altair_chart((bars + dots + zero).properties(height=alt.Step(34)), width="stretch")
    with st.expander("Seed-to-seed spread per variant (the noise floor's inputs)"):
        st.caption("A variant with one seed at a size and budget has no spread to measure and adds nothing.")
        ui.table(noise.groups, key="noise_groups")
    fit_table, _ = stats.data_fits(evals)
    st.markdown("**Loss-to-data exchange rate**")
    ref_fitted = any(label == reference for label in fit_table.loc[fit_table["note"] == "", "variant_label"])
    if ref_fitted:
        st.caption(
            f"L(D) = E + B·D^(−β) fitted to `{reference}`'s runs at each size; `data_worth_pct` in the table "
            "above: the extra training data (%) the reference would need at its budget to lower its fitted "
            "loss by −diff (negative: the variant is worth less data)."
        )
    else:
        st.caption(
            f"no exchange rate: `{reference}` has no L(D) fit (it needs runs at ≥ {stats.MIN_BUDGETS} token "
            "budgets of one size), so `data_worth_pct` is empty."
        )
    ui.table(fit_table, key="data_fits")

st.header("Iso-FLOP")
tolerance_pct = st.number_input(
    "Equal compute within (%)",
    min_value=0.0,
    max_value=50.0,
    value=100 * comparison.FLOP_TOLERANCE,
    step=1.0,
    format="%.1f",
    key="flop_tolerance",
)
tolerance = tolerance_pct / 100
st.caption(
    "Training FLOPs = FLOPs per token (forward + backward, expected over the loop sampler, padded rounds "
    f"included) × tokens trained. Runs of one size within {tolerance_pct:g} % of each other's FLOPs are "
    "compared (`flops` is their mean); the loss is the one iso-data uses. A cheaper variant trains more "
    "tokens for the same compute (`tokens`)."
)
curve = comparison.iso_flop_curve(evals, tolerance=tolerance)
if curve.empty:
    st.info("no finished run with a FLOP count in this selection yet")
else:
    base = alt.Chart(curve).encode(
        x=alt.X(
            "train_flops:Q", title="training FLOPs", scale=alt.Scale(type="log"), axis=alt.Axis(format=".1e")
        ),
        color=ui.color("variant_label", title="variant"),
    )
    tooltip = ui.seed_tooltip("variant_label", "size", alt.Tooltip("train_flops:Q", format=".3e"), std=False)
    chart = ui.mean_with_spread(base, y_title="loss (mean over seeds)", tooltip=tooltip, spread="rule")
    st.altair_chart(chart.properties(height=360), width="stretch")
    flop_table = comparison.iso_flop_table(
        evals, reference=reference, tolerance=tolerance, threshold=threshold, noise=noise, delta=delta
    )
    if flop_table.empty:
        st.info(
            f"no two variants of one size trained within {tolerance_pct:g} % of each other's FLOPs: nothing "
            "to compare at equal compute (the chart above shows where each variant lies)"
        )
    else:
        st.markdown(
            f"**Runs at equal FLOPs: per seed, mean, difference to `{reference}` with its 95 % interval**"
        )
        ui.table(flop_table, key="iso_flop")
    show_noise_floor()

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
    points = comparison.by_architecture(at_budget, x=x, color=color)
    kind = {c: "Q" if pd.api.types.is_numeric_dtype(points[c]) else "N" for c in (x, color)}
    base = alt.Chart(points).encode(
        x=alt.X(f"{x}:{kind[x]}", title=variants.ARCH_LABELS.get(x, x), scale=alt.Scale(zero=False)),
        color=ui.color(color, kind[color] == "Q", title=variants.ARCH_LABELS.get(color, color)),
    )
    tooltip = ui.seed_tooltip("variant_label", x, color, std=False)
    # points, never a line: the variants are of different recipes, so no line joins them into a trend
    chart = ui.mean_with_spread(
        base, y_title="loss (mean over seeds)", tooltip=tooltip, spread="rule", line=False
    )
    st.caption(
        f"One point per variant at budget {budget} (the loss iso-data uses), min–max over seeds; points, "
        "not a line: variants of different recipes are not one series."
    )
    st.altair_chart(chart.properties(height=340), width="stretch")
    ui.table(points, key="by_arch")

st.header("Iso-time")
st.caption(
    "A run retrained with the wall-clock training time of a reference run (budget `match_time_of`); "
    "both finished their learning-rate decay, so their final losses compare. At equal worker counts "
    "the wall seconds are matched, across worker counts the device-seconds (seconds × workers): "
    "column `matched`."
)
pairs = timing.mark_pairs(comparison.iso_time_pairs(done, threshold=threshold, noise=noise), done)
if pairs.empty:
    st.info("no iso-time pair yet: submit a train job with budget {'match_time_of': <job id>}")
else:
    summary = comparison.iso_time_summary(pairs, threshold=threshold, noise=noise, delta=delta)
    ui.table(summary, key="iso_time_summary")
    ui.table(pairs, key="iso_time_pairs")
    st.caption(
        "`contended`: either run of the pair trained beside another job, so its time is not a "
        "clean measurement; empty: not recorded."
    )
    show_noise_floor()
    ids = tuple(sorted(set(pairs["job_id"]) | set(pairs["ref_job_id"])))
    finished = all_runs.loc[all_runs["status"] == JobStatus.SUCCEEDED, "job_id"]
    wt = curves.wall_time_curves(ui.curves(url, ids, ("val_loss",)), all_runs, finished)
    if not wt.empty:
        st.markdown(
            "**Validation loss vs training wall time** — intermediate points are *not decayed*; "
            "only each finished run's last point is a decayed result."
        )
        how = st.selectbox("Smoothing", list(SMOOTHING), key="compare_smoothing")
        wt = smooth(wt, how, order="wall_s")  # the light line only: the points (and every table) stay raw
        base = alt.Chart(wt).encode(
            x=alt.X("wall_s:Q", title="training wall time (s)"),
            y=alt.Y("value:Q", title="val_loss", scale=alt.Scale(zero=False)),
            color=ui.color("series", legend=alt.Legend(labelLimit=0)),  # whole labels: their ends differ
        )
        pts = base.mark_point(filled=True, size=70).encode(
            y="raw:Q", shape=alt.Shape("point:N", title=None), tooltip=["series", "wall_s", "raw", "point"]
        )
        lines = base.mark_line().encode(y="raw:Q")  # the raw line bold
        if how != "none":  # the smoothed one light over it
            lines = lines + base.mark_line(opacity=SMOOTHED_OPACITY, strokeWidth=1, strokeDash=[6, 2])
        markers = ui.health_markers(url, wt, "wall_s")
        chart = ui.with_health_markers(lines + pts, markers, "wall_s")
        st.altair_chart(chart.properties(height=360), width="stretch")
        st.caption(describe(how, wt))
        ui.health_caption(
            markers,
            note=": the runs' own, on their per-run curves here only (the charts above are means over "
            "seeds and carry none)",
        )

st.header("Training throughput")
tp = comparison.throughput_table(done, reference=reference)
ui.table(tp, precision=3, key="throughput")
