"""The dashboard in a real browser, for the browser tests of every page: `streamlit run` against a test
database on a free port, headless Chromium (Debian's /usr/bin/chromium driven by Playwright), a page
opened and waited for until Streamlit is idle, and the checks every page must pass. Screenshots go to
artifacts/screenshots/ for review.

One server and one browser serve every browser test of a session (the fixtures `dashboard_server` and
`browser` of tests/dashboard/conftest.py): a page of another database than the server's is opened with
`?db=PATH`, which the app reads before $LOOPLAB_DB (dashboard/ui.py), and its cached loaders are keyed
by that URL, so databases never mix. A test using either fixture is marked `browser` (tests/conftest.py)."""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "artifacts" / "screenshots"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
START_TIMEOUT_S = 60


def require_chromium() -> None:
    """Skip the test when Chromium is missing, except in CI (.ci/run sets LOOPLAB_REQUIRE_BROWSER=1),
    where a missing browser fails the test instead."""
    if not Path(CHROMIUM).exists() and not os.environ.get("LOOPLAB_REQUIRE_BROWSER"):
        pytest.skip(f"{CHROMIUM} missing (apt-get install -y chromium)")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def streamlit_server(db: str) -> Iterator[str]:
    """The dashboard served against `db` (its output in artifacts/streamlit.log); yields the base URL
    once the server answers its health check, and stops it afterwards."""
    from looplab.dashboard.launch import command

    port = free_port()
    SHOTS.mkdir(parents=True, exist_ok=True)
    log_path = SHOTS.parent / "streamlit.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            command(port),
            cwd=ROOT,
            env={**os.environ, "LOOPLAB_DB": db},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            base = f"http://127.0.0.1:{port}"
            deadline = time.time() + START_TIMEOUT_S
            while time.time() < deadline:
                try:
                    if urllib.request.urlopen(f"{base}/_stcore/health", timeout=1).read() == b"ok":
                        break
                except OSError:
                    time.sleep(0.3)
            else:
                pytest.fail(f"streamlit did not start within {START_TIMEOUT_S} s (see {log_path})")
            yield base
        finally:
            proc.terminate()
            proc.wait(timeout=20)


@contextmanager
def chromium() -> Iterator:
    """A headless Chromium (a Playwright `Browser`); skips the test when Playwright is not installed."""
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield browser
        finally:
            browser.close()


def wait_until_idle(page, title: str, expected: list[str]) -> None:
    """The page's title is drawn, Streamlit's 'running' indicator is gone, and the expected texts
    (table headers live in the data grid's accessible table once it loaded) are in the DOM."""
    page.get_by_role("heading", name=title).first.wait_for(timeout=30_000)
    page.wait_for_function(
        """() => !document.querySelector('[data-testid="stStatusWidget"]')
                 || !/Running/i.test(document.querySelector('[data-testid="stStatusWidget"]').innerText)""",
        timeout=30_000,
    )
    try:
        page.wait_for_function(
            "texts => texts.every(t => document.body.innerHTML.includes(t))", arg=expected, timeout=30_000
        )
    except Exception:  # the assertion in `assert_page_shows` names what is missing
        pass
    page.wait_for_timeout(1000)  # Vega charts finish drawing


@contextmanager
def open_page(browser, url: str, title: str, expected: list[str], height: int = 1400) -> Iterator:
    """A new 1400-pixel-wide page at `url`, waited for until idle (see `wait_until_idle`); closed after."""
    page = browser.new_page(viewport={"width": 1400, "height": height})
    try:
        page.goto(url, wait_until="domcontentloaded")
        wait_until_idle(page, title, expected)
        yield page
    finally:
        page.close()


def assert_page_shows(page, title: str, expected: list[str], min_charts: int = 0) -> str:
    """The checks every page passes: its own title, no Streamlit exception or traceback, every
    expected text in the HTML and at least `min_charts` Vega charts. Returns the page's text."""
    body = page.inner_text("body")
    assert page.locator("h1").first.inner_text().strip() == title
    assert page.locator('[data-testid="stException"]').count() == 0, body[:2000]
    assert "Traceback" not in body
    html = page.content()
    missing = [text for text in expected if text not in html]
    assert not missing, f"{title}: not on the page: {missing}"
    assert page.locator('[data-testid="stVegaLiteChart"]').count() >= min_charts
    return body


def page_url(server: str, path: str, db: str) -> str:
    """The address of page `path` of `server` showing the database `db` (a URL or a SQLite path)."""
    return f"{server}/{path}?db={urllib.parse.quote(str(db), safe='')}"


def check_page_in_browser(
    server: str,
    browser,
    db: str,
    path: str,
    title: str,
    expected: list[str],
    *,
    height: int = 1800,
    min_charts: int = 0,
) -> str:
    """Page `path` of the shared `server` against the database `db`, in the shared `browser`: saved as
    screenshots/<path>.png and checked with `assert_page_shows`. Returns the page's text."""
    with open_page(browser, page_url(server, path, db), title, expected, height=height) as page:
        page.screenshot(path=str(SHOTS / f"{path}.png"), full_page=True)
        return assert_page_shows(page, title, expected, min_charts=min_charts)
