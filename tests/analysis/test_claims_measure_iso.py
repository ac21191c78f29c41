"""The iso-depth study's allocation claims measured on a fitted law (analysis/claims_measure.py): the
compute-optimal width, tokens and unique parameters per r and the loss gap to r = 1 at the runs' largest
budget, each claim's figure from the estimate's optimum and its interval from the bootstrap draws, each
draw re-optimised. Runs are generated from the law with known parameters (tests/analysis/test_scaling.py):
φ = 0.5 (a recurrence worth less than a unique block) gives the study's picture, φ = 1.4 the opposite."""

from __future__ import annotations

import numpy as np
import pytest

from looplab.analysis import claims, claims_measure, iso_depth
from tests.analysis import test_scaling as law

RS = (1, 2, 4, 8)
ARCH = law.architectures(rs=RS)
ALLOCATION = claims_measure.ALLOCATION_CLAIMS


def runs(phi: float, rs=RS):
    return law.synthetic(3, {**law.TRUE, "phi": phi}, rs=rs, arch=ARCH)


def judged(phi: float, rs=RS) -> dict[str, claims.Judgement]:
    study = iso_depth.fit_iso_depth(runs(phi, rs), bootstrap=40, seed=0)
    return {j.claim.id: j for j in claims_measure.iso_depth_judgements(study)}


@pytest.fixture(scope="module")
def study_like():
    return judged(0.5)


def test_a_law_like_the_studys_replicates_every_allocation_claim(study_like):
    assert {k: str(study_like[k].verdict) for k in ALLOCATION} == {k: "replicated" for k in ALLOCATION}
    assert all(study_like[k].ours.method.startswith("bootstrap of the fit") for k in ALLOCATION)


def test_the_figure_is_the_compute_optimal_table_s(study_like):
    """θ of the gap claims from the same optimum `looplab fit iso-depth` prints."""
    study = iso_depth.fit_iso_depth(runs(0.5), bootstrap=40, seed=0)
    gap = study.optimal.set_index("r")["gap_to_r1"]
    assert study_like["iso.no_crossover"].ours.value == pytest.approx(min(gap[2], gap[4], gap[8]))
    assert study_like["iso.gap_grows_with_r"].ours.value == pytest.approx(min(np.diff([gap[r] for r in RS])))
    low, high = study_like["iso.no_crossover"].ours.low, study_like["iso.no_crossover"].ours.high
    assert low <= study_like["iso.no_crossover"].ours.value <= high


def test_recurrence_worth_more_than_a_block_contradicts_them():
    got = judged(1.4)
    for key in (
        "iso.optimal_width_grows",
        "iso.optimal_tokens_fall",
        "iso.gap_grows_with_r",
        "iso.no_crossover",
    ):
        assert got[key].verdict == claims.ClaimVerdict.CONTRADICTED, key


def test_runs_without_r_4_and_8_leave_the_trends_not_run_and_say_which():
    got = judged(0.5, rs=(1, 2))
    trend = got["iso.optimal_width_grows"]
    assert trend.verdict == claims.ClaimVerdict.NOT_RUN and "runs at r = 4, 8" in trend.reason
