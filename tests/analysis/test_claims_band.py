"""The rule on size (`analysis.claims.band_of`, `judge`): the issue's cases, each with its verdict.

- bands of stated width at the study's own scale (a 4→8 drop of 0.0175 and 0.0178 against the note's
  "about 0.016"; a share of 93.0 % against its 94 %) replicate, and the same figures moved outside the
  band contradict;
- one noise floor for every comparison of one depth sweep: with every loop count 0.005 above 12, "best at
  12" is not resolved while "flat 6-32" replicates; a +0.00022 and a +0.00026 step are both inside it;
- the study's own printed numbers replicate every magnitude claim they cover, and the same figures moved
  just past the band's far edge (still on the claimed side of the line) contradict.

Pure: the values are the registry's own or made here (no study file is read).
"""

from __future__ import annotations

import math

import pandas as pd
import pytest

from looplab.analysis import claims, claims_text
from looplab.analysis.claims import Scale
from looplab.analysis.stats import ClaimVerdict

C = claims.BY_ID
AT_144M = Scale("144M", "1000000000 token", (0, 1), "cpu")  # the note's 1.44 亿 / 10 亿 token, our seeds
TINY = Scale("0.2M", "1048576 token", (0, 1), "cpu")


def sweep(values: dict[int, tuple[float, float]], series: str = "parcae") -> pd.DataFrame:
    """Two seeds' values of one series: {loops: (seed 0, seed 1)}."""
    rows = [(series, x, s, v) for x, pair in values.items() for s, v in enumerate(pair)]
    return pd.DataFrame(rows, columns=claims.POINT_COLUMNS)


def test_a_drop_of_0175_and_0178_replicates_about_0016_at_the_studys_scale():
    claim = C["lean.parcae_gain_4_to_8"]
    band = claims.band_of(claim)
    assert band.low < -0.0178 and band.high > -0.0175 and "stated 0.016" in band.source
    points = sweep({4: (3.2622, 3.2610), 8: (3.2622 - 0.0175, 3.2610 - 0.0178)})
    j = claims.judge_points(claim, points, AT_144M)
    assert j.at_scale and j.judged == claims.ON_SIZE
    assert j.verdict == ClaimVerdict.REPLICATED, j.reason
    # a drop of 0.05 and 0.051: the right sign, three times the note's size
    far = sweep({4: (3.2622, 3.2610), 8: (3.2622 - 0.05, 3.2610 - 0.051)})
    j = claims.judge_points(claim, far, AT_144M)
    assert j.verdict == ClaimVerdict.CONTRADICTED and "misses" in j.reason
    # the same at another scale: a scale-bound loss difference is judged on sign only
    j = claims.judge_points(claim, far, TINY)
    assert j.verdict == ClaimVerdict.REPLICATED and j.judged == claims.SIGN_ONLY


def test_a_share_of_93_percent_replicates_the_notes_94():
    claim = C["lean.parcae_share_4_of_8"]
    share = sweep({1: (3.50, 3.49), 4: (3.50 - 0.93 * 0.25, 3.49 - 0.93 * 0.25), 8: (3.25, 3.24)})
    j = claims.judge_points(claim, share, AT_144M)
    assert math.isclose(j.ours.value, 0.93) and j.verdict == ClaimVerdict.REPLICATED, j.reason
    # a share is scale-free: at the tiny scale it is still judged on size; 0.6 is "most" but not 94 %
    j = claims.judge_points(claim, share, TINY)
    assert j.judged == claims.ON_SIZE and j.verdict == ClaimVerdict.REPLICATED
    low = sweep({1: (3.50, 3.49), 4: (3.50 - 0.6 * 0.25, 3.49 - 0.6 * 0.25), 8: (3.25, 3.24)})
    j = claims.judge_points(claim, low, TINY)
    assert j.verdict == ClaimVerdict.CONTRADICTED and "misses the study's band" in j.reason


def test_near_saturation_the_default_band_is_a_share_of_what_remains():
    """±25 % of 0.94 would let a share of 71 % "replicate" the note's 94 %: for a fraction of a whole the
    default half-width is 25 % of its distance to 1 (0.016), widened only by the study's own two-seed
    interval and its printed 94 %."""
    claim = C["lean.parcae_share_4_of_8"]
    band = claims.band_of(claim)
    assert claims.bounded(claim) and 0.91 < band.low < 0.93 and 0.95 < band.high < 0.96
    assert "1 − it" in band.source

    def share(value: float) -> pd.DataFrame:
        return sweep({1: (3.50, 3.49), 4: (3.50 - value * 0.25, 3.49 - value * 0.25), 8: (3.25, 3.24)})

    assert claims.judge_points(claim, share(0.93), TINY).verdict == ClaimVerdict.REPLICATED
    j = claims.judge_points(claim, share(0.80), TINY)  # most of the gain, but not "94 %"
    assert j.verdict == ClaimVerdict.CONTRADICTED and "misses the study's band" in j.reason
    # a figure that is not a fraction keeps ±25 % of itself
    drop = claims.band_of(C["lean.parcae_gain_4_to_8"])
    assert not claims.bounded(C["lean.parcae_gain_4_to_8"]) and "±25% of -0.0159;" in drop.source


def test_one_depth_sweep_is_read_at_one_noise_floor():
    # every loop count 0.005 above 12, on both seeds
    base = {12: (3.2458, 3.2446)}
    values = {x: (base[12][0] + 0.005, base[12][1] + 0.005) for x in (1, 2, 3, 4, 6, 8, 16, 24, 32)}
    points = sweep({**base, **values})
    best = claims.judge_points(C["lean.parcae_best_at_12"], points, AT_144M)
    flat = claims.judge_points(C["lean.parcae_flat_6_to_32"], points, AT_144M)
    assert flat.verdict == ClaimVerdict.REPLICATED  # within the note's 0.01
    assert best.verdict == ClaimVerdict.NOT_RESOLVED and "noise floor 0.01" in best.reason
    assert claims.floor_of(C["lean.parcae_best_at_12"]) == claims.line_of(C["lean.parcae_flat_6_to_32"])
    # 0.02 above 12 everywhere: now 12 is best beyond the floor, and the sweep is not flat
    clear = sweep({**base, **{x: (v[0] + 0.015, v[1] + 0.015) for x, v in values.items()}})
    assert claims.judge_points(C["lean.parcae_best_at_12"], clear, AT_144M).verdict == ClaimVerdict.REPLICATED
    assert (
        claims.judge_points(C["lean.parcae_flat_6_to_32"], clear, AT_144M).verdict
        == ClaimVerdict.CONTRADICTED
    )


def test_two_steps_inside_the_floor_get_the_same_verdict():
    # lean 8 loops +0.00022 above 4 (claimed: worse); parcae 8 loops +0.00026 above 4 (claimed: better)
    lean = sweep({4: (3.30, 3.31), 8: (3.30022, 3.31022)}, "lean")
    parcae = sweep({4: (3.26, 3.25), 8: (3.26026, 3.25026)})
    a = claims.judge_points(C["lean.lean_8_loops_worse"], lean, TINY)
    b = claims.judge_points(C["lean.parcae_gain_4_to_8"], parcae, TINY)
    assert a.verdict == b.verdict == ClaimVerdict.NOT_RESOLVED, (a.reason, b.reason)


def test_two_seeds_give_a_t_interval_not_their_range():
    claim = C["lean.parcae_gain_4_to_8"]
    est = claims.estimate(claim, sweep({4: (3.26, 3.25), 8: (3.24, 3.232)}))  # θ −0.02 and −0.018
    assert est.method == "t interval over 2 seeds"
    assert est.low < -0.02 - 0.005 and est.high > -0.018 + 0.005  # far wider than the range


def _outside(claim: claims.Claim, band: claims.Band) -> claims.Estimate:
    """The study's own figure moved just past the band's edge away from the line (the claimed side)."""
    width = max(band.high - band.low, 1e-6)
    if claim.side == claims.Side.ABOVE:
        low = band.high + 0.05 * width
    else:
        low = band.low - 0.15 * width
    return claims.Estimate(low + 0.05 * width, low, low + 0.1 * width, 3, "shifted")


def test_the_studys_numbers_replicate_and_shifted_outside_the_band_contradict():
    """Every magnitude claim with printed values: the study's own numbers at its own scale replicate on
    size; moved past the band's far edge they contradict; the same moved figure at another scale is
    judged on sign only for a scale-bound figure (replicated, the reason saying size was not judged)
    and still on size for a scale-free one (contradicted)."""
    shifted = replicated = 0
    notes = dict.fromkeys(claims.SCALE_NOTES, 0)  # what the judgements at another scale compared
    for c in claims.CLAIMS:
        band = claims.band_of(c)
        if band is None:
            continue
        assert band.low <= claims.study_estimate(c).value <= band.high, c.id
        if not c.own_evidence:  # those that cannot replicate on their own numbers say why (test_claims_rule)
            own = claims.judge(c, claims.study_estimate(c), c.scale)
            assert own.verdict == ClaimVerdict.REPLICATED, (c.id, own.reason)
            assert own.judged == claims.ON_SIZE and own.scale_note == claims.AT_SCALE, c.id
            replicated += 1
        moved = claims.judge(c, _outside(c, band), c.scale)
        assert moved.verdict == ClaimVerdict.CONTRADICTED and "misses" in moved.reason, (c.id, moved.reason)
        shifted += 1
        elsewhere = claims.judge(c, _outside(c, band), TINY)
        if c.kind in claims.SCALE_FREE_KINDS:
            assert (
                elsewhere.verdict == ClaimVerdict.CONTRADICTED and elsewhere.scale_note == claims.SCALE_FREE
            )
            notes[elsewhere.scale_note] += 1
            continue
        assert elsewhere.verdict == ClaimVerdict.REPLICATED and elsewhere.judged == claims.SIGN_ONLY, c.id
        assert elsewhere.scale_note == (claims.OTHER_SCALE if c.scale.stated else claims.NO_SCALE), c.id
        assert "size not judged" in elsewhere.reason, c.id
        notes[elsewhere.scale_note] += 1
    # 47 bands, single runs included (our default noise); 42 replicated on size by the study's own numbers
    assert shifted >= 45 and replicated >= 40 and notes[claims.AT_SCALE] == 0
    # scale-bound figures with a printed scale, those whose lines print none, scale-free ones
    assert notes[claims.OTHER_SCALE] >= 15 and notes[claims.NO_SCALE] >= 8 and notes[claims.SCALE_FREE] >= 15


def test_every_single_run_figure_gets_a_band_marked_as_ours_or_a_reason_for_none():
    """A magnitude figure the study prints from one run without a noise statement: its interval comes from
    our documented default for its unit (`claims.default_of`), its band says "band: default (reason)", and
    the study's own numbers reach a verdict on size; an R² gets no band, with the reason."""
    single = [
        c
        for c in claims.CLAIMS
        if c.kind in claims.MAGNITUDE_KINDS and c.points and claims.default_of(c) is not None
    ]
    assert len(single) >= 20
    judged_on_size = 0
    for c in single:
        study = claims.study_estimate(c)
        assert study.defined and "our default noise" in study.method, c.id
        band = claims.band_of(c)
        if c.no_band:
            assert band is None
            j = claims.judge(c, study, c.scale)
            assert j.judged == claims.SIGN_ONLY and "size not judgeable: " + c.no_band in j.reason
            continue
        assert band.low <= study.low and study.high <= band.high, c.id  # its own noise fits its band
        if len(c.stated) < 2:  # no range printed: the width is wholly ours, and says so
            text = band.describe()
            assert "(band: default (" in text and claims.default_of(c).why in text, c.id
            card = claims.scorecard([claims.judge(c, study, c.scale)])
            assert card.loc[0, "band"] == text
            assert "]d " in claims_text.text_scorecard(card) or "]d\n" in claims_text.text_scorecard(card), (
                c.id
            )
        j = claims.judge(c, study, c.scale)
        judged_on_size += j.judged == claims.ON_SIZE and j.verdict == ClaimVerdict.REPLICATED
    assert judged_on_size >= 15
    assert [c.id for c in single if c.no_band] == ["iso.fit_r2"]
    # a band the study gives part of (its seeds, its noise, a stated range) is not marked as ours
    assert "band: default" not in claims.band_of(C["lean.parcae_gain_4_to_8"]).describe()
    assert "band: default" not in claims.band_of(C["lean.decode_speedup"]).describe()


def test_a_gain_of_a_point_and_a_half_from_single_runs_is_not_resolved_but_three_seeds_are():
    """The report's 5×4 layout beats NonLoop by 1.63 points, one model each: inside our default ±2
    points, so its own numbers cannot resolve it; three seeds of ours agreeing on +1.6 can, on sign (the
    report prints no parameter or token count, so a difference of ours is judged on sign only)."""
    claim = C["loop.5x4_beats_nonloop"]
    own = claims.judge(claim, claims.study_estimate(claim), claim.scale)
    assert own.verdict == ClaimVerdict.NOT_RESOLVED and "reaches across the line" in own.reason
    assert claim.own_evidence
    rows = [("NonLoop", 20, s, 30.0 + 0.1 * s) for s in (0, 1, 2)]
    rows += [("5×4", 30, s, 31.6 + 0.1 * s + 0.02 * (s % 2)) for s in (0, 1, 2)]
    ours = claims.judge_points(claim, pd.DataFrame(rows, columns=claims.POINT_COLUMNS), TINY)
    assert ours.verdict == ClaimVerdict.REPLICATED and ours.judged == claims.SIGN_ONLY, ours.reason
    assert "our default" not in ours.ours.method  # three seeds measure their own spread
    one = claims.judge_points(claim, pd.DataFrame([rows[0], rows[3]], columns=claims.POINT_COLUMNS), TINY)
    assert one.verdict == ClaimVerdict.NOT_RESOLVED and "our default noise ±2" in one.ours.method


def test_a_fitted_figure_printed_without_an_interval_is_taken_to_its_printed_digit():
    phi = claims.study_estimate(C["iso.phi_below_one"])
    assert (phi.low, phi.high) == pytest.approx((0.455, 0.465))
    worth = claims.study_estimate(C["iso.worth_at_4"])  # 4 ** φ over φ's printed digit
    assert (worth.low, worth.high) == pytest.approx((4**0.455, 4**0.465))
    j = claims.judge(C["iso.phi_below_one"], phi, C["iso.phi_below_one"].scale)
    assert j.verdict == ClaimVerdict.REPLICATED and j.judged == claims.ON_SIZE
    # our runs' values carry no printed digit: a fit must bring its own interval
    ours = pd.DataFrame([("phi", "fit", 0, 0.47)], columns=claims.POINT_COLUMNS)
    assert not claims.estimate(C["iso.phi_below_one"], ours).defined


def test_a_share_of_a_gain_that_does_not_exist_is_premise_not_met():
    claim = C["lean.parcae_share_4_of_8"]
    # 1 → 8 loops gains 0.0003 (inside the note's 0.01): any "share" of it is a share of noise
    flat = sweep({1: (3.2500, 3.2400), 4: (3.2498, 3.2398), 8: (3.2497, 3.2397)})
    j = claims.judge_points(claim, flat, TINY)
    assert j.verdict == ClaimVerdict.NOT_RESOLVED and j.reason.startswith("premise not met")
    assert "+0.0003" in j.premise and "noise margin 0.01" in j.premise
    card = claims.scorecard([j])
    assert card.loc[0, "premise"] == j.premise
    # a loss that rises with loops: no gain at all
    rising = sweep({1: (3.20, 3.21), 4: (3.25, 3.26), 8: (3.30, 3.31)})
    assert "is -0.1 in these runs: no gain" in claims.judge_points(claim, rising, TINY).premise
    # the study's own sweep meets it
    assert claims.judge_points(claim, claims.study_points(claim), TINY).premise == ""


def test_a_figure_computed_from_the_studys_values_is_marked_derived_with_its_computation():
    judged = {c.id: claims.judge(c, claims.study_estimate(c), c.scale) for c in claims.CLAIMS}
    card = claims.scorecard(judged.values()).set_index("claim")
    speedup = card.loc["lean.train_speedup", "study_figure"]
    assert speedup.startswith("1.416") and "derived: parcae@time / lean@time" in speedup
    assert "derived: 4 ** phi@fit" in card.loc["iso.worth_at_4", "study_figure"]
    share = card.loc["lean.parcae_share_4_of_8", "study_figure"]
    assert "derived: (parcae@1 − parcae@4) / (parcae@1 − parcae@8), mean over seeds 43, 44" in share
    # a value the study prints as it is (φ = 0.46) is not marked
    assert "derived" not in card.loc["iso.phi_below_one", "study_figure"]
    assert "1.86 (printed; disagrees with the 1.892" in card.loc["iso.worth_at_4", "stated"]


def test_the_samplers_share_of_short_draws_is_judged_on_our_implementation(monkeypatch):
    from looplab.analysis import findings
    from looplab.model.presets import preset

    claim = C["lean.tenth_draw_four_or_fewer"]  # about a tenth of draws at 4 loops or fewer (line 42)
    empty = pd.DataFrame(columns=["job_id", "recipe"])
    j = findings.judge_lean_claim(claim, empty, empty)  # no parcae runs: nothing trained with it
    assert j.verdict == ClaimVerdict.NOT_RUN and "parcae runs" in j.reason
    runs = pd.DataFrame({"job_id": [7], "recipe": ["parcae"]})
    j = findings.judge_lean_claim(claim, empty, runs)
    assert j.runs == (7,)
    assert j.ours.value == pytest.approx(0.0996, abs=1e-4)  # Poisson(8) at most 4
    assert j.verdict == ClaimVerdict.REPLICATED and j.judged == claims.ON_SIZE
    # a sampler with mean 6 draws 4 or fewer 29 % of the time: under half, but not "about a tenth"
    monkeypatch.setattr(findings, "preset", lambda name: preset(name, loops=6))
    j = findings.sampler_judgement(claim)
    assert j.ours.value == pytest.approx(0.285, abs=1e-3)
    assert j.verdict == ClaimVerdict.CONTRADICTED and "misses the study's band" in j.reason
