"""The scale a magnitude claim's size belongs to (`analysis.claims.same_scale`, `scale_basis`): every
scale-bound figure the studies print states the parameters and/or tokens it was measured at, with the
seed's line, or says that its lines print none; runs at another scale are judged on sign only, and the
scorecard, its text and the CSV say which.

Pure: the registry's own values and made-up scales (the seed lines are checked in test_claims.py).
"""

from __future__ import annotations

import pandas as pd

from looplab.analysis import claims, claims_text
from looplab.analysis.claims import Scale
from looplab.analysis.stats import ClaimVerdict

C = claims.BY_ID
TINY = Scale("0.2M", "1048576 token", (0, 1), "cpu")


def scale_bound_with_values() -> list[claims.Claim]:
    return [
        c
        for c in claims.CLAIMS
        if c.kind in claims.MAGNITUDE_KINDS and c.kind not in claims.SCALE_FREE_KINDS and c.points
    ]


def test_every_scale_bound_figure_states_its_scale_with_a_line_or_says_none_is_printed():
    stated = unstated = 0
    for c in scale_bound_with_values():
        if c.scale.stated:
            assert len(c.scale.lines) == 2, c.id
            assert f"line {c.scale.lines[0]}" in c.scale.describe(), c.id
            stated += 1
        else:  # the note says so and cites the seed line it read
            assert "not stated" in c.scale.note and "line" in c.scale.note, c.id
            unstated += 1
    assert stated >= 18 and unstated >= 10  # the lean tables, the lean controls and the loop-design report


def test_a_claim_that_prints_only_its_parameters_is_matched_on_them():
    claim = C["lean.fixed8_beats_parcae_86m"]  # the smaller model (8650 万参数), tokens not printed
    assert claim.scale.params == 8.65e7 and not claim.scale.tokens
    assert claims.same_scale(claim.scale, Scale("86.5M", "2000000 token"))
    assert claims.same_scale(claim.scale, Scale("100M"))
    assert not claims.same_scale(claim.scale, Scale("200M", "500000000 token"))  # over 1.5 times
    assert not claims.same_scale(claim.scale, Scale("", "500000000 token"))  # ours unstated
    # both counts printed: both must match
    both = C["lean.lean_beats_parcae_86m"].scale
    assert claims.same_scale(both, Scale("86.5M", "500000000 token"))
    assert not claims.same_scale(both, Scale("86.5M", "2000000000 token"))
    assert not claims.same_scale(both, Scale("86.5M"))


def test_a_claim_whose_study_prints_no_scale_is_judged_on_sign_only_except_on_its_own_numbers():
    claim = C["lean.all_rounds_grad_beats_6_loops"]  # line 43: one control run, no size or tokens
    assert not claim.scale.stated and not claims.same_scale(claim.scale, TINY)
    points = claims.study_points(claim)
    own = claims.judge_points(claim, points, claim.scale)
    assert own.verdict == ClaimVerdict.REPLICATED and own.judged == claims.ON_SIZE
    tripled = points.assign(value=points["value"] * 3)  # 0.069: the right sign, three times the size
    assert claims.judge_points(claim, tripled, claim.scale).verdict == ClaimVerdict.CONTRADICTED
    ours = claims.judge_points(claim, tripled, TINY)
    assert ours.verdict == ClaimVerdict.REPLICATED and ours.judged == claims.SIGN_ONLY
    assert ours.scale_note == claims.NO_SCALE
    assert "prints no parameter or token count" in ours.reason


def test_the_scorecard_its_text_and_csv_say_what_each_claim_was_judged_on():
    cases = {
        "lean.lean_beats_parcae_86m": (Scale("86.5M", "500000000 token"), "study", claims.AT_SCALE),
        "lean.parcae_gain_4_to_8": (TINY, "other", claims.OTHER_SCALE),
        "lean.far_copy_tokens_worse": (TINY, "n/s", claims.NO_SCALE),
        "lean.parcae_share_4_of_8": (TINY, "free", claims.SCALE_FREE),
    }
    judged = [claims.judge_points(C[i], claims.study_points(C[i]), s) for i, (s, _, _) in cases.items()]
    card = claims.scorecard(judged)
    assert list(card["scale_note"]) == [note for _, _, note in cases.values()]
    text = claims_text.text_scorecard(card).splitlines()
    for claim_id, (_, short, _) in cases.items():
        row = next(line for line in text if line.startswith(claim_id.split(".", 1)[1]))
        assert row.rstrip().endswith(short), row
        assert len(row) <= claims_text.WIDTH
    study_scale = card.set_index("claim").loc["lean.lean_beats_parcae_86m", "study_scale"]
    assert "8650 万参数 · 5 亿 token" in study_scale and "line 24" in study_scale
    csv = pd.read_csv(pd.io.common.StringIO(card.to_csv(index=False)))
    assert set(csv["scale_note"]) == set(claims.SCALE_NOTES)
