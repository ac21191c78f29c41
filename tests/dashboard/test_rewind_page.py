"""The Runs page shows a rewound spike (AppTest): the superseded steps drawn faint and dashed beside
the run's one live curve, the rewind listed with its skipped rows, its health marker on the curve."""

from __future__ import annotations

import json
from pathlib import Path

from streamlit.testing.v1 import AppTest

from looplab import Grid, Queue
from looplab.orchestrator.health import HealthWatch
from looplab.orchestrator.jobqueue import claim
from looplab.orchestrator.writer import write_events
from looplab.workers.reporter import Event, EventKind
from tests.dashboard.test_curve_smoothing import datasets, layers, mark
from tests.orchestrator import fake_jobs

APP = str(Path(__file__).resolve().parents[2] / "dashboard" / "app.py")


def point(step: int, value: float) -> Event:
    payload = {"key": "train_loss", "step": step, "value": value, "tokens": 64 * step, "wall_s": 0.1 * step}
    return Event(EventKind.METRIC, 1.0, payload)


def test_runs_page_draws_the_superseded_segment_faint_and_lists_the_skipped_rows(tmp_path, monkeypatch):
    q = Queue(db=tmp_path / "q.db", artifacts=tmp_path / "art", kinds=fake_jobs)
    (job,) = q.submit(Grid("r", base={"tokens": 100}))
    claim(q.eng, job, "driver", str(tmp_path / "a"))
    events = [point(s, 50.0 if s == 30 else 4.0 - 0.02 * s) for s in range(1, 31)]
    events.append(Event(EventKind.REWOUND, 2.0, {"step": 25, "spiked_step": 30, "rows": [120, 121], "n": 1}))
    events += [point(s, 3.0 - 0.02 * s) for s in range(26, 41)]
    write_events(q.eng, [(job, 1, events)], HealthWatch())
    monkeypatch.setenv("LOOPLAB_DB", q.url)
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.switch_page("views/runs.py").run()
    at.selectbox(key="runs_metric").set_value("train_loss").run()
    at.selectbox(key="runs_x").set_value("step").run()
    at.selectbox(key="runs_smoothing").set_value("none").run()
    assert not at.exception, [e.message for e in at.exception]
    chart = at.get("vega_lite_chart")[0]
    leaves, data = layers(json.loads(chart.proto.spec)), datasets(chart)
    dashed = [leaf for leaf in leaves if mark(leaf)["type"] == "line" and mark(leaf).get("strokeDash")]
    assert len(dashed) == 1 and mark(dashed[0])["opacity"] < 0.5
    gone = data[dashed[0]["data"]["name"]]
    assert [(r["step"], r["value"]) for r in gone][-1] == (30, 50.0)
    assert [r["step"] for r in gone] == list(range(26, 31))
    live = next(leaf for leaf in leaves if mark(leaf)["type"] == "line" and leaf not in dashed)
    steps = sorted(r["step"] for r in data[live["data"]["name"]])
    assert steps == list(range(1, 41)) and max(r["mean"] for r in data[live["data"]["name"]]) < 50.0
    captions = "\n".join(c.value for c in at.caption)
    assert "1 loss spike(s) rewound" in captions
    table = next(df.value for df in at.dataframe if "spiked_step" in df.value.columns)
    row = table.iloc[0]
    assert (int(row["step"]), int(row["spiked_step"]), list(row["rows"])) == (25, 30, [120, 121])
    markers = [leaf for leaf in leaves if mark(leaf).get("shape") == "triangle-down"]
    assert "rewind" in {m["rule"] for m in data[markers[0]["data"]["name"]]}
