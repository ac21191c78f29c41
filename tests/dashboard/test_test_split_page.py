"""The Depth page's test-vs-validation agreement: absent on the fixture database (no sweep evaluated
the test split), shown on a copy whose sweeps carry test losses (AppTest, and in headless Chromium with
a screenshot of the section in artifacts/screenshots/depth_test_split.png)."""

from __future__ import annotations

import sqlite3

import pytest

from tests.dashboard.browser import SHOTS, assert_page_shows, open_page, page_url
from tests.dashboard.test_pages import frame_with, render, text_of


def _with_test_losses(path, tmp_path) -> str:
    """A copy of the fixture database whose depth rows have test_loss = val_loss + 0.1, except lean's at
    8 loops, 2.0: there lean beats parcae on test while it loses on validation."""
    copy = tmp_path / "with_test.db"
    src, dst = sqlite3.connect(path), sqlite3.connect(copy)
    src.backup(dst)
    src.close()
    dst.execute("UPDATE depth_evals SET test_loss = val_loss + 0.1, test_bpb = (val_loss + 0.1) / 0.6931")
    dst.execute(
        "UPDATE depth_evals SET test_loss = 2.0 WHERE loops = 8 AND job_id IN "
        "(SELECT id FROM jobs WHERE kind = 'depth_sweep' AND recipe = 'lean')"
    )
    dst.commit()
    dst.close()
    return f"sqlite:///{copy}"


def test_depth_page_shows_the_agreement_only_where_sweeps_have_test_losses(monkeypatch, fixture_db, tmp_path):
    url, path = fixture_db
    at = render(monkeypatch, url, "depth")
    assert "no two variants have a test loss" in text_of(at)
    assert not [df for df in (d.value for d in at.dataframe) if "test_diff" in df.columns]

    at = render(monkeypatch, _with_test_losses(path, tmp_path), "depth")
    pairs = frame_with(at, "val_diff", "test_diff", "agree").set_index("loops")
    # lean and parcae share loops 1, 2, 4, 8 (means over seeds 0 and 1); parcae − lean:
    # 1: 4.05 − 3.9 = +0.15 both; 4: 3.325 − 3.115 = +0.21 both; 8: 3.115 − 3.2 = −0.085 on validation,
    # 3.215 − 2.0 = +1.215 on test: the one pair that disagrees
    assert pairs.index.tolist() == [1, 2, 4, 8]
    assert pairs.loc[4, "val_diff"] == pytest.approx(0.21) and pairs.loc[4, "test_diff"] == pytest.approx(
        0.21
    )
    assert pairs.loc[8, "val_diff"] == pytest.approx(-0.085) and pairs.loc[8, "test_diff"] == pytest.approx(
        1.215
    )
    assert pairs["agree"].tolist() == [True, True, True, False]
    assert "3 of 4 variant pairs (75%)" in text_of(at)


def test_depth_page_agreement_section_in_a_browser(dashboard_server, browser, fixture_db, tmp_path):
    """What a person sees: the section's heading, its sentence with the resolved count, and the table with
    the intervals' columns, on the page a real browser draws."""
    url = _with_test_losses(fixture_db[1], tmp_path).removeprefix("sqlite:///")
    expected = ["Test split vs validation", "3 of 4 variant pairs (75%)", "resolved on both"]
    with open_page(browser, page_url(dashboard_server, "depth", url), "Depth", expected, height=2400) as page:
        body = assert_page_shows(page, "Depth", expected)
        assert "interval over seeds" in body
        heading = page.get_by_text("Test split vs validation").first
        heading.scroll_into_view_if_needed()
        page.wait_for_timeout(1000)
        page.screenshot(path=str(SHOTS / "depth_test_split.png"))
        html = page.content()  # a table's cells are in the grid's accessible table, not in the text
        assert "test_low" in html and "resolved" in html
