"""The morning view and the health markers in a real browser (headless Chromium, the session's Streamlit
server with `?db=`): the Queue page shows what happened since the chosen time, and the Runs chart and
the Compare page's wall-time chart draw the loss-spike marker in its colour over the curves (pixels of
the screenshot, not only the page's text). Screenshots go to artifacts/screenshots/ for review."""

from __future__ import annotations

import io

from looplab import Grid, Queue
from looplab.orchestrator.health import Finding, HealthSettings, HealthWatch, Level, Rule, store
from looplab.orchestrator.jobqueue import claim, finish
from looplab.orchestrator.states import AttemptOutcome
from looplab.orchestrator.writer import write_events
from looplab.workers.reporter import Event, EventKind
from tests.dashboard.browser import SHOTS, assert_page_shows, open_page, page_url
from tests.dashboard.test_curve_smoothing import compare_db_with_a_health_event
from tests.orchestrator import fake_jobs


def health_db(tmp_path) -> str:
    q = Queue(db=tmp_path / "q.db", artifacts=tmp_path / "art", kinds=fake_jobs)
    run, bad = q.submit(Grid("h", base={"tokens": 100}, sweep={"seed": [0, 1]}, max_attempts=1))
    for job in (run, bad):
        claim(q.eng, job, "driver", str(tmp_path / f"a{job}"))
    values = [4.0 - 0.02 * s + (0.3 if s % 2 else 0.0) for s in range(60)]
    values[40] = 30.0
    events = [
        Event(
            EventKind.METRIC,
            1.0,
            {"key": "train_loss", "step": s, "value": v, "tokens": 64 * s, "wall_s": s * 0.1},
        )
        for s, v in enumerate(values)
    ]
    events += [  # the page opens on val_loss: its curve carries the marker too
        Event(
            EventKind.METRIC, 1.0, {"key": "val_loss", "step": s, "value": 4.0 - 0.02 * s, "tokens": 64 * s}
        )
        for s in range(0, 60, 5)
    ]
    write_events(q.eng, [(run, 1, events)], HealthWatch(HealthSettings(spike_window=10)))
    finish(q.eng, run, 1, AttemptOutcome.SUCCEEDED)
    finish(q.eng, bad, 1, AttemptOutcome.FAILED, "train_loss is nan at step 3: the run diverged")
    with q.eng.begin() as conn:
        store(conn, bad, 1, Finding(Rule.NON_FINITE, Level.ERROR, 3, "train_loss", float("nan"), "nan at 3"))
    return str(tmp_path / "q.db")


def red_pixels(png: bytes, left: float = 1.0) -> int:
    """Pixels of a strong red in the left `left` share of the image: the markers' ("set1" starts with
    red, #e41a1c, green and blue alike; the runs' lines are blue and orange, whose green is far above its
    blue, the axes grey). `left` < 1 leaves out the legends on the right, whose ▼ symbol is red too."""
    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("RGB")
    image = image.crop((0, 0, int(image.width * left), image.height))
    return sum(1 for r, g, b in image.getdata() if r - max(g, b) > 80 and abs(g - b) < 12)


def coloured_pixels(png: bytes) -> int:
    """Pixels of a saturated colour: a series' line or marker (axes, grid and text are grey or black)."""
    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("RGB")
    return sum(1 for px in image.getdata() if max(px) - min(px) > 60)


def test_morning_view_and_health_markers_in_a_browser(dashboard_server, browser, tmp_path):
    db = health_db(tmp_path)
    expected = ["Since", "failed since", "Health events", "non_finite", "the run diverged"]
    with open_page(browser, page_url(dashboard_server, "queue", db), "Queue", expected, height=1600) as page:
        page.screenshot(path=str(SHOTS / "queue_morning_view.png"), full_page=True)
        body = assert_page_shows(page, "Queue", expected)
        html = page.content()  # a table's cells are in the grid's accessible table, not in the text
        assert "stalled" in body and "alerts delivered" in body and "loss_spike" in html
        assert "1796" not in html  # times as clock times, not epoch seconds
    with open_page(
        browser, page_url(dashboard_server, "runs", db), "Runs", ["Smoothing"], height=1400
    ) as page:
        chart = page.locator('[data-testid="stVegaLiteChart"]').first
        chart.scroll_into_view_if_needed()
        page.wait_for_timeout(1000)
        png = chart.screenshot(path=str(SHOTS / "runs_health_markers.png"))
        assert "health event(s) marked on the curves" in page.inner_text("body")
        assert red_pixels(png) >= 20  # the ▼ marker drawn (a filled triangle of size 90: ~60 pixels)


def test_compare_wall_time_chart_draws_the_health_marker_in_a_browser(
    dashboard_server, browser, fixture_db, tmp_path
):
    # the iso-time run's event at step 25 sits on its val_loss point at 20 s, of about 0–100 s: in the
    # plot's left half, away from the legends
    db, _ = compare_db_with_a_health_event(fixture_db[1], tmp_path, step=25)
    expected = ["Validation loss vs training wall time", "health event(s) marked on the curves"]
    with open_page(
        browser, page_url(dashboard_server, "compare", db), "Compare", expected, height=1800
    ) as page:
        assert_page_shows(page, "Compare", expected)
        chart = page.locator('[data-testid="stVegaLiteChart"]').last  # the wall-time chart ends the charts
        chart.scroll_into_view_if_needed()
        page.wait_for_timeout(1000)
        png = chart.screenshot(path=str(SHOTS / "compare_health_markers.png"))
        assert red_pixels(png, left=0.5) >= 20  # the ▼ marker drawn (a filled triangle of size 90)
    # the same chart of the database without events has no such red
    with open_page(
        browser, page_url(dashboard_server, "compare", fixture_db[1]), "Compare", expected[:1]
    ) as page:
        chart = page.locator('[data-testid="stVegaLiteChart"]').last
        chart.scroll_into_view_if_needed()
        page.wait_for_timeout(1000)
        assert red_pixels(chart.screenshot(), left=0.5) < 5


def test_a_morning_view_link_opens_its_run_in_the_browser(dashboard_server, browser, tmp_path):
    """The link a person clicks in the morning view (read from the page as the browser has it) stays on
    this dashboard and this database, and the Runs page it opens shows that run alone."""
    import html as html_lib
    import re

    from looplab.orchestrator import alerts
    from tests.dashboard.test_run_links import night

    q, jobs = night(tmp_path)
    ok, failed, other = jobs
    # the night: a run collapsed to chance and stopped, another preempted, the webhook down at its alert
    cfg = alerts.AlertConfig((alerts.channel("c", {"name": "hook", "type": "webhook", "url": "http://x/"}),))
    with q.eng.begin() as conn:
        chance = "train_loss 5.5452 within 1% of ln 256 = 5.5452 for 50 steps: the run collapsed to chance"
        store(conn, failed, 1, Finding(Rule.AT_CHANCE, Level.ERROR, 61, "train_loss", 5.5452, chance))
        why = f"preempted for job {ok} (effective priority 20): it stopped at step 12, checkpointed"
        store(conn, other, 1, Finding(Rule.PREEMPTED, Level.WARNING, 12, None, None, why))
        alerts.enqueue(
            conn, cfg, "health", f"job {failed}: at_chance", {"text": chance}, group="g", job_id=failed
        )
    expected = ["Since", "failed since", "open run", "at_chance", "preempted", "not delivered yet"]
    with open_page(
        browser, page_url(dashboard_server, "queue", str(tmp_path / "q.db")), "Queue", expected, height=1600
    ) as page:
        page.screenshot(path=str(SHOTS / "queue_morning_links.png"), full_page=True)
        links = set(
            re.findall(r"(http[^\s\"'<>]*/runs\?job=\d+[^\s\"'<>]*)", html_lib.unescape(page.content()))
        )
    assert links, "no run link on the page"
    mine = [link for link in links if f"job={failed}&" in link or link.endswith(f"job={failed}")]
    assert len(mine) == 1, links
    assert mine[0].startswith(dashboard_server + "/runs?"), mine[0]  # this dashboard, not a default address
    with open_page(browser, mine[0], "Runs", ["from the link", "run drawn"], height=1400) as page:
        chart = page.wait_for_selector('[data-testid="stVegaLiteChart"]', timeout=60_000)
        page.wait_for_timeout(1000)
        page.screenshot(path=str(SHOTS / "runs_opened_from_a_link.png"), full_page=True)
        drawn = coloured_pixels(chart.screenshot())
        assert drawn >= 200, drawn  # its curve is drawn (axes and labels are grey)
        body = assert_page_shows(page, "Runs", ["from the link"], min_charts=1)
        # the run never evaluated (it was stopped early): the page opens on the curve it has, not an empty one
        assert "could not read" not in body and "1 run drawn" in body and "no metric points" not in body
