"""The Claims page in AppTest on the dashboard fixture database: every claim of the registry with its
verdict (the same scorecard `looplab claims` prints), the filters by study and verdict, and the empty
database."""

from __future__ import annotations

from looplab.analysis import claims
from tests.dashboard.test_pages import frame_with, render


def test_claims_page_lists_every_claim_and_filters(monkeypatch, fixture_db):
    at = render(monkeypatch, fixture_db[0], "claims")
    table = frame_with(at, "claim", "verdict", "study_figure", "ours", "scale_note")
    assert len(table) == len(claims.CLAIMS)
    rows = table.set_index("claim")
    # the fixture has parcae with a depth sweep at 1, 4 and 8 loops on two seeds
    assert rows.loc["lean.parcae_share_4_of_8", "verdict"] == "replicated"
    assert rows.loc["iso.phi_below_one", "reason"] == "needs iso_depth runs (none in this selection)"
    assert f"**{len(claims.CLAIMS)} claims**" in at.markdown[0].value

    at.multiselect(key="claims_study").set_value(["iso-depth"]).run()
    assert not at.exception
    shown = frame_with(at, "claim", "verdict")
    assert set(shown["study"]) == {"iso-depth"} and len(shown) == len(claims.claims_of("iso-depth"))
    at.multiselect(key="claims_verdict").set_value(["replicated"]).run()
    # no iso-depth claim is replicated without iso_depth runs: the table says there is nothing to show
    assert not at.dataframe and "nothing to show for this selection" in [c.value for c in at.caption]


def test_claims_page_on_an_empty_database(monkeypatch, empty_db):
    at = render(monkeypatch, empty_db[0], "claims")
    table = frame_with(at, "claim", "verdict")
    assert set(table["verdict"]) == {"not run"}
