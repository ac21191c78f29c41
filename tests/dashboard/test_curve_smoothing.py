"""The Runs and Compare pages' smoothing and health markers (AppTest): raw by default, the raw curve the
bold line and a chosen smoothing drawn light over it with its setting named, and a marker at the step
of a health event."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pyarrow as pa
from streamlit.testing.v1 import AppTest

from looplab import Grid, Queue
from looplab.analysis.smoothing import SMOOTHED_OPACITY
from looplab.orchestrator.db import engine
from looplab.orchestrator.health import Finding, HealthSettings, HealthWatch, Level, Rule, store
from looplab.orchestrator.jobqueue import claim
from looplab.orchestrator.writer import write_events
from looplab.workers.reporter import Event, EventKind
from tests.orchestrator import fake_jobs

APP = str(Path(__file__).resolve().parents[2] / "dashboard" / "app.py")


def layers(spec: dict, data: dict | None = None) -> list[dict]:
    """Every leaf layer of a Vega-Lite spec, with the data it draws (a layer's own, else its parent's)."""
    data = spec.get("data", data)
    if "layer" in spec:
        return [leaf for layer in spec["layer"] for leaf in layers(layer, data)]
    return [{**spec, "data": data}]


def datasets(element) -> dict[str, list[dict]]:
    """The chart's named datasets (Streamlit sends them beside the spec, as Arrow) as lists of rows."""
    return {
        d.name: pa.ipc.open_stream(d.data.data).read_all().to_pandas().to_dict("records")
        for d in element.proto.datasets
    }


def mark(layer: dict) -> dict:
    return layer["mark"] if isinstance(layer["mark"], dict) else {"type": layer["mark"]}


def test_runs_page_draws_raw_curves_bold_a_chosen_smoothing_light_and_marks_health_events(
    tmp_path, monkeypatch
):
    q = Queue(db=tmp_path / "q.db", artifacts=tmp_path / "art", kinds=fake_jobs)
    (job,) = q.submit(Grid("s", base={"tokens": 100}))
    claim(q.eng, job, "driver", str(tmp_path / "a"))
    values = [4.0 - 0.02 * s + (0.3 if s % 2 else 0.0) for s in range(60)]
    values[40] = 30.0  # a loss spike
    events = [
        Event(
            EventKind.METRIC,
            1.0,
            {"key": "train_loss", "step": s, "value": v, "tokens": 64 * s, "wall_s": s * 0.1},
        )
        for s, v in enumerate(values)
    ]
    write_events(q.eng, [(job, 1, events)], HealthWatch(HealthSettings(spike_window=10)))
    monkeypatch.setenv("LOOPLAB_DB", q.url)
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.switch_page("views/runs.py").run()
    assert not at.exception, [e.message for e in at.exception]
    at.selectbox(key="runs_metric").set_value("train_loss").run()
    at.selectbox(key="runs_x").set_value("step").run()
    assert at.selectbox(key="runs_smoothing").value == "none"  # raw by default
    at.selectbox(key="runs_smoothing").set_value("EMA 0.9").run()
    chart = at.get("vega_lite_chart")[0]
    spec, data = json.loads(chart.proto.spec), datasets(chart)
    leaves = layers(spec)
    lines = [leaf for leaf in leaves if mark(leaf)["type"] == "line"]
    light = [leaf for leaf in lines if mark(leaf).get("opacity") == SMOOTHED_OPACITY]
    assert len(light) == 1 and len(lines) == 2  # the smoothed curve, light, beside the bold raw one
    bold = next(leaf for leaf in lines if leaf not in light)
    assert "opacity" not in mark(bold)
    last = max(data[bold["data"]["name"]], key=lambda r: r["step"])
    assert last["mean"] == values[-1]  # the bold line ends at the raw final value
    markers = [leaf for leaf in leaves if mark(leaf).get("shape") == "triangle-down"]
    assert len(markers) == 1 and markers[0]["encoding"]["y"]["field"] == "raw"
    marked = data[markers[0]["data"]["name"]]
    assert [(m["step"], m["rule"], m["raw"]) for m in marked] == [(40, "loss_spike", 30.0)]

    def swing(leaf: dict) -> float:
        """The largest step-to-step change of a drawn line over its first 30 points."""
        ys = [r["mean"] for r in sorted(data[leaf["data"]["name"]], key=lambda r: r["step"])][:30]
        return max(abs(a - b) for a, b in zip(ys, ys[1:]))

    assert swing(light[0]) < 0.5 * swing(bold)  # the zig-zag of 0.3 damped in the light line only
    assert all(leaf["encoding"]["color"]["legend"]["labelLimit"] == 0 for leaf in lines)  # labels never cut
    captions = "\n".join(c.value for c in at.caption)
    assert "1 health event(s) marked on the curves" in captions
    assert "Bold: the raw values. Light: smoothed (EMA 0.9)" in captions
    # no smoothing: no light layer
    at.selectbox(key="runs_smoothing").set_value("none").run()
    spec = json.loads(at.get("vega_lite_chart")[0].proto.spec)
    assert not [leaf for leaf in layers(spec) if mark(leaf).get("opacity") == SMOOTHED_OPACITY]


def test_compare_page_draws_the_raw_wall_time_curves_bold_and_a_chosen_smoothing_light(
    monkeypatch, fixture_db
):
    monkeypatch.setenv("LOOPLAB_DB", fixture_db[0])
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.switch_page("views/compare.py").run()
    assert not at.exception, [e.message for e in at.exception]

    def wall_time_lines() -> list[dict]:
        for chart in at.get("vega_lite_chart"):
            leaves = layers(json.loads(chart.proto.spec))
            if any(leaf.get("encoding", {}).get("x", {}).get("field") == "wall_s" for leaf in leaves):
                return [leaf for leaf in leaves if mark(leaf)["type"] == "line"]
        raise AssertionError("no wall-time chart")

    assert at.selectbox(key="compare_smoothing").value == "none"
    lines = wall_time_lines()
    assert [mark(leaf).get("opacity") for leaf in lines] == [None]
    assert lines[0]["encoding"]["y"]["field"] == "raw"
    at.selectbox(key="compare_smoothing").set_value("EMA 0.6").run()
    lines = wall_time_lines()
    assert sorted(mark(leaf).get("opacity") or 1 for leaf in lines) == [SMOOTHED_OPACITY, 1]
    assert {leaf["encoding"]["y"]["field"] for leaf in lines} == {"raw", "value"}
    # the fixture's curves hold 6 evaluations each: too short to smooth, and the caption says so
    assert "with fewer than 20 points are not smoothed" in "\n".join(c.value for c in at.caption)


def compare_db_with_a_health_event(fixture_path, tmp_path, step: int) -> tuple[str, int]:
    """A copy of the fixture database (SQLite's backup: whole, WAL included) whose iso-time run has a
    loss-spike event at `step`; (its path, the run's job id)."""
    path = tmp_path / "compare.db"
    with sqlite3.connect(fixture_path) as src, sqlite3.connect(path) as dst:
        src.backup(dst)
        (iso,) = dst.execute("SELECT id FROM jobs WHERE budget LIKE '%match_time_of%'").fetchone()
    eng = engine(f"sqlite:///{path}")
    with eng.begin() as conn:
        store(conn, iso, 1, Finding(Rule.LOSS_SPIKE, Level.WARNING, step, "train_loss", 9.0, "a spike"))
    return str(path), iso


def wall_time_chart(at) -> tuple[list[dict], dict]:
    """The Compare page's per-run wall-time chart: (its leaf layers, its datasets)."""
    for chart in at.get("vega_lite_chart"):
        leaves = layers(json.loads(chart.proto.spec))
        if any(leaf.get("encoding", {}).get("x", {}).get("field") == "wall_s" for leaf in leaves):
            return leaves, datasets(chart)
    raise AssertionError("no wall-time chart")


def test_compare_page_marks_a_runs_health_event_on_its_wall_time_curve(tmp_path, monkeypatch, fixture_db):
    # the iso-time run evaluates every 10 steps (1 s a step): an event at step 25 sits on step 20's point
    db, iso = compare_db_with_a_health_event(fixture_db[1], tmp_path, step=25)
    monkeypatch.setenv("LOOPLAB_DB", db)
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.switch_page("views/compare.py").run()
    assert not at.exception, [e.message for e in at.exception]
    for smoothing in ("none", "EMA 0.6"):  # on the raw point whether or not the line is smoothed
        at.selectbox(key="compare_smoothing").set_value(smoothing).run()
        leaves, data = wall_time_chart(at)
        markers = [leaf for leaf in leaves if mark(leaf).get("shape") == "triangle-down"]
        assert len(markers) == 1 and markers[0]["encoding"]["y"]["field"] == "raw"
        assert markers[0]["encoding"]["x"]["field"] == "wall_s"
        marked = data[markers[0]["data"]["name"]]
        # val_loss at step 20 = 3.13 + (50 - 20) × 0.01 (tests/dashboard/conftest.py `_curves`)
        assert [(m["job_id"], m["step"], m["rule"], m["wall_s"]) for m in marked] == [
            (iso, 25, "loss_spike", 20.0)
        ]
        assert abs(marked[0]["raw"] - 3.43) < 1e-9
    captions = "\n".join(c.value for c in at.caption)
    assert "1 health event(s) marked on the curves" in captions and "means over seeds" in captions


def test_compare_page_without_health_events_has_no_marker_layer(monkeypatch, fixture_db):
    monkeypatch.setenv("LOOPLAB_DB", fixture_db[0])
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.switch_page("views/compare.py").run()
    assert not at.exception, [e.message for e in at.exception]
    leaves, _ = wall_time_chart(at)
    assert not [leaf for leaf in leaves if mark(leaf).get("shape") == "triangle-down"]
    assert "health event(s) marked" not in "\n".join(c.value for c in at.caption)
