"""One rule, both ways: analysis.claims.judge on the studies' own values (which must replicate what they
cover), on the same values with a sign flipped (contradicted) and with the interval widened across the
line (not resolved); one case per comparison kind, the scale marking and the runs a claim needs.

Pure: the values are the registry's own (no study file is read here).
"""

from __future__ import annotations

import math

import pandas as pd
import pytest

from looplab.analysis import claims
from looplab.analysis.claims import Comparison, Scale
from looplab.analysis.stats import ClaimVerdict, Verdict

C = claims.BY_ID
TINY = Scale("0.2M", "1048576 token", (0, 1), "cpu")
AT_86M = Scale("86.5M", "500000000 token", (0, 1, 2), "h200")


def own(claim_id: str) -> pd.DataFrame:
    return claims.study_points(C[claim_id])


def verdict(claim_id: str, points: pd.DataFrame, scale: Scale | None = TINY) -> ClaimVerdict:
    return claims.judge_points(C[claim_id], points, scale).verdict


def changed(points: pd.DataFrame, series: str, x, delta: float) -> pd.DataFrame:
    """`points` with `delta` added to every seed's value of (series, x)."""
    out = points.copy()
    hit = (out["series"] == series) & (out["x"] == x)
    assert hit.any()
    out.loc[hit, "value"] += delta
    return out


def swapped(points: pd.DataFrame, a: str, b: str) -> pd.DataFrame:
    """`points` with series a and b exchanged: every difference between them changes sign."""
    out = points.copy()
    out["series"] = out["series"].map(lambda s: b if s == a else a if s == b else s)
    return out


def test_the_studies_own_values_replicate_every_claim_they_resolve():
    replicated = 0
    for c in claims.CLAIMS:
        j = claims.judge(c, claims.study_estimate(c), c.scale)
        if c.own_evidence:
            assert j.verdict != ClaimVerdict.REPLICATED, c.id  # the reason recorded is still true
        else:
            assert j.verdict == ClaimVerdict.REPLICATED, (c.id, j.reason)
            assert j.at_scale, c.id  # the study's numbers are at its own scale
            replicated += 1
    assert replicated >= 30
    assert replicated == sum(not c.own_evidence for c in claims.CLAIMS)


def test_a_difference_flipped_is_contradicted_and_one_widened_across_zero_is_not_resolved():
    points = own("lean.lean_beats_parcae_86m")  # lean − parcae on three seeds: −0.0183, −0.0274, −0.0305
    assert verdict("lean.lean_beats_parcae_86m", points) == ClaimVerdict.REPLICATED
    assert (
        verdict("lean.lean_beats_parcae_86m", swapped(points, "lean", "parcae")) == ClaimVerdict.CONTRADICTED
    )
    # seed 44's difference moved up by 0.06 to +0.0326: the mean stays below 0, the t interval reaches across it
    wide = changed(points, "lean", 4, 0.0)
    wide.loc[(wide["series"] == "lean") & (wide["seed"] == 44), "value"] += 0.06
    j = claims.judge_points(C["lean.lean_beats_parcae_86m"], wide, TINY)
    assert j.ours.value < 0 < j.ours.high and j.verdict == ClaimVerdict.NOT_RESOLVED


def test_one_seed_takes_the_studys_noise_as_its_half_width():
    points = own("lean.ablation_parcae")  # parcae − fixed4 = +0.0106 on one run, ±0.01
    j = claims.judge_points(C["lean.ablation_parcae"], points, TINY)
    assert j.verdict == ClaimVerdict.REPLICATED and (j.ours.low, j.ours.high) == pytest.approx(
        (0.0006, 0.0206)
    )
    assert "noise ±0.01" in j.ours.method
    halved = changed(points, "parcae", 4, -0.006)  # +0.0046 ± 0.01 reaches across 0
    assert verdict("lean.ablation_parcae", halved) == ClaimVerdict.NOT_RESOLVED
    # the sign flipped: −0.0106 ± 0.01 lies wholly on the other side
    assert verdict("lean.ablation_parcae", swapped(points, "parcae", "fixed4")) == ClaimVerdict.CONTRADICTED


def test_no_worse_is_judged_against_the_noise_margin():
    points = own("lean.ablation_lean")  # lean − fixed4 = −0.0077: no worse than +0.01
    assert verdict("lean.ablation_lean", points) == ClaimVerdict.REPLICATED
    assert verdict("lean.ablation_lean", changed(points, "lean", 4, 0.015)) == ClaimVerdict.NOT_RESOLVED
    assert verdict("lean.ablation_lean", changed(points, "lean", 4, 0.035)) == ClaimVerdict.CONTRADICTED


def test_within_noise_of_a_depth_sweep():
    points = own("lean.parcae_flat_beyond_8")
    assert verdict("lean.parcae_flat_beyond_8", points) == ClaimVerdict.REPLICATED
    assert (
        verdict("lean.parcae_flat_beyond_8", changed(points, "parcae", 16, 0.05)) == ClaimVerdict.CONTRADICTED
    )
    spread = points.copy()  # seed 43 rises by 0.002 at 24 loops, seed 44 by 0.03: the interval spans 0.01
    spread.loc[(spread["x"] == 24) & (spread["seed"] == 44), "value"] += 0.03
    assert verdict("lean.parcae_flat_beyond_8", spread) == ClaimVerdict.NOT_RESOLVED


def test_a_share_of_the_gain():
    points = own("lean.parcae_share_4_of_8")
    assert verdict("lean.parcae_share_4_of_8", points) == ClaimVerdict.REPLICATED
    # 4 loops raised to 0.8 of the way back to 1 loop: the share falls to about 0.2
    assert verdict("lean.parcae_share_4_of_8", changed(points, "parcae", 4, 0.2)) == ClaimVerdict.CONTRADICTED


def test_the_location_of_the_best_loop_count():
    points = own("lean.lean_best_at_4")
    assert verdict("lean.lean_best_at_4", points) == ClaimVerdict.REPLICATED
    # 6 loops 1.0 below on both seeds: two seeds' t interval (one degree of freedom) is wide, but
    # wholly on the other side
    assert verdict("lean.lean_best_at_4", changed(points, "lean", 6, -1.0)) == ClaimVerdict.CONTRADICTED
    # 0.3 below: the two seeds' excesses (−0.079, −0.125) give a t interval reaching across 0
    assert verdict("lean.lean_best_at_4", changed(points, "lean", 6, -0.3)) == ClaimVerdict.NOT_RESOLVED
    near = points.copy()  # 6 loops below 4 on one seed, above on the other
    near.loc[(near["x"] == 6) & (near["seed"] == 43), "value"] = 3.2413 - 0.01
    near.loc[(near["x"] == 6) & (near["seed"] == 44), "value"] = 3.2392 + 0.01
    assert verdict("lean.lean_best_at_4", near) == ClaimVerdict.NOT_RESOLVED


def test_a_trend_over_a_sweep():
    points = own("lean.iso_time_gap_shrinks")  # the equal-time gap shrinks from 86 M 1.8 h to 144 M 11.3 h
    assert verdict("lean.iso_time_gap_shrinks", points) == ClaimVerdict.REPLICATED
    reversed_gaps = points.copy()
    order = {"86 M 1.8 h": "144 M 11.3 h", "144 M 11.3 h": "86 M 1.8 h", "144 M 5.7 h": "144 M 5.7 h"}
    reversed_gaps["x"] = reversed_gaps["x"].map(order)
    assert verdict("lean.iso_time_gap_shrinks", reversed_gaps) == ClaimVerdict.CONTRADICTED


def test_a_fitted_exponent_comes_with_the_fits_interval():
    """φ is scale-free: at any scale it is compared with the study's 0.46 (band ±25 %: 0.345 to 0.575),
    with the fit's interval."""
    claim = C["iso.phi_below_one"]
    assert claims.judge(claim, claims.fitted(0.47, 0.40, 0.55, 24), TINY).verdict == ClaimVerdict.REPLICATED
    assert claims.judge(claim, claims.fitted(1.3, 1.1, 1.5, 24), TINY).verdict == ClaimVerdict.CONTRADICTED
    # below 1 as claimed, but twice the study's φ: contradicted on size (the φ of 0.9)
    j = claims.judge(claim, claims.fitted(0.9, 0.8, 0.99, 24), TINY)
    assert j.verdict == ClaimVerdict.CONTRADICTED and "misses the study's band" in j.reason
    assert j.judged == claims.ON_SIZE and not j.at_scale
    # an interval reaching across the band's edge is not resolved
    assert claims.judge(claim, claims.fitted(0.5, 0.3, 0.7, 24), TINY).verdict == ClaimVerdict.NOT_RESOLVED
    worth = C["iso.worth_at_4"]  # 4^φ under the 4 blocks it costs, about 1.86
    assert claims.judge(worth, claims.fitted(1.9, 1.7, 2.1, 24), TINY).verdict == ClaimVerdict.REPLICATED
    assert claims.judge(worth, claims.fitted(3.0, 2.8, 3.2, 24), TINY).verdict == ClaimVerdict.CONTRADICTED


def rank_points(sign: float, seeds=(0, 1, 2)) -> pd.DataFrame:
    rows = []
    for seed in seeds:
        for i, r in enumerate((1, 2, 4, 8)):
            rows.append(("eval_loss", r, seed, 3.0 + 0.1 * i + 0.01 * seed))
            rows.append(("knowledge accuracy", r, seed, 50.0 - sign * 2.0 * i))
    return pd.DataFrame(rows, columns=claims.POINT_COLUMNS)


def test_a_rank_correlation():
    # accuracy falls as the loss rises: ρ = −1 on every seed
    assert verdict("iso.knowledge_follows_loss", rank_points(1.0)) == ClaimVerdict.REPLICATED
    assert verdict("iso.knowledge_follows_loss", rank_points(-1.0)) == ClaimVerdict.CONTRADICTED
    mixed = pd.concat([rank_points(1.0, (0,)), rank_points(-1.0, (1,)), rank_points(1.0, (2,))])
    assert verdict("iso.knowledge_follows_loss", mixed) == ClaimVerdict.NOT_RESOLVED


def test_a_ratio():
    points = own("lean.kv_third")  # exact sizes: no noise
    assert verdict("lean.kv_third", points) == ClaimVerdict.REPLICATED
    assert verdict("lean.kv_third", swapped(points, "lean", "parcae8")) == ClaimVerdict.CONTRADICTED
    timing = own("lean.train_speedup")  # one timing each: our default ±1 % per timing (lines 71, 89)
    j = claims.judge_points(C["lean.train_speedup"], timing, TINY)
    assert j.verdict == ClaimVerdict.REPLICATED and "our default noise ±1% per value" in j.ours.method
    assert (j.ours.low, j.ours.high) == pytest.approx((8.07 / 5.7 * 0.99 / 1.01, 8.07 / 5.7 * 1.01 / 0.99))
    # lean 1 % faster: inside two timings' noise, so not resolved
    close = changed(timing, "lean", "time", 8.07 / 1.01 - 5.7)
    assert verdict("lean.train_speedup", close) == ClaimVerdict.NOT_RESOLVED
    seeds = pd.DataFrame(
        [("parcae", "time", s, v) for s, v in ((0, 2.0), (1, 2.1))]
        + [("lean", "time", s, v) for s, v in ((0, 1.4), (1, 1.5))],
        columns=claims.POINT_COLUMNS,
    )
    assert verdict("lean.train_speedup", seeds) == ClaimVerdict.REPLICATED
    assert verdict("lean.train_speedup", swapped(seeds, "lean", "parcae")) == ClaimVerdict.CONTRADICTED


def test_at_the_studys_scale_magnitude_counts_elsewhere_direction_only():
    points = own("lean.lean_beats_parcae_86m")
    far = changed(points, "lean", 4, -0.2)  # lean 0.2 better: the right side, 8 times the study's size
    at_scale = claims.judge_points(C["lean.lean_beats_parcae_86m"], far, AT_86M)
    assert at_scale.at_scale and at_scale.verdict == ClaimVerdict.CONTRADICTED and "misses" in at_scale.reason
    assert at_scale.scale_note == "at the study's scale"
    elsewhere = claims.judge_points(C["lean.lean_beats_parcae_86m"], far, TINY)
    assert elsewhere.verdict == ClaimVerdict.REPLICATED and not elsewhere.at_scale
    assert elsewhere.scale_note == claims.OTHER_SCALE and "size not judged" in elsewhere.reason
    assert claims.same_scale(C["lean.lean_beats_parcae_86m"].scale, AT_86M)
    assert not claims.same_scale(C["lean.lean_beats_parcae_86m"].scale, Scale("86.5M", "2000000000 token"))


def test_missing_runs_are_named_and_the_verdict_is_not_run():
    points = own("lean.parcae_share_4_of_8")
    partial = points[points["x"] != 8]
    j = claims.judge_points(C["lean.parcae_share_4_of_8"], partial, TINY)
    assert j.verdict == ClaimVerdict.NOT_RUN and j.reason == "needs parcae at 8" and j.ours is None
    empty = pd.DataFrame(columns=claims.POINT_COLUMNS)
    assert claims.judge_points(C["iso.phi_below_one"], empty).reason == "needs phi at fit"


def test_within_noise_without_a_stated_margin_is_not_judgeable():
    claim = C["loop.deep_layout_flat"]
    points = pd.DataFrame(
        [("10×2", x, s, 30.0) for x in (20, 40) for s in (0, 1, 2)], columns=claims.POINT_COLUMNS
    )
    j = claims.judge_points(claim, points, TINY)
    assert (
        j.verdict == ClaimVerdict.NOT_RESOLVED
        and j.reason.startswith("not judgeable")
        and "no margin" in j.reason
    )
    assert j.judged == claims.NOT_JUDGEABLE
    # so is the other one, with or without runs
    none = claims.judge(C["iso.reasoning_no_signal"], None)
    assert none.judged == claims.NOT_JUDGEABLE and none.verdict == ClaimVerdict.NOT_RUN
    assert "not judgeable" in none.reason


def test_the_verdict_names_and_the_scorecard():
    assert [str(v) for v in ClaimVerdict] == ["replicated", "contradicted", "not resolved", "not run"]
    assert ClaimVerdict.NOT_RESOLVED == Verdict.NOT_RESOLVED
    judgements = [claims.judge(c, claims.study_estimate(c), c.scale) for c in claims.claims_of("lean")]
    card = claims.scorecard(judgements)
    assert list(card.columns) == claims.SCORECARD_COLUMNS and len(card) == len(claims.claims_of("lean"))
    row = card.set_index("claim").loc["lean.parcae_share_4_of_8"]
    assert row["verdict"] == "replicated" and row["study_scale"].startswith("1.44 亿参数 · 10 亿 token")
    assert row["scale_note"] == "at the study's scale"
    assert set(Comparison) == {c.kind for c in claims.CLAIMS}  # every kind has a claim
    assert math.isnan(claims.estimate(C["lean.kv_third"], pd.DataFrame(columns=claims.POINT_COLUMNS)).value)
