"""The Adaptive page in AppTest on the dashboard fixture database plus adaptive-job rows (on SQLite and
PostgreSQL), on a database without them, and once in headless Chromium (its numbers:
tests/analysis/test_adaptive.py). The frames it reads (orchestrator/frames.py) are checked here too."""

from __future__ import annotations

import math

import pytest
from scipy import stats as scipy_stats

from tests.dashboard.browser import check_page_in_browser
from tests.dashboard.conftest import EXPECTED
from tests.dashboard.test_curve_smoothing import datasets
from tests.dashboard.test_pages import frame_with, render, text_of
from tests.pg import BACKENDS, Databases

# parcae's depth sweep at 8 loops: 3.10 (seed 0), 3.13 (seed 1). Per cell: (rule, threshold, strategy,
# mean rounds, equivalent rounds, loss above the fixed depth)
# what the page draws, not SQL: the [postgresql] case runs in the full suite (tests/conftest.py)
POSTGRES_IN_FULL_SUITE_ONLY = True
CELLS = [
    ("fixed", None, "per_round", 8.0, 8.0, 0.0),
    ("state", 0.05, "per_round", 5.0, 5.0, 0.002),
    ("state", 0.2, "per_round", 3.0, 3.0, 0.3),
    ("kl", 0.01, "per_round", 4.0, 6.5, 0.001),
    ("state", 0.05, "first", 5.0, 4.4, 0.08),  # first changes the function: +0.08 is worse
    ("gate", 0.5, "per_round", 6.0, 6.3, -0.001),  # a learned exit below the fixed depth's loss
    ("router", None, "per_round", 5.5, 7.0, 0.0),  # a routed family's own depths (MoR), no threshold
]
FIXED_AT_8 = {0: 3.10, 1: 3.13}


def config(rule, threshold, strategy) -> str:
    return f"{rule if threshold is None else f'{rule}<{threshold:g}'} | {strategy}"


def add_adaptive_rows(url: str) -> None:
    """An adaptive job per parcae train job of the fixture database, with cells, histograms, task
    scores and decode timings."""
    from looplab.orchestrator import schema
    from looplab.orchestrator.db import dispose_all, engine, session

    with session(engine(url)) as s:
        trains = s.query(schema.Job).filter_by(kind="train", recipe="parcae", status="succeeded").all()
        for train in sorted(trains, key=lambda j: j.seed):
            job = schema.Job(
                kind="adaptive",
                config=f'{{"n": {train.id}}}',
                config_hash=f"adaptive{train.id}",
                status="succeeded",
                created_at=0.0,
                priority=0,
                attempts=1,
                max_attempts=3,
            )
            s.add(job)
            s.flush()
            s.add(schema.JobDep(job_id=job.id, depends_on=train.id))
            for rule, threshold, strategy, rounds, eq, extra in CELLS:
                key = config(rule, threshold, strategy)
                s.add(
                    schema.AdaptiveEval(
                        job_id=job.id,
                        config=key,
                        rule=rule,
                        threshold=threshold,
                        kv_strategy=strategy,
                        kv_m=None,
                        min_rounds=2,
                        max_rounds=8,
                        changes_function=strategy == "first",
                        val_loss=FIXED_AT_8[train.seed] + extra,
                        tokens=4096,
                        mean_rounds=rounds,
                        equivalent_rounds=eq,
                        kv_mib=0.25 if strategy == "first" else 1.0,
                        kv_mib_needed=0.25 if strategy == "first" else 1.0,
                    )
                )
                s.add(
                    schema.AdaptiveTaskScore(
                        job_id=job.id,
                        config=key,
                        task="deduction",
                        subset="all",
                        n=60,
                        acc=0.5 + 0.1 * (rounds / 8),
                        category="reasoning",
                    )
                )
            key = config("state", 0.05, "per_round")
            for split, bucket, lo, hi, rnd, count in [
                ("position", 0, 0, 8, 5, 10),
                ("position", 0, 0, 8, 6, 10),
                ("loss", 5, 4.0, math.inf, 8, 20),
            ]:
                s.add(
                    schema.AdaptiveExitRound(
                        job_id=job.id,
                        config=key,
                        split=split,
                        bucket=bucket,
                        bucket_lo=lo,
                        bucket_hi=hi,
                        round=rnd,
                        count=count,
                    )
                )
            for mode, ms in (("masked", 2.0), ("batch_stop", 1.5)):
                s.add(
                    schema.AdaptiveDecode(
                        job_id=job.id,
                        config=key,
                        batch_size=1,
                        mode=mode,
                        context_len=32,
                        ms_per_token=ms,
                        fixed_ms_per_token=2.0,
                        speedup=2.0 / ms,
                        equal_loss_rounds=6,  # a fixed depth of 6 is as good as state<0.05
                        equal_loss_ms_per_token=1.6,
                        tokens_per_s=1000 / ms,
                        mean_exit_round=5.0,
                        mean_step_rounds=8.0 if mode == "masked" else 5.0,
                    )
                )
    dispose_all()


@pytest.fixture(scope="module", params=BACKENDS)
def adaptive_url(request, tmp_path_factory):
    from tests.dashboard.conftest import build_fixture_db

    if request.param == "sqlite":
        url = build_fixture_db(tmp_path_factory.mktemp("adaptive_db") / "looplab.db")
    else:
        server = request.getfixturevalue("pg_server")
        if server is None:
            pytest.skip("no PostgreSQL server here (apt-get install -y postgresql)")
        databases = Databases("postgresql", tmp_path_factory.mktemp("adaptive_pg"), server)
        request.addfinalizer(databases.close)
        url = build_fixture_db(databases.new())
    add_adaptive_rows(url)
    return url


def test_the_frames_label_the_cells_with_their_trained_model(adaptive_url):
    from looplab.orchestrator import frames

    evals = frames.adaptive(adaptive_url)
    assert (
        len(evals) == 2 * len(CELLS) and set(evals["recipe"]) == {"parcae"} and set(evals["seed"]) == {0, 1}
    )
    first = evals[evals["kv_strategy"] == "first"]
    assert first["changes_function"].astype(bool).all() and evals["threshold"].isna().sum() == 2 * 2
    hist = frames.exit_rounds(adaptive_url)
    assert math.isinf(hist.loc[hist["split"] == "loss", "bucket_hi"].iloc[0])
    assert len(frames.adaptive_tasks(adaptive_url)) == 2 * len(CELLS)
    assert set(frames.adaptive_decodes(adaptive_url)["mode"]) == {"masked", "batch_stop"}


def test_adaptive_page_in_apptest(monkeypatch, adaptive_url):
    from looplab.analysis import adaptive, variants
    from looplab.orchestrator import frames

    at = render(monkeypatch, adaptive_url, "adaptive")
    assert [h.value for h in at.header] == [
        "Loss vs compute",
        "Rounds saved at equal loss",
        "Best rule at each loss",
        "Task accuracy vs compute",
        "Exit rounds",
        "KV cache vs loss",
        "Decoding with exits",
    ]
    text = text_of(at)
    assert f"σ = {EXPECTED['noise_sigma']:.4f}" in text and "change the function even without exits" in text
    saved = frame_with(at, "rounds_saved", "vs_fixed").set_index(["rule", "strategy"])
    # equal = within t(4) sigma sqrt(1/2 + 1/2) = 0.052 of the fixed depth's 3.115: state 0.05 (+0.002)
    # at 5 rounds; kl (+0.001) at 4 rounds but 6.5 rounds' compute; first (+0.08) is not equal
    state = saved.loc[("state", "per_round")]
    assert (state["threshold"], state["rounds_saved"], state["compute_saved"]) == (0.05, 3.0, 3.0)
    assert state["reference_loss"] == pytest.approx(3.115) and state["fixed_equal_depth"] == 8
    half = scipy_stats.t.ppf(0.975, EXPECTED["noise_dof"]) * EXPECTED["noise_sigma"]
    assert state["ci_high"] == pytest.approx(0.002 + half) and state["method"] == "noise floor"
    kl = saved.loc[("kl", "per_round")]
    assert (kl["rounds_saved"], kl["compute_saved"], kl["vs_fixed"]) == (4.0, 1.5, 1.5)
    first = saved.loc[("state", "first")]
    assert bool(first["changes_function"]) and math.isnan(first["rounds_saved"])
    assert len(at.get("vega_lite_chart")) == 5  # loss vs compute, accuracy, two histograms, KV vs loss
    kv = frame_with(at, "kv_mib", "kv_mib_needed", "strategy")
    assert set(kv.loc[kv["strategy"] == "first", "kv_mib"]) == {0.25}
    decode = frame_with(at, "speedup", "mean_step_rounds").set_index(["seed", "mode"])
    assert decode.loc[(0, "batch_stop"), "speedup"] == pytest.approx(2.0 / 1.5)
    assert decode.loc[(1, "masked"), ["equal_loss_rounds", "equal_loss_ms_per_token"]].tolist() == [6, 1.6]
    assert "fixed depth whose validation loss is at most the cell's" in text
    best = frame_with(at, "level", "rounds_low", "rounds_high")
    expected = adaptive.best_at_loss(variants.with_variants(frames.adaptive(adaptive_url)), "per_round")
    assert best[list(expected.columns)].to_dict("records") == expected.to_dict("records")
    # one level, the fixed depth's mean 3.115: the gate (3.114) is under it at 6.3 rounds' compute, the
    # state rule (3.117, 5 rounds) is not; the two seeds spend the same, so the interval is a point
    assert len(best) == 1 and (best["rule"].iloc[0], best["threshold"].iloc[0]) == ("gate", 0.5)
    assert best["level"].iloc[0] == pytest.approx(3.115) and best["rounds_low"].iloc[0] == pytest.approx(6.3)
    assert "learned (`gate`) and post hoc alike" in text
    # the loss-vs-compute chart draws the router's depths as a point beside the exit rules
    drawn = [row for rows in datasets(at.get("vega_lite_chart")[0]).values() for row in rows]
    routed = [row for row in drawn if row.get("rule") == "router"]
    assert len(routed) == 1 and routed[0]["mean_rounds"] == pytest.approx(5.5)
    assert {"fixed", "state", "gate"} <= {row.get("rule") for row in drawn}
    # another x axis and the strategies of the points drawn: the page reruns cleanly
    at.selectbox(key="adaptive_x").set_value("equivalent_rounds").run()
    at.multiselect(key="adaptive_strategies").set_value(["per_round", "first"]).run()
    assert not at.exception


def test_adaptive_page_without_adaptive_results(monkeypatch, fixture_url):
    at = render(monkeypatch, fixture_url, "adaptive")
    assert any("No adaptive results yet" in i.value for i in at.info)


def test_adaptive_page_in_a_browser(tmp_path, dashboard_server, browser):
    from tests.dashboard.conftest import build_fixture_db

    path = tmp_path / "looplab.db"
    add_adaptive_rows(build_fixture_db(path))
    # table headers only (the captions name some columns too): the wait lasts until the tables are drawn
    expected = [
        "Loss vs compute",
        "Rounds saved at equal loss",
        "reference_loss",
        "Best rule at each loss",
        "rounds_low",
        "Exit rounds",
        "KV cache vs loss",
        "Decoding with exits",
        "speedup",
        "equal_loss_ms_per_token",
    ]
    check_page_in_browser(
        dashboard_server, browser, str(path), "adaptive", "Adaptive", expected, height=3200, min_charts=5
    )
