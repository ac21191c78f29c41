"""Every dashboard page rendered with Streamlit's AppTest against the fixture database.

Each test checks that the page ran without an exception and shows the numbers worked out by hand in
conftest.EXPECTED (a mean loss, a verdict, a progress fraction, an error line).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from tests.dashboard.conftest import EXPECTED

APP = str(Path(__file__).resolve().parents[2] / "dashboard" / "app.py")


def render(monkeypatch, url: str, page: str | None = None) -> AppTest:
    monkeypatch.setenv("LOOPLAB_DB", url)
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    if page:
        at.switch_page(f"views/{page}.py").run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def frames(at: AppTest) -> list:
    return [d.value for d in at.dataframe]


def text_of(at: AppTest) -> str:
    parts = [m.value for m in at.markdown] + [c.value for c in at.caption] + [i.value for i in at.info]
    parts += [e.value for e in at.error] + [t.value for t in at.title]
    return "\n".join(str(p) for p in parts)


def test_queue_page(monkeypatch, fixture_db):
    at = render(monkeypatch, fixture_db[0])
    counts = {m.label: m.value for m in at.metric}
    assert counts["running"] == "1" and counts["failed"] == "1" and counts["queued"] == "1"
    assert counts["succeeded"] == "12"  # 6 train + 4 sweeps + 1 decode bench + 1 iso-time run
    bars = [p for p in at.get("progress")]
    assert len(bars) == 1 and bars[0].value == pytest.approx(EXPECTED["running_progress"] * 100, abs=1)
    assert "1,234 tok/s" in bars[0].proto.text and "ETA 2m 05s" in bars[0].proto.text
    failures = next(df for df in frames(at) if "error_summary" in df.columns)
    assert list(failures["error_summary"]) == [EXPECTED["failure_line"]]


def test_runs_page(monkeypatch, fixture_db):
    at = render(monkeypatch, fixture_db[0], "runs")
    runs = next(df for df in frames(at) if "final_val_loss" in df.columns)
    assert len(runs) == 9
    agg = next(df for df in frames(at) if "final_val_loss (mean)" in df.columns)
    row = agg[(agg["recipe"] == "plain")].iloc[0]
    assert row["final_val_loss (mean)"] == pytest.approx(3.32) and row["n_seeds"] == 2
    assert len(at.get("vega_lite_chart")) >= 1


def test_compare_page(monkeypatch, fixture_db):
    at = render(monkeypatch, fixture_db[0], "compare")
    iso = next(df for df in frames(at) if "verdict" in df.columns and "best_loops" in df.columns)
    iso = iso.set_index("recipe")
    assert iso.loc["parcae", "mean"] == pytest.approx(EXPECTED["parcae_mean"])
    assert iso.loc["parcae", "best_loops"] == "8/12" and iso.loc["parcae", "verdict"] == "reference"
    assert (
        iso.loc["lean", "mean"] == pytest.approx(EXPECTED["lean_mean"])
        and iso.loc["lean", "verdict"] == "noise"
    )
    assert (
        iso.loc["plain", "mean"] == pytest.approx(EXPECTED["plain_mean"])
        and iso.loc["plain", "verdict"] == "worse"
    )
    pairs = next(df for df in frames(at) if "ref_job_id" in df.columns)
    assert pairs["diff"].iloc[0] == pytest.approx(EXPECTED["iso_time_diff"])
    tp = next(df for df in frames(at) if "ratio" in df.columns).set_index("recipe")
    assert tp.loc["lean", "ratio"] == pytest.approx(EXPECTED["lean_throughput_ratio"])
    assert "not decayed" in text_of(at)

    # a tighter threshold turns lean's +0.005 into a real difference
    at.number_input(key="noise_threshold").set_value(0.001).run()
    iso = next(df for df in frames(at) if "best_loops" in df.columns).set_index("recipe")
    assert iso.loc["lean", "verdict"] == "worse"
    # another reference recipe
    at.selectbox(key="reference").set_value("plain").run()
    iso = next(df for df in frames(at) if "best_loops" in df.columns).set_index("recipe")
    assert iso.loc["plain", "verdict"] == "reference" and iso.loc["parcae", "diff"] == pytest.approx(-0.21)


def test_depth_page(monkeypatch, fixture_db):
    at = render(monkeypatch, fixture_db[0], "depth")
    wide = next(df for df in frames(at) if "8 loops" in df.columns).set_index("recipe")
    assert wide.loc["parcae", "8 loops"] == pytest.approx((3.10 + 3.13) / 2)
    rd = next(df for df in frames(at) if "round" in df.columns)
    first = rd[(rd["recipe"] == "lean") & (rd["round"] == 1)].iloc[0]
    assert first["mean"] == pytest.approx(0.505) and first["n_seeds"] == 2


def test_decode_page(monkeypatch, fixture_db):
    at = render(monkeypatch, fixture_db[0], "decode")
    t = next(df for df in frames(at) if "ms_ratio" in df.columns)
    lean = t[(t["arch"] == "lean") & (t["context_len"] == 512) & (t["batch_size"] == 8)].iloc[0]
    assert lean["ms_per_token"] == pytest.approx(8.0) and lean["ms_ratio"] == pytest.approx(0.5)
    assert lean["kv_cache_mb"] == pytest.approx(128.0)
    assert len(at.get("vega_lite_chart")) == 2


def test_sql_page_reads_and_refuses_writes(monkeypatch, fixture_db):
    url, path = fixture_db
    before = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    at = render(monkeypatch, url, "sql")
    result = at.dataframe[0].value
    assert {"recipe", "final_val_loss", "best_loops"} <= set(result.columns)
    at.text_area(key="sql_text").set_value("SELECT COUNT(*) AS n FROM jobs")
    at.button(key="sql_run").click().run()
    assert at.dataframe[0].value["n"].iloc[0] == 15
    for write in ("DELETE FROM jobs", "DROP TABLE metrics", "UPDATE jobs SET status='queued'",
                  "WITH x AS (SELECT 1) INSERT INTO grids(name) SELECT 'x'", "PRAGMA user_version = 7"):  # fmt: skip
        at.text_area(key="sql_text").set_value(write)
        at.button(key="sql_run").click().run()
        assert not at.exception
        assert at.error and "Refused" in at.error[0].value, write
    assert hashlib.sha256(Path(path).read_bytes()).hexdigest() == before


def test_filters_narrow_the_pages(monkeypatch, fixture_db):
    monkeypatch.setenv("LOOPLAB_DB", fixture_db[0])
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["recipe"] = "lean,plain"  # preselects the sidebar filter (a linkable view)
    at.run()
    assert at.multiselect(key="filter_recipe").value == ["lean", "plain"]
    at.switch_page("views/compare.py").run()
    assert not at.exception
    iso = next(df for df in frames(at) if "best_loops" in df.columns)
    assert set(iso["recipe"]) == {"lean", "plain"}


@pytest.mark.parametrize("page", [None, "runs", "compare", "depth", "decode", "sql"])
def test_empty_database_is_friendly(monkeypatch, empty_db, page):
    at = render(monkeypatch, empty_db[0], page)
    if page != "sql":
        assert "No " in text_of(at) or "no " in text_of(at)


def test_missing_database_is_friendly(monkeypatch, tmp_path):
    at = render(monkeypatch, str(tmp_path / "nope.db"))
    assert at.error and "no database at" in at.error[0].value
    assert not (tmp_path / "nope.db").exists()


def test_runs_page_wall_time_and_seed_grouping(monkeypatch, fixture_db):
    at = render(monkeypatch, fixture_db[0], "runs")
    at.selectbox(key="runs_x").set_value("wall time (s)")
    at.selectbox(key="runs_metric").set_value("train_loss")
    at.multiselect(key="runs_group").set_value(["recipe", "seed"]).run()
    assert not at.exception
    assert "not decayed" in text_of(at)
    assert len(at.get("vega_lite_chart")) == 1
