"""Claims: every claim of the three studies (`analysis/claims.py`) with its verdict on the selected runs,
the study's figure and scale beside ours with its interval and scale, the runs it rests on and the
reason; filters by study and verdict. The same scorecard as `looplab claims` (docs/claims.md).

Runs: the sidebar's selection, finished ones. The iso-depth claims read the law fitted to its
iso_depth runs (the Scaling page's defaults: 200 resamples, seed 0, the linear loss)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from looplab.analysis import claims, claims_measure, variants
from looplab.dashboard import ui
from looplab.orchestrator.states import JobStatus


@st.cache_data(show_spinner="fitting the iso-depth law ...", max_entries=8)
def fitted(runs: pd.DataFrame):
    return claims_measure.fit_law(runs)


st.title("Claims")
st.caption(
    "Each claim of the three studies judged by one rule: replicated when our 95 % interval lies on the "
    "claimed side of its line (and, at the study's scale, meets the study's figure), contradicted on the "
    "other side, not resolved across it, not run without the runs it needs. Runs at another scale than "
    "the claim's are judged on direction and shape only (`scale_note`). See docs/claims.md."
)
url = ui.url()
runs = ui.filter_runs(variants.with_variants(ui.runs(url)))
done = runs[runs["status"] == JobStatus.SUCCEEDED]
study, why = claims_measure.iso_fit(done, fitted, "this selection")
geometry = {"deltas": ui.round_deltas(url), "interactions": ui.round_interactions(url)}
card = claims_measure.scorecard(
    done, ui.filter_by_runs(ui.depth(url), done), iso=study, iso_note=why, **geometry
)

c1, c2 = st.columns(2)
studies = c1.multiselect("Study", list(claims.STUDIES), key="claims_study")
verdicts = c2.multiselect("Verdict", [str(v) for v in claims.ClaimVerdict], key="claims_verdict")
shown = card[card["study"].isin(studies or list(claims.STUDIES))]
shown = shown[shown["verdict"].isin(verdicts or [str(v) for v in claims.ClaimVerdict])]
counts = card["verdict"].value_counts()
st.markdown(
    f"**{len(card)} claims**: "
    + ", ".join(f"{n} {verdict}" for verdict, n in counts.items())
    + f" · {len(done)} finished run(s) selected"
)
ui.table(shown.reset_index(drop=True), key="claims_table")
