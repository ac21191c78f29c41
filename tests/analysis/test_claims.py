"""The claims registry against the study files themselves (../shared/seeds/, beside the repository):
each file's sha256, every number of every record on the lines it cites, and the study's own arithmetic
(the figures the registry computes, and where the study contradicts itself).

Without the files the tests that read them skip, unless LOOPLAB_REQUIRE_SEEDS=1 (CI), which makes
their absence a failure.
"""

from __future__ import annotations

import hashlib
import math
import os
from pathlib import Path

import pytest

from looplab.analysis import claims
from looplab.analysis.claims_base import Comparison, Quote, Unit, parse_number, printed_step

SEEDS = Path(__file__).resolve().parents[2].parent / "shared" / claims.SEEDS_DIR


@pytest.fixture(scope="module")
def texts() -> dict[str, list[str]]:
    """{study key: the file's lines}; skips (fails under LOOPLAB_REQUIRE_SEEDS=1) without the files."""
    missing = [s.file for s in claims.STUDIES.values() if not (SEEDS / s.file).is_file()]
    if missing:
        message = f"the study files are not in {SEEDS}: {', '.join(missing)}"
        if os.environ.get("LOOPLAB_REQUIRE_SEEDS") == "1":
            pytest.fail(f"LOOPLAB_REQUIRE_SEEDS=1 but {message}")
        pytest.skip(message)
    return {
        key: (SEEDS / s.file).read_text(encoding="utf-8").splitlines() for key, s in claims.STUDIES.items()
    }


def test_each_study_file_is_the_text_the_registry_was_read_from(texts):
    for study in claims.STUDIES.values():
        assert hashlib.sha256((SEEDS / study.file).read_bytes()).hexdigest() == study.sha256, study.file


def test_every_number_of_every_claim_is_printed_on_the_lines_it_cites(texts):
    checked = scaled = 0
    for c in claims.CLAIMS:
        lines = texts[c.study]
        first, last = c.lines
        assert 1 <= first <= last <= len(lines), c.id
        cited = "\n".join(lines[first - 1 : last])
        for quote in (*(p.quote for p in c.points), *c.stated, *c.quotes):
            assert quote.text in cited, f"{c.id}: {quote.text!r} is not on lines {first}-{last}"
            checked += 1
        assert not c.scale.device or c.scale.device in "\n".join(lines), c.id  # stated once per study
        if c.scale.size or c.scale.tokens:  # the counts are printed on the lines the scale cites
            first, last = c.scale.lines
            printed = "\n".join(lines[first - 1 : last])
            for text in (c.scale.size, c.scale.tokens):
                assert not text or text in printed, f"{c.id}: scale {text!r} is not on lines {first}-{last}"
            scaled += 1
        assert {Quote(t) for t in (c.scale.size, c.scale.tokens) if t} <= set(c.numbers), c.id
    for study in claims.STUDIES.values():
        if study.noise is not None:
            first, last = study.noise_lines
            assert study.noise.text in "\n".join(texts[study.key][first - 1 : last])
    assert checked > 300  # the tables' values, not a handful
    assert scaled >= 40


def test_the_numbers_parse_as_printed():
    for c in claims.CLAIMS:
        for quote in (*(p.quote for p in c.points), *c.stated, *c.quotes):
            assert math.isfinite(quote.value), (c.id, quote.text)
    assert parse_number("−0.008") == -0.008 and parse_number("+0.029") == 0.029
    assert parse_number("94%") == pytest.approx(0.94) and parse_number("8650 万") == pytest.approx(8.65e7)
    assert parse_number("1.44 亿") == pytest.approx(1.44e8) and parse_number("三分之一") == pytest.approx(
        1 / 3
    )
    assert parse_number("4.64 \\times 10^{17}") == pytest.approx(4.64e17)
    assert printed_step("0.016") == pytest.approx(0.0005) and printed_step("94%") == pytest.approx(0.005)
    with pytest.raises(ValueError, match="not a number as printed"):
        parse_number(Quote("about 3").text)


def test_records_are_whole_and_their_ids_unique():
    assert len(claims.BY_ID) == len(claims.CLAIMS)
    counts = {key: len(claims.claims_of(key)) for key in claims.STUDIES}
    assert counts["lean"] >= 30 and counts["iso-depth"] >= 10 and counts["loop-design"] >= 15
    for c in claims.CLAIMS:
        assert c.id.split(".")[0] in ("lean", "iso", "loop") and c.statement and c.where, c.id
        assert c.metric.describe(), c.id
        # only a fitted exponent or a ratio names its own line; every other kind has the kind's
        assert c.line is None or c.kind in (Comparison.EXPONENT, Comparison.RATIO), c.id
        if c.points:
            keys = {(p.series, p.x) for p in c.points}
            assert set(claims.needed(c)) <= keys, c.id  # the values θ reads are all printed
    with pytest.raises(Exception, match="--study: unknown 'nope'; accepted: lean, iso-depth, loop-design"):
        claims.claims_of("nope")


def test_the_study_noise_is_a_half_width_only_for_losses_across_trained_models():
    for c in claims.CLAIMS:
        applies = c.study == "lean" and c.unit == Unit.LOSS and c.across_models
        assert (claims.noise_of(c) == 0.01) == applies, c.id
    # a depth sweep compares loop counts of one model: no seed noise between its points
    assert claims.noise_of(claims.BY_ID["lean.parcae_best_at_12"]) is None


def test_figures_that_are_arithmetic_are_computed_from_the_printed_values():
    share = claims.study_estimate(claims.BY_ID["lean.parcae_share_4_of_8"])
    # (3.5005 − 3.2616) / (3.5005 − 3.2457) from the table's means; per seed the same to 3 digits
    assert round(share.value, 3) == round((3.5005 - 3.2616) / (3.5005 - 3.2457), 3) == 0.938
    per_seed = claims.per_seed(
        claims.BY_ID["lean.lean_beats_parcae_86m"],
        claims.study_points(claims.BY_ID["lean.lean_beats_parcae_86m"]),
    )
    assert [round(v, 4) for v in per_seed] == [-0.0183, -0.0274, -0.0305]


def test_a_stated_figure_agrees_with_its_values_or_the_contradiction_is_recorded():
    checked = 0
    for c in claims.CLAIMS:
        check = claims.self_check(c)
        if check["agrees"] is None:
            continue
        checked += 1
        assert check["agrees"] or c.contradiction, (
            f"{c.id}: states {check['stated']}, computes {check['computed']}"
        )
    assert checked >= 20


def test_the_contradictions_the_studies_print(texts):
    worth = claims.self_check(claims.BY_ID["iso.worth_at_4"])
    assert worth["stated"] == "1.86" and round(4**0.46, 2) == round(worth["computed"], 2) == 1.89
    plain = claims.BY_ID["lean.plain_beats_lean_equal_time"]
    assert not claims.self_check(plain)["agrees"] and plain.contradiction
    # against every lean seed at 86 M the tables give a gap of 0.053-0.065, not the 0.03-0.04 stated
    lean_seeds = [
        p.quote.value for p in claims.BY_ID["lean.lean_beats_parcae_86m"].points if p.series == "lean"
    ]
    gaps = sorted(round(v - 3.4673, 3) for v in lean_seeds)
    assert gaps == [0.053, 0.056, 0.065]
    # "50 budgets" (line 36) against "6 budgets" spanning about 50× (line 105)
    iso = texts["iso-depth"]
    assert "50 种不同的预算" in iso[35] and "6 个不同的计算预算" in iso[104] and "约 50 倍" in iso[104]
    assert round(2.15e19 / 4.64e17, -1) == 50
    assert "50 budgets" in claims.BY_ID["iso.phi_below_one"].contradiction
