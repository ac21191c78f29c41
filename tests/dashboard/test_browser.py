"""The dashboard in a real browser: `streamlit run` against the fixture database, every page opened by
its own URL in headless Chromium (Debian's /usr/bin/chromium driven by Playwright), screenshots saved
to artifacts/screenshots/<page>.png, no Streamlit exception, the page's own title, expected table
headers and sections visible, and no Deploy button (the viewer toolbar). The server and the browser
are the session's (`dashboard_server`, `browser`: tests/dashboard/conftest.py), shared with the other
pages' browser tests."""

from __future__ import annotations

import pytest

from tests.dashboard.browser import SHOTS, assert_page_shows, open_page, wait_until_idle

# page url path -> (title, texts that must be on the page: table headers, labels, section titles)
PAGES = {
    "queue": ("Queue", ["Running", "Recent failures", "error_summary", "job_id"]),
    "runs": (
        "Runs",
        ["final_val_loss", "variant_label", "Validation loss at several loop counts", "val_loss@8"],
    ),
    "compare": (
        "Compare",
        [
            "Iso-data",
            "best_loops",
            "verdict",
            "Noise floor:",
            "σ = 0.0187",
            "ci_low",
            "n_ref",
            "seeds_needed",
            "Iso-FLOP",
            "train_flops",
            "Loss by architecture",
            "Iso-time",
            "ref_final_val_loss",
        ],
    ),
    "depth": (
        "Depth",
        [
            "Validation loss vs loops",
            "8 loops",
            "Hidden-state change per round",
            "Round 1",
            "n_seeds",
            "Far copies",
            "far_share",
            "Convergence against bf16",
            "bf16_round",
        ],
    ),
    "decode": ("Decode", ["ms_per_token", "kv_cache_mb", "ms_ratio", "variant_label"]),
    "sql": ("SQL", ["Run query", "final_val_loss", "best_loops"]),
    "claims": ("Claims", ["103 claims", "not run", "Judged on", "Verdict"]),
}


@pytest.mark.parametrize("path", list(PAGES))
def test_page_opens_by_its_own_url(dashboard_server, browser, path):
    title, expected = PAGES[path]
    with open_page(browser, f"{dashboard_server}/{path}", title, expected, height=2200) as page:
        page.screenshot(path=str(SHOTS / f"{title.lower()}.png"), full_page=True)
        body = assert_page_shows(page, title, expected)
        assert "Page not found" not in body
        assert page.url.rstrip("/").endswith(f"/{path}")
        assert page.locator('[data-testid="stDataFrame"]').count() >= 1
        assert page.locator('[data-testid="stAppDeployButton"]').count() == 0  # toolbarMode = viewer


def test_root_forwards_to_the_queue_with_its_query(dashboard_server, browser):
    with open_page(
        browser, f"{dashboard_server}/?grid=study", "Queue", ["Recent failures"], height=1200
    ) as page:
        assert page.url.split("?")[0].endswith("/queue") and "grid=study" in page.url
        assert page.locator("h1").first.inner_text().strip() == "Queue"


def test_compare_noise_floor_and_intervals_screenshot(dashboard_server, browser):
    """The noise floor line and the iso-data intervals as a person sees them (saved for review)."""
    with open_page(browser, f"{dashboard_server}/compare", "Compare", ["Noise floor:", "ci_high"]) as page:
        body = page.inner_text("body")
        assert "Noise floor: σ = 0.0187 (95 % interval 0.0112–0.0538)" in body
        assert "with its 95 % interval" in body
        page.get_by_text("Per seed, mean, difference to").first.evaluate(
            "e => e.scrollIntoView({block: 'start'})"
        )
        page.wait_for_timeout(1000)
        page.screenshot(path=str(SHOTS / "compare_intervals.png"))


def test_compare_iso_flop_section_screenshot(dashboard_server, browser):
    """The iso-FLOP section as a person sees it: the chart and the matched table (saved for review)."""
    with open_page(
        browser, f"{dashboard_server}/compare", "Compare", ["Iso-FLOP", "train_flops"], height=1000
    ) as page:
        section = page.get_by_role("heading", name="Iso-FLOP")
        section.evaluate("e => e.scrollIntoView({block: 'start'})")  # the app scrolls its own container
        page.wait_for_timeout(1000)
        assert section.bounding_box()["y"] < 200  # the section is at the top of the screenshot
        page.screenshot(path=str(SHOTS / "compare_iso_flop.png"))
        charts = page.locator('[data-testid="stVegaLiteChart"]')
        assert charts.count() >= 3  # iso-FLOP, loss by architecture, iso-time
        assert page.get_by_text("Runs at equal FLOPs").count() == 1


def test_depth_far_copies_and_bf16_convergence_screenshot(dashboard_server, browser):
    """The Depth page's far-copy pair and bf16 convergence panels as a person sees them (saved for
    review): each section scrolled into the window, its text shown."""
    with open_page(browser, f"{dashboard_server}/depth", "Depth", ["Far copies"], height=1400) as page:
        for heading, shot in (("Far copies", "depth_far_copies"), ("Convergence against bf16", "depth_bf16")):
            section = page.get_by_role("heading", name=heading)
            section.evaluate("e => e.scrollIntoView({block: 'start'})")  # the app scrolls its own container
            page.wait_for_timeout(2500)  # the charts and tables below it draw once in view
            section.evaluate("e => e.scrollIntoView({block: 'start'})")  # again: the page grew as they drew
            page.wait_for_timeout(500)
            assert section.is_visible()
            page.screenshot(path=str(SHOTS / f"{shot}.png"))
        body = page.inner_text("body")
        assert "previous occurrence in the sequence lies more than 500" in body
        assert "first round whose relative change" in body and "Change over the previous round" in body


def test_claims_page_at_1280_pixels_screenshot(dashboard_server, browser):
    """The Claims page at 1,280 px as a person sees it (saved for review): every claim is a row of the
    table (no ten-row box), and the verdict column is the first after the claim's name, never cut off."""
    from looplab.analysis import claims

    page = browser.new_page(viewport={"width": 1280, "height": 2400})
    try:
        page.goto(f"{dashboard_server}/claims", wait_until="domcontentloaded")
        wait_until_idle(page, "Claims", [f"{len(claims.CLAIMS)} claims", "Verdict"])
        page.wait_for_selector(
            '[data-testid="stDataFrame"] [role="columnheader"]', state="attached", timeout=30_000
        )
        page.wait_for_timeout(1500)
        page.screenshot(path=str(SHOTS / "claims_1280.png"), full_page=True)
        grid = page.locator('[data-testid="stDataFrame"]').first
        box = grid.bounding_box()
        assert box["x"] + box["width"] <= 1280  # the table fits the window
        assert box["height"] >= 30 * 20  # tall enough to show its rows, not a ten-row box
        headers = page.locator('[data-testid="stDataFrame"] [role="columnheader"]').all_inner_texts()
        assert [h.strip() for h in headers[:3]] == ["claim", "verdict", "judged"], headers[:6]
    finally:
        page.close()
