"""The registry's data files (analysis/claims_data/*.toml) against their schema (analysis/claims_schema.py):
each claim the second pass added is there and loads as a record, and a file that breaks the schema is
refused at import with a message naming the file, the claim and the field."""

from __future__ import annotations

import pytest

from looplab.analysis import claims, claims_schema
from looplab.model.errors import ConfigError

# the claims issue 57 lists as missing, by the seed line each rests on
ADDED = {
    "lean.loss_0_01_is_2_to_5pct_data": 3,
    "lean.seven_parcae_models_alike": 7,
    "lean.update_ratio_half_to_two_thirds": 21,
    "lean.test_agrees_with_validation": 34,
    "lean.fixed4_update_falls_slowly": 41,
    "lean.tenth_draw_four_or_fewer": 42,
    "lean.last64_holds_on_more_seeds_and_144m": 74,
    "lean.other_tokens_slightly_lower": 75,
    "lean.padding_share_of_compute": 76,
    "lean.edge_without_padding": 76,
    "lean.padding_fix_shrinks_gap": 77,
    "lean.long_context_speed_like_plain": 90,
    "lean.long_context_cache_like_plain": 90,
    "lean.equal_data_gap_shrinks_too": 101,
    "lean.plain_lead_narrowed_not_reversed": 103,
    "iso.fit_r2": 123,
    "iso.cost_per_token_rises": 133,
    "iso.knowledge_largest_gap": 140,
    "iso.reading_near_parity": 141,
    "iso.val_loss_best_proxy": 142,
    "loop.depth_helps_within_horizon": 33,
    "loop.proofwriter_every_depth_gains": 41,
    "loop.2x10_peaks_then_declines": 49,
    "loop.coda_smaller_angle_change": 65,
    "loop.prelude_helps_extrapolation": 69,
    "loop.angle_distance_falls_beyond_horizon": 71,
    "loop.light_injection_no_net_gain": 85,
    "loop.history_window_1_rescues_dense": 95,
    "loop.branch_gain_from_reasoning": 101,
    "loop.coda_lowers_interaction": 117,
    "loop.pair_smaller_within_loop_response": 119,
}
GOOD = """
[[claim]]
id = "lean.x"
lines = [42, 42]
where = "a paragraph"
statement = "about a tenth of draws are 4 loops or fewer"
kind = "ratio"
side = "below"
unit = "exact"
line = 0.5
terms = [["draws", "4 or fewer"]]
points = [["draws", "4 or fewer", "十分之一"]]
"""


def test_every_added_claim_is_in_the_registry_on_its_seed_line():
    assert len(claims.CLAIMS) == 72 + len(ADDED)
    for claim_id, line in ADDED.items():
        c = claims.BY_ID[claim_id]
        assert c.lines[0] <= line <= c.lines[1], claim_id
    assert len({c.id for c in claims.CLAIMS}) == len(claims.CLAIMS)
    tenth = claims.judge(claims.BY_ID["lean.tenth_draw_four_or_fewer"], None)
    assert tenth.verdict == claims.ClaimVerdict.NOT_RUN and "poisson_seq" in tenth.claim.metric.note


def load(tmp_path, text: str):
    (tmp_path / "lean.toml").write_text(text, encoding="utf-8")
    return claims_schema.load("lean", "lean", "lean", tmp_path)


def test_a_good_file_loads_as_records(tmp_path):
    (claim,) = load(tmp_path, GOOD)
    assert claim.kind == claims.Comparison.RATIO and claim.points[0].quote.value == pytest.approx(0.1)
    assert claims.study_estimate(claim).value == pytest.approx(0.1)


@pytest.mark.parametrize(
    "change, message",
    [
        (
            ('kind = "ratio"', 'kind = "ratoi"'),
            "lean.toml: claim 'lean.x': field 'kind': 'ratoi' is not accepted; accepted:",
        ),
        (('unit = "exact"', 'unit = "exact"\ncolour = "red"'), "field 'colour' is not in the schema"),
        (('where = "a paragraph"\n', ""), "field 'where' is missing"),
        (('"十分之一"', '"a tenth"'), "field 'points': quote: 'a tenth' is not a number as printed"),
        (('id = "lean.x"', 'id = "iso.x"'), "field 'id' must start with 'lean.'"),
        (("lines = [42, 42]", "lines = [42, 41]"), "field 'lines' must be [first, last]"),
        (("line = 0.5", 'line = "half"'), "field 'line' must be float"),
        (('kind = "ratio"', 'kind = "share of a gain"'), "field 'terms' of a share of a gain claim holds 4"),
        (
            ('unit = "exact"', 'unit = "exact"\nscale = { size = "1.44 亿参数" }'),
            "field 'scale.lines' is missing: the seed's lines that print '1.44 亿参数'",
        ),
        (
            ('unit = "exact"', 'unit = "exact"\nscale = { tokens = "10 亿 token", lines = [7] }'),
            "field 'scale.lines' must be [first, last] line numbers, got [7]",
        ),
    ],
)
def test_a_file_breaking_the_schema_is_refused_naming_the_field(tmp_path, change, message):
    with pytest.raises(ConfigError) as e:
        load(tmp_path, GOOD.replace(*change))
    assert message in str(e.value)


def test_repeated_ids_and_bad_toml_are_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"claim ids repeat: \['lean.x'\]"):
        load(tmp_path, GOOD + GOOD)
    with pytest.raises(ConfigError, match="lean.toml: not valid TOML"):
        load(tmp_path, GOOD + "\n[[claim]\n")
    with pytest.raises(ConfigError, match=r"top-level \['claims'\]"):
        load(tmp_path, GOOD.replace("[[claim]]", "[[claims]]"))


def test_a_value_table_is_shared_by_name_and_an_unknown_name_is_refused(tmp_path):
    shared = '[tables]\ndraws = [["draws", "4 or fewer", "十分之一"]]\n' + GOOD.replace(
        'points = [["draws", "4 or fewer", "十分之一"]]', 'points = "draws"'
    )
    (claim,) = load(tmp_path, shared)
    assert claim.points[0].quote.text == "十分之一"
    with pytest.raises(ConfigError, match="field 'points': no value table 'drawz'; tables: draws"):
        load(tmp_path, shared.replace('points = "draws"', 'points = "drawz"'))
    # the registry's sweeps are one table each, read by several claims
    sweep = claims.BY_ID["lean.parcae_gain_4_to_8"].points
    assert sweep == claims.BY_ID["lean.parcae_share_4_of_8"].points and len(sweep) == 20
