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
    assert rows.loc["lean.parcae_share_4_of_8", "verdict"] == "contradicted"  # 78 % is not the note's 94 %
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


def test_claims_page_shows_every_row_and_filters_by_what_was_judged(monkeypatch, fixture_db):
    from looplab.dashboard import ui

    heights, table_of = [], ui.table

    def recording(df, **kw):
        heights.append(kw.get("height"))
        return table_of(df, **kw)

    monkeypatch.setattr(ui, "table", recording)
    at = render(monkeypatch, fixture_db[0], "claims")
    table = frame_with(at, "claim", "verdict", "judged", "band", "premise", "stated", "contradiction")
    assert len(table) == len(claims.CLAIMS)
    assert heights[-1] == "content"  # the claims grid (the last table drawn) grows to its rows
    at.multiselect(key="claims_judged").set_value([claims.ON_SIZE]).run()
    sized = frame_with(at, "claim", "judged")
    assert set(sized["judged"]) == {claims.ON_SIZE}
    assert "lean.parcae_share_4_of_8" in set(sized["claim"])  # a share: on size at any scale
    at.multiselect(key="claims_judged").set_value([claims.NOT_JUDGEABLE]).run()
    unjudgeable = {c.id for c in claims.CLAIMS if claims.line_of(c) is None}  # within noise, no margin
    assert {"iso.reasoning_no_signal", "loop.deep_layout_flat"} <= unjudgeable
    assert set(frame_with(at, "claim", "judged")["claim"]) == unjudgeable
