"""Claims: every claim of the three studies (`analysis/claims.py`) with its verdict on the selected runs,
the study's figure, band and scale beside ours with its interval and scale, whether it was judged on
size and sign or on sign only, a premise our runs do not meet (with the figure), the study's stated
figure and any contradiction within the study, the runs it rests on and the reason; every row shown
(no scrolling box), filters by study, verdict and what was judged. The same scorecard as
`looplab claims` (docs/claims.md).

Runs: the sidebar's selection, finished ones. The iso-depth claims read the law fitted to its
iso_depth runs (the Scaling page's defaults: 200 resamples, seed 0, the linear loss)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from looplab.analysis import claims, claims_measure, variants
from looplab.dashboard import ui
from looplab.orchestrator.states import JobStatus

JUDGED = [claims.ON_SIZE, claims.SIGN_ONLY, claims.NOT_JUDGEABLE]  # what each row was judged on


@st.cache_data(show_spinner="fitting the iso-depth law ...", max_entries=8)
def fitted(runs: pd.DataFrame):
    return claims_measure.fit_law(runs)


st.title("Claims")
st.caption(
    "Each claim of the three studies judged by one rule, on sign and size: replicated when our 95 % "
    "interval lies on the claimed side of its line and, for a magnitude, inside the band of the study's "
    "figure; contradicted on the other side or wholly outside the band; not resolved across either "
    "edge; not run without the runs it needs. A scale-free figure (a share, a ratio, an exponent) is "
    "judged on size at any scale, a scale-bound one (a loss difference) on size only at the parameters "
    "and tokens the study prints for it and on sign elsewhere (`judged`; `scale_note` says why, also "
    "where the study prints no scale). `premise` names what a claim takes for granted that these "
    "runs do not show. See docs/claims.md."
)
url = ui.url()
runs = ui.filter_runs(variants.with_variants(ui.runs(url)))
done = runs[runs["status"] == JobStatus.SUCCEEDED]
study, why = claims_measure.iso_fit(done, fitted, "this selection")
geometry = {"deltas": ui.round_deltas(url), "interactions": ui.round_interactions(url)}
card = claims_measure.scorecard(
    done, ui.filter_by_runs(ui.depth(url), done), iso=study, iso_note=why, **geometry
)

c1, c2, c3 = st.columns(3)
studies = c1.multiselect("Study", list(claims.STUDIES), key="claims_study")
verdicts = c2.multiselect("Verdict", [str(v) for v in claims.ClaimVerdict], key="claims_verdict")
judged_as = c3.multiselect("Judged on", JUDGED, key="claims_judged")
shown = card[card["study"].isin(studies or list(claims.STUDIES))]
shown = shown[shown["verdict"].isin(verdicts or [str(v) for v in claims.ClaimVerdict])]
shown = shown[shown["judged"].isin(judged_as or [*JUDGED, ""])]
counts = card["verdict"].value_counts()
unmet = int((card["premise"] != "").sum())
st.markdown(
    f"**{len(card)} claims**: "
    + ", ".join(f"{n} {verdict}" for verdict, n in counts.items())
    + (f" · {unmet} premise not met" if unmet else "")
    + f" · {len(done)} finished run(s) selected"
)
# what a person reads first fits 1,280 px beside the sidebar: the claim, its verdict, what was judged and
# the two figures; the statement and the rest follow (the grid scrolls sideways for them)
FIRST = ["claim", "verdict", "judged", "study_figure", "ours", "premise"]
order = [*FIRST, *(c for c in shown.columns if c not in FIRST)]
ui.table(shown[order].reset_index(drop=True), key="claims_table", height="content")
