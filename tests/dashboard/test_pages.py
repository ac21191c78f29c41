"""Every dashboard page rendered with Streamlit's AppTest against the fixture database, on SQLite and on
PostgreSQL (`fixture_url`); the empty- and missing-database cases on SQLite.

Each test checks that the page ran without an exception and shows the numbers worked out by hand in
conftest.EXPECTED (a mean loss, a verdict, a progress fraction, an error line).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from scipy import stats as scipy_stats
from streamlit.testing.v1 import AppTest

from tests.dashboard.conftest import EXPECTED, LEAN8_LABEL
from tests.db.test_sql import RUNAWAY
from tests.pg import snapshot

APP = str(Path(__file__).resolve().parents[2] / "dashboard" / "app.py")
# what a page draws, not SQL: the [postgresql] cases run in the full suite (tests/conftest.py)
POSTGRES_IN_FULL_SUITE_ONLY = True


def render(monkeypatch, url: str, page: str | None = None, timeout: float = 60) -> AppTest:
    """The dashboard on the database at `url`, switched to views/`page`.py; fails on any exception."""
    monkeypatch.setenv("LOOPLAB_DB", url)
    at = AppTest.from_file(APP, default_timeout=timeout)
    at.run()
    if page:
        at.switch_page(f"views/{page}.py").run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def frames(at: AppTest) -> list:
    return [d.value for d in at.dataframe]


def frame_with(at: AppTest, *columns: str):
    return next(df for df in frames(at) if set(columns) <= set(df.columns))


def shown_cells(at: AppTest, *columns: str):
    """The text a person sees in the table that has `columns` (a Styler's display values)."""
    for element in at.dataframe:
        if set(columns) <= set(element.value.columns):
            styler = element.proto.arrow_data.styler
            return pa.ipc.open_stream(styler.display_values).read_all().to_pandas()
    raise AssertionError(f"no table with {columns}")


def text_of(at: AppTest) -> str:
    parts = [m.value for m in at.markdown] + [c.value for c in at.caption] + [i.value for i in at.info]
    parts += [e.value for e in at.error] + [t.value for t in at.title]
    return "\n".join(str(p) for p in parts)


def test_queue_page(monkeypatch, fixture_url):
    at = render(monkeypatch, fixture_url)
    counts = {m.label: m.value for m in at.metric}
    assert counts["running"] == "1" and counts["failed"] == "1" and counts["queued"] == "1"
    assert counts["succeeded"] == "17"  # 8 train + 4 sweeps + 4 decode benches + 1 iso-time run
    bars = [p for p in at.get("progress")]
    assert len(bars) == 1 and bars[0].value == pytest.approx(EXPECTED["running_progress"] * 100, abs=1)
    assert "1,234 tok/s" in bars[0].proto.text and "ETA 2m 05s" in bars[0].proto.text
    failures = next(df for df in frames(at) if "error_summary" in df.columns)
    assert list(failures["error_summary"]) == [EXPECTED["failure_line"]]


def test_runs_page(monkeypatch, fixture_url):
    at = render(monkeypatch, fixture_url, "runs")
    runs = frame_with(at, "final_val_loss", "train_loops")
    assert len(runs) == 11
    agg = frame_with(at, "final_val_loss (mean)").set_index("variant_label")
    assert (
        agg.loc["plain", "final_val_loss (mean)"] == pytest.approx(3.32) and agg.loc["plain", "n_seeds"] == 2
    )
    # two variants of the recipe lean: two rows (the iso-time lean run has its own budget row)
    lean8 = agg.loc[LEAN8_LABEL]
    assert lean8["final_val_loss (mean)"] == pytest.approx(EXPECTED["lean8_mean"]) and lean8["n_seeds"] == 2
    lean = agg[agg["budget"] == "1M tokens"].loc["lean"]
    assert lean["final_val_loss (mean)"] == pytest.approx((3.15 + 3.16) / 2)
    assert len(at.get("vega_lite_chart")) == 2  # the curves and the train-time depth curves
    # a missing cell reads "—" (the grid's placeholder), not "None": the running run has no final loss yet
    runs = runs.set_index("status")
    assert runs.loc["running", "final_val_loss"] is None or np.isnan(runs.loc["running", "final_val_loss"])
    assert {d.proto.placeholder for d in at.dataframe} == {"—"}


def test_runs_page_train_time_depth_curves(monkeypatch, fixture_url):
    at = render(monkeypatch, fixture_url, "runs")
    last = frame_with(at, "val_loss@1", "val_loss@8")
    assert last["run"].tolist() == [
        f"{LEAN8_LABEL} · seed 1 · #6"
    ]  # the newest run with the most loop counts
    assert last["val_loss@1"].iloc[0] == pytest.approx(3.07 + 0.7) and last["val_loss@8"].iloc[
        0
    ] == pytest.approx(3.07)
    lean0 = next(i for i in at.multiselect(key="runs_depth_pick").options if "#3 " in i)
    at.multiselect(key="runs_depth_pick").set_value([3, 5]).run()
    assert not at.exception and lean0
    last = frame_with(at, "val_loss@1", "val_loss@8").set_index("job_id")
    assert last.loc[3, "val_loss@1"] == pytest.approx(EXPECTED["lean_last_val_loss_at_1"])
    assert last.loc[3, "val_loss@4"] == pytest.approx(3.15)  # the trained count: val_loss itself
    # the val_loss@N keys are metrics of the curves chart too
    assert "val_loss@8" in at.selectbox(key="runs_metric").options
    at.selectbox(key="runs_metric").set_value("val_loss@8").run()
    assert not at.exception and len(at.get("vega_lite_chart")) == 2


def test_compare_page(monkeypatch, fixture_url):
    at = render(monkeypatch, fixture_url, "compare")
    iso = frame_with(at, "verdict", "best_loops", "budget_tokens").set_index("variant_label")
    assert iso.loc["parcae", "mean"] == pytest.approx(EXPECTED["parcae_mean"])
    assert iso.loc["parcae", "best_loops"] == "8/12" and iso.loc["parcae", "verdict"] == "reference"
    # two seeds a side: the interval is at least diff ± t(4 dof)·σ·√(1/2 + 1/2) from the noise floor
    half = scipy_stats.t.ppf(0.975, EXPECTED["noise_dof"]) * EXPECTED["noise_sigma"]
    lean = iso.loc["lean"]
    assert lean["mean"] == pytest.approx(EXPECTED["lean_mean"]) and lean["verdict"] == "not resolved"
    assert (lean["ci_low"], lean["ci_high"]) == (pytest.approx(0.005 - half), pytest.approx(0.005 + half))
    assert (lean["n_seeds"], lean["n_ref"], lean["method"]) == (2, 2, "bootstrap ∪ noise floor")
    plain = iso.loc["plain"]
    assert plain["mean"] == pytest.approx(EXPECTED["plain_mean"]) and plain["verdict"] == "worse"
    assert plain["ci_low"] == pytest.approx(0.21 - half)
    # a second variant of lean is its own row, never averaged with lean; -0.05 with two seeds a side
    # is not resolved at this noise (its interval just reaches 0)
    lean8 = iso.loc[LEAN8_LABEL]
    assert lean8["mean"] == pytest.approx(EXPECTED["lean8_mean"]) and lean8["recipe"] == "lean"
    assert lean8["ci_high"] == pytest.approx(-0.05 + half) and lean8["verdict"] == "not resolved"
    z = scipy_stats.norm.ppf(0.975) + scipy_stats.norm.ppf(0.8)
    assert lean["seeds_needed"] == math.ceil(2 * (z * EXPECTED["noise_sigma"] / 0.01) ** 2)
    # the noise floor with its interval, beside the comparisons, and its inputs
    text = text_of(at)
    assert f"σ = {EXPECTED['noise_sigma']:.4f}" in text and "4 degree(s) of freedom" in text
    assert text.count("Noise floor:") == 3  # the top, iso-FLOP and iso-time
    groups = frame_with(at, "dof", "n_seeds", "std").set_index("variant_label")
    assert groups.loc["plain", "std"] == pytest.approx(0.04 / 2**0.5) and groups.loc["plain", "dof"] == 1
    # one token budget per variant: no L(D) fit, said so
    fits = frame_with(at, "beta", "note")
    assert fits["beta"].isna().all() and fits["note"].str.contains("3 token budgets").all()
    assert "no exchange rate" in text and np.isnan(lean["data_worth_pct"])
    assert len(at.get("vega_lite_chart")) >= 2  # the interval chart and the iso-FLOP chart at least
    pairs = frame_with(at, "ref_job_id")
    assert pairs["diff"].iloc[0] == pytest.approx(EXPECTED["iso_time_diff"])
    assert pairs["method"].iloc[0] == "noise floor"  # one run a side: the noise floor gives the interval
    assert pairs["ci_high"].iloc[0] == pytest.approx(EXPECTED["iso_time_diff"] + half * 2**0.5)
    tp = frame_with(at, "ratio", "tokens_per_s").set_index("variant_label")
    assert tp.loc["lean", "ratio"] == pytest.approx(EXPECTED["lean_throughput_ratio"])
    assert "not decayed" in text

    # seeds were repeated: the fallback threshold changes nothing, δ changes seeds_needed
    at.number_input(key="noise_threshold").set_value(0.001).run()
    at.number_input(key="power_delta").set_value(0.02).run()
    iso = frame_with(at, "best_loops", "budget_tokens").set_index("variant_label")
    assert iso.loc["lean", "verdict"] == "not resolved"
    assert iso.loc["lean", "seeds_needed"] == math.ceil(2 * (z * EXPECTED["noise_sigma"] / 0.02) ** 2)
    # another reference variant
    at.selectbox(key="reference").set_value("plain").run()
    iso = frame_with(at, "best_loops", "budget_tokens").set_index("variant_label")
    assert iso.loc["plain", "verdict"] == "reference" and iso.loc["parcae", "diff"] == pytest.approx(-0.21)
    assert iso.loc["parcae", "verdict"] == "better"


def test_every_verdict_has_a_cell_and_a_line_colour():
    from looplab.analysis.stats import ClaimVerdict, Verdict
    from looplab.dashboard import ui

    # a verdict without a colour would show as a white cell and break the interval chart's scale; a
    # claim's verdict is only ever a cell (the Claims page draws no interval chart)
    assert set(ui.VERDICT_STROKES) == set(Verdict)
    assert set(ui.VERDICT_COLORS) == set(Verdict) | set(ClaimVerdict)
    assert (
        ui.VERDICT_COLORS["not resolved"] == ui.VERDICT_COLORS[Verdict.NOT_RESOLVED]
    )  # read by plain strings


def test_compare_page_without_replicated_seeds_says_so(monkeypatch, fixture_url):
    at = render(monkeypatch, fixture_url, "compare")
    # only the iso-time run (its budget is "time of #N"): no variant has two seeds at one budget
    time_budget = next(o for o in at.multiselect(key="filter_budget").options if o.startswith("time of"))
    at.multiselect(key="filter_budget").set_value([time_budget]).run()
    assert not at.exception
    warnings = [w.value for w in at.warning]
    assert (
        "no replicated seeds: using the fixed 0.01 threshold: every difference with one seed per side is "
        "judged by it." in warnings
    )
    assert "Noise floor:" not in text_of(at)


# a known L(D) for the exchange-rate page test: plain follows it, `lean · loops=8` is 0.02 lower
LAW = dict(E=2.0, B=150.0, beta=0.32)
LAW_BUDGETS = (1_000_000, 2_000_000, 4_000_000)


def law(tokens: float) -> float:
    return LAW["E"] + LAW["B"] * tokens ** -LAW["beta"]


@pytest.fixture(scope="module")
def budgets_db(tmp_path_factory):
    """plain and `lean · loops=8` at 1M, 2M and 4M tokens × seeds 0, 1, losses from `law`."""
    from looplab.orchestrator import schema
    from looplab.orchestrator.db import dispose_all, engine, resolve_url, session
    from looplab.orchestrator.states import JobStatus
    from tests.dashboard.conftest import VARIANTS, variant_columns

    url = resolve_url(str(tmp_path_factory.mktemp("budgets_db") / "looplab.db"))
    eng = engine(url)
    now = time.time()
    with session(eng) as s:
        s.add(schema.GridRow(id=1, name="budgets", spec="{}", spec_hash="g1", created_at=now))
        for key, offset in (("plain", 0.0), ("lean8", -0.02)):
            recipe, overrides = VARIANTS[key][0], VARIANTS[key][1]
            for tokens in LAW_BUDGETS:
                for seed in (0, 1):
                    cfg = {"recipe": recipe, "model": overrides, "seed": seed, "tokens": tokens}
                    job = schema.Job(
                        grid_id=1,
                        kind="train",
                        config=json.dumps(cfg, sort_keys=True),
                        config_hash=json.dumps(cfg, sort_keys=True),
                        recipe=recipe,
                        size="tiny",
                        seed=seed,
                        status=JobStatus.SUCCEEDED,
                        budget=json.dumps({"tokens": tokens}),
                        budget_tokens=tokens,
                        created_at=now,
                        started_at=now,
                        finished_at=now,
                        **variant_columns(key),
                    )
                    s.add(job)
                    s.flush()
                    s.add(
                        schema.TrainResult(
                            job_id=job.id,
                            steps=10,
                            tokens=tokens,
                            train_seconds=10.0,
                            final_val_loss=law(tokens) + offset + 0.001 * seed,
                        )
                    )
    eng.dispose()
    dispose_all()
    return url


def test_compare_page_exchange_rate(monkeypatch, budgets_db):
    at = render(monkeypatch, budgets_db, "compare")
    at.selectbox(key="reference").set_value("plain").run()
    assert not at.exception
    fits = frame_with(at, "beta", "note").set_index("variant_label")
    assert (
        fits.loc["plain", "beta"] == pytest.approx(LAW["beta"], rel=1e-3) and fits.loc["plain", "note"] == ""
    )
    iso = frame_with(at, "verdict", "data_worth_pct", "budget_tokens")
    lean8 = iso[iso["variant_label"] == LEAN8_LABEL].set_index("budget_tokens")
    for tokens in LAW_BUDGETS:  # 0.02 lower loss = the data that lowers plain's L(D) by 0.02 there
        reducible = LAW["B"] * tokens ** -LAW["beta"]
        expected = 100 * ((1 - 0.02 / reducible) ** (-1 / LAW["beta"]) - 1)
        assert lean8.loc[tokens, "data_worth_pct"] == pytest.approx(expected, rel=1e-2)
        assert lean8.loc[tokens, "verdict"] == "better"  # paired seeds, the same -0.02 each
    assert "fitted to `plain`" in text_of(at)


def test_compare_page_loss_by_architecture(monkeypatch, fixture_url):
    at = render(monkeypatch, fixture_url, "compare")
    assert at.selectbox(key="arch_budget").value == "1M tokens"
    assert (at.selectbox(key="arch_x").value, at.selectbox(key="arch_color").value) == (
        "train_loops",
        "d_model",
    )
    points = frame_with(at, "train_loops", "d_model", "mean").set_index("variant_label")
    assert len(points) == 4 and points.loc[LEAN8_LABEL, "train_loops"] == 8
    assert points.loc[LEAN8_LABEL, "mean"] == pytest.approx(EXPECTED["lean8_mean"])
    at.selectbox(key="arch_x").set_value("effective_depth").run()
    at.selectbox(key="arch_color").set_value("variant_label").run()
    assert not at.exception
    points = frame_with(at, "effective_depth", "mean").set_index("variant_label")
    assert points.loc["plain", "effective_depth"] == 6.0


def test_depth_page(monkeypatch, fixture_url):
    at = render(monkeypatch, fixture_url, "depth")
    wide = frame_with(at, "8 loops").set_index("variant_label")
    assert wide.loc["parcae", "8 loops"] == pytest.approx((3.10 + 3.13) / 2)
    rd = frame_with(at, "round", "mean")
    first = rd[(rd["variant_label"] == "lean") & (rd["round"] == 1)].iloc[0]
    assert first["mean"] == pytest.approx(0.505) and first["n_seeds"] == 2
    # loss vs loops, round 1 on its own, rounds 2+ on their own scale, the far-copy pair, the change
    # ratios and the relative change against bf16 resolution
    assert len(at.get("vega_lite_chart")) == 6
    at.selectbox(key="depth_x").set_value("inference_depth").run()
    at.selectbox(key="depth_color").set_value("d_model").run()
    assert not at.exception and len(at.get("vega_lite_chart")) == 6


def test_decode_page(monkeypatch, fixture_url):
    at = render(monkeypatch, fixture_url, "decode")
    t = next(df for df in frames(at) if "ms_ratio" in df.columns)
    at512 = t[(t["context_len"] == 512) & (t["batch_size"] == 8)].set_index("variant_label")
    assert at512.loc["lean", "ms_per_token"] == pytest.approx(8.0) and at512.loc[
        "lean", "ms_ratio"
    ] == pytest.approx(0.5)
    assert at512.loc["lean", "kv_cache_mb"] == pytest.approx(128.0)
    # the second variant of lean is its own row: 3 ms x 4 = 12 ms, 0.75 of parcae's 16
    assert at512.loc[LEAN8_LABEL, "arch"] == "lean" and at512.loc[LEAN8_LABEL, "ms_ratio"] == pytest.approx(
        0.75
    )
    assert len(at.get("vega_lite_chart")) == 2


def test_sql_page_reads_and_refuses_writes(monkeypatch, fixture_url):
    url = fixture_url
    before = snapshot(url)
    at = render(monkeypatch, url, "sql")
    result = at.dataframe[0].value
    assert {"variant_label", "recipe", "final_val_loss", "best_loops", "train_flops"} <= set(result.columns)
    assert LEAN8_LABEL in set(result["variant_label"])
    at.text_area(key="sql_text").set_value("SELECT COUNT(*) AS n FROM jobs")
    at.button(key="sql_run").click().run()
    assert at.dataframe[0].value["n"].iloc[0] == 20
    for write in (
        "DELETE FROM jobs",
        "DROP TABLE metrics",
        "UPDATE jobs SET status='queued'",
        "WITH x AS (SELECT 1) INSERT INTO grids(name) SELECT 'x'",
        "PRAGMA user_version = 7",
    ):
        at.text_area(key="sql_text").set_value(write)
        at.button(key="sql_run").click().run()
        assert not at.exception
        assert at.error and "Refused" in at.error[0].value, write
    # a runaway query is stopped at the page's timeout, with the limit named
    at.text_area(key="sql_text").set_value(RUNAWAY)
    at.number_input(key="sql_timeout").set_value(0.5)
    at.button(key="sql_run").click().run()
    assert not at.exception
    assert at.error and "statement timeout of 0.5 s" in at.error[0].value
    assert snapshot(url) == before


def test_filters_narrow_the_pages(monkeypatch, fixture_url):
    monkeypatch.setenv("LOOPLAB_DB", fixture_url)
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["recipe"] = "lean,plain"  # preselects the sidebar filter (a linkable view)
    at.run()
    assert at.multiselect(key="filter_recipe").value == ["lean", "plain"]
    at.switch_page("views/compare.py").run()
    assert not at.exception
    iso = frame_with(at, "best_loops", "budget_tokens")
    assert set(iso["variant_label"]) == {"lean", LEAN8_LABEL, "plain"}


def test_architecture_filter_narrows_every_page(monkeypatch, fixture_url):
    monkeypatch.setenv("LOOPLAB_DB", fixture_url)
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["train_loops"] = "8"
    at.run()
    assert at.multiselect(key="filter_train_loops").value == [8]
    assert at.multiselect(key="filter_train_loops").options == ["1", "4", "8"]  # as the widget shows them
    at.switch_page("views/compare.py").run()
    iso = frame_with(at, "best_loops", "budget_tokens")
    assert set(iso["variant_label"]) == {"parcae", LEAN8_LABEL}  # parcae's sampler mean is 8 loops
    at.switch_page("views/decode.py").run()
    assert set(frame_with(at, "ms_ratio")["variant_label"]) == {"parcae", LEAN8_LABEL}
    at.multiselect(key="filter_train_loops").set_value([]).run()
    assert len(set(frame_with(at, "ms_ratio")["variant_label"])) == 4


@pytest.mark.parametrize("page", [None, "runs", "compare", "depth", "decode", "sql"])
def test_empty_database_is_friendly(monkeypatch, empty_db, page):
    at = render(monkeypatch, empty_db[0], page)
    if page != "sql":
        assert "No " in text_of(at) or "no " in text_of(at)


def test_missing_database_is_friendly(monkeypatch, tmp_path):
    at = render(monkeypatch, str(tmp_path / "nope.db"))
    assert at.error and "no database at" in at.error[0].value
    assert not (tmp_path / "nope.db").exists()


def test_an_unreachable_server_is_one_line_naming_the_database(monkeypatch):
    import socket

    with socket.socket() as sock:  # a port nothing listens on once the block ends
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    at = render(monkeypatch, f"postgresql://looplab:secret@127.0.0.1:{port}/study")
    assert len(at.error) == 1 and "secret" not in at.error[0].value
    assert at.error[0].value.startswith(
        f"Cannot open the results database: database postgresql+psycopg://looplab:***@127.0.0.1:{port}/study "
        "cannot be reached ("
    )


def test_runs_page_wall_time_and_seed_grouping(monkeypatch, fixture_url):
    at = render(monkeypatch, fixture_url, "runs")
    at.selectbox(key="runs_x").set_value("wall time (s)")
    at.selectbox(key="runs_metric").set_value("train_loss")
    at.multiselect(key="runs_group").set_value(["recipe", "seed"]).run()
    assert not at.exception
    assert "not decayed" in text_of(at)
    assert len(at.get("vega_lite_chart")) == 2
