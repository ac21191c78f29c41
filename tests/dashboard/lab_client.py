"""Run on a host of a test cluster (tests/dashboard/test_lab_access.py): open the dashboard at URL in headless
Chromium twice, as a browser that went straight to it and as one the sign-in proxy vouched for (the
proxy's two headers added to every request), and print what each session showed as one JSON object."""

from __future__ import annotations

import json
import sys
import time

from playwright.sync_api import sync_playwright

from tests.dashboard.browser import ARGS, CHROMIUM


def shown(browser, url: str, headers: dict[str, str], wait_for: str) -> str:
    context = browser.new_context(extra_http_headers=headers)
    try:
        page = context.new_page()
        page.goto(url, timeout=60_000)
        deadline = time.time() + 60
        text = ""
        while time.time() < deadline:
            text = page.inner_text("body")
            if wait_for in text:
                time.sleep(1.0)  # let the rest of the script's output arrive
                return page.inner_text("body")
            time.sleep(0.3)
        return text
    finally:
        context.close()


def main() -> None:
    url, secret, user = sys.argv[1:4]
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            direct = shown(browser, url, {}, "Not signed in")
            forged = shown(browser, url, {"X-Forwarded-User": user}, "Not signed in")
            proxied = shown(
                browser, url, {"X-Forwarded-User": user, "X-Looplab-Proxy-Secret": secret}, "signed in as"
            )
        finally:
            browser.close()
    print(json.dumps({"direct": direct, "forged": forged, "proxied": proxied}))


if __name__ == "__main__":
    main()
