"""No figure a reader sees is attributed to a study that did not print it: every doc, the README, the
report's and the demos' printed text and every claim's statement, read by tests/attribution.py. A figure
in a "the study" column or right after "the study's" / "the note's" / "the note says" must be printed
in a seed file (../shared/seeds/) or be marked "derived" beside it. The checker is shown to fail on
such a figure and to pass the same sentence with the seed's figure or a "derived" mark.

Without the seed files the test that reads them skips, unless LOOPLAB_REQUIRE_SEEDS=1 (CI).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from looplab.analysis import claims
from tests.attribution import misattributed, seed_numbers, unprinted_in_statement

ROOT = Path(__file__).resolve().parents[1]
SEEDS = ROOT.parent / "shared" / claims.SEEDS_DIR
# what a reader sees: the docs, and the source of the report's and the demos' printed text
TEXTS = ("README.md", "docs/*.md", "lab/report/*.py", "lab/demo*.py", "dashboard/views/claims.py")


@pytest.fixture(scope="module")
def printed() -> tuple[set[float], set[float]]:
    files = [SEEDS / s.file for s in claims.STUDIES.values()]
    missing = [f.name for f in files if not f.is_file()]
    if missing:
        message = f"the study files are not in {SEEDS}: {', '.join(missing)}"
        if os.environ.get("LOOPLAB_REQUIRE_SEEDS") == "1":
            pytest.fail(f"LOOPLAB_REQUIRE_SEEDS=1 but {message}")
        pytest.skip(message)
    return seed_numbers(f.read_text(encoding="utf-8") for f in files)


def test_no_doc_report_or_demo_text_attributes_a_figure_the_study_did_not_print(printed):
    files = sorted({p for pattern in TEXTS for p in ROOT.glob(pattern)})
    assert len(files) > 20
    bad = [
        f"{p.relative_to(ROOT)}:{line}: {figure} in {context!r}"
        for p in files
        for line, figure, context in misattributed(p.read_text(encoding="utf-8"), printed)
    ]
    assert not bad, "figures attributed to a study that it does not print (mark them derived):\n" + "\n".join(
        bad
    )


def test_every_claims_statement_quotes_only_printed_or_derived_figures(printed):
    checked = 0
    for c in claims.CLAIMS:
        assert not unprinted_in_statement(c.statement, printed), c.id
        checked += bool(re.search(r"\d", c.statement))
    assert checked >= 60  # statements that carry figures, not a handful
    # every clause counts, not only the first; a clause marked derived is the computation's
    assert unprinted_in_statement("lean beats parcae (by 0.0183 on seed 43)", printed) == ["0.0183"]
    assert not unprinted_in_statement("lean beats parcae (by 0.0183 on seed 43, derived)", printed)
    assert not unprinted_in_statement("lean beats parcae by 0.025 on three seeds", printed)


def test_the_checker_fails_on_a_figure_the_study_did_not_print(printed):
    assert misattributed("ours 99.7 % against the study's 93.8 %, one run", printed)
    assert not misattributed("ours 99.7 % against the study's 94 %, one run", printed)
    assert not misattributed("ours 99.7 % against the study's 93.8 % (derived: 1 − 0.0159/0.2549)", printed)
    table = "| finding | the study | ours |\n|---|---|---|\n| share | 94-99 % | 99.6 % |\n"
    assert [f for _, f, _ in misattributed(table, printed)] == ["99"]  # 94 is printed, 99 is not
    assert not misattributed(table.replace("94-99 %", "94 % (line 7)"), printed)
    # amounts in M and B are the seeds' 亿 and 万: 144 M is printed (1.44 亿), 150 M is not
    assert not misattributed("the note's 144 M model", printed)
    assert misattributed("the note's 150 M model", printed)
