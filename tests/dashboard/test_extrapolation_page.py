"""The Extrapolation page in AppTest on a database with loop-geometry rows, on an empty database, and in
a headless browser (its numbers: tests/analysis/test_extrapolation.py)."""

from __future__ import annotations

import json

import pytest

from tests.dashboard.browser import check_page_in_browser
from tests.dashboard.test_pages import render


@pytest.fixture(scope="module")
def geometry_db(tmp_path_factory):
    """The dashboard fixture database plus angle, state variance and interaction rows for its sweeps."""
    from looplab.orchestrator import schema
    from looplab.orchestrator.db import dispose_all, engine, session
    from tests.dashboard.conftest import build_fixture_db

    path = tmp_path_factory.mktemp("geometry_db") / "looplab.db"
    url = build_fixture_db(path)
    with session(engine(url)) as s:
        for delta in s.query(schema.RoundDelta).all():
            delta.angle, delta.state_var = 0.1 * delta.round, 1.0 + delta.round
        sweeps = sorted({d.job_id for d in s.query(schema.RoundDelta).all()})
        for job_id in sweeps:
            for i in range(1, 4):
                for j in range(i + 1, 5):
                    s.add(
                        schema.RoundInteraction(
                            job_id=job_id, loops=4, skipped=i, round=j, interaction=0.1 * i * j
                        )
                    )
    dispose_all()
    return url, path


def test_extrapolation_page_in_apptest(monkeypatch, geometry_db):
    at = render(monkeypatch, geometry_db[0], "extrapolation")
    assert [h.value for h in at.header] == [
        "Loss vs effective depth",
        "Loop geometry per round",
        "Round interactions",
    ]
    table = next(d.value for d in at.dataframe if "gap_at_deepest" in d.value.columns).set_index(
        "variant_label"
    )
    # parcae: 2 + 2 x loops + 2, trained at 8 loops (depth 20); seeds 0/1 at 8 loops: 3.10, 3.13
    assert table.loc["parcae", "trained_depth"] == 20 and table.loc["parcae", "deepest"] == 2 + 2 * 16 + 2
    assert table.loc["parcae", "loss_at_trained"] == pytest.approx((3.10 + 3.13) / 2)
    assert len(at.get("vega_lite_chart")) == 3

    def geometry_y_scale():
        spec = json.loads(at.get("vega_lite_chart")[1].proto.spec)
        return [layer["encoding"]["y"].get("scale", {}) for layer in spec.get("layer", [spec])][0]

    assert at.checkbox(key="extrapolation_log").value and geometry_y_scale().get("type") == "log"
    at.checkbox(key="extrapolation_log").uncheck().run()
    assert geometry_y_scale().get("type") is None
    at.selectbox(key="extrapolation_metric").set_value("state_var").run()
    assert not at.exception
    matrix = next(d.value for d in at.dataframe if "skipped" in d.value.columns)
    assert len(matrix) == 6 and matrix["mean"].max() == pytest.approx(0.1 * 3 * 4)
    heat = json.loads(at.get("vega_lite_chart")[2].proto.spec)
    assert heat["encoding"]["color"]["scale"] == {
        "scheme": "viridis",
        "domainMin": 0,
    }  # from 0, not the cells' span
    assert any("Colour scale from 0; the cells span" in c.value for c in at.caption)


def test_extrapolation_page_on_an_empty_database(monkeypatch, empty_db):
    at = render(monkeypatch, empty_db[0], "extrapolation")
    assert any("No depth sweep results yet" in i.value for i in at.info)


def test_extrapolation_page_in_a_browser(geometry_db, dashboard_server, browser):
    expected = ["Loss vs effective depth", "gap_at_deepest", "Loop geometry per round", "Round interactions"]
    check_page_in_browser(
        dashboard_server,
        browser,
        geometry_db[1],
        "extrapolation",
        "Extrapolation",
        expected,
        height=2600,
        min_charts=3,
    )
