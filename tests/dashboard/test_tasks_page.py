"""The Tasks page: the read query, the page in AppTest and in a headless browser (accuracy vs loops
drawn, chance and trained depth marked); its numbers: tests/analysis/test_tasks.py.

The database is the dashboard fixture database plus eval jobs on the parcae and lean runs (seeds 0 and
1): `deduction` (reasoning) with subsets depth=0 / depth=2 at loops 1, 4, 8, and `sciq` (knowledge)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from looplab.analysis import tasks
from tests.dashboard.browser import SHOTS, check_page_in_browser, open_page, page_url
from tests.dashboard.test_pages import render

# (variant, seed) -> {loops: (correct at depth=0, correct at depth=2)} out of 10 items each
DEDUCTION = {
    ("parcae", 0): {1: (5, 3), 4: (8, 5), 8: (9, 7)},
    ("parcae", 1): {1: (6, 3), 4: (8, 6), 8: (9, 6)},
    ("lean", 0): {1: (4, 3), 4: (7, 4), 8: (7, 4)},
    ("lean", 1): {1: (5, 4), 4: (7, 5), 8: (6, 4)},
}


def _add_evals(path: Path) -> None:
    """Eval jobs with task scores on the fixture database's parcae and lean runs."""
    from looplab.orchestrator import schema
    from looplab.orchestrator.db import engine, session
    from looplab.orchestrator.states import JobStatus

    eng = engine(str(path))
    with session(eng) as s:
        trains = {
            (j.recipe, j.seed): j
            for j in s.query(schema.Job).filter_by(kind="train", status="succeeded")
            # the 1M-token runs: lean seed 0's iso-time retraining is another budget, never pooled with them
            if (not j.variant_label or "·" not in j.variant_label) and j.budget_tokens
        }
        for n, ((recipe, seed), by_loops) in enumerate(DEDUCTION.items()):
            train = trains[(recipe, seed)]
            columns = {c: getattr(train, c) for c in ("variant_id", "variant_label", "loop_sampler", "loops")}
            job = schema.Job(
                grid_id=1,
                kind="eval",
                config=json.dumps({"n": n}),
                config_hash=f"eval{n}",
                recipe=recipe,
                size="tiny",
                seed=seed,
                status=JobStatus.SUCCEEDED,
                created_at=time.time(),
                **columns,
            )
            s.add(job)
            s.flush()
            s.add(schema.JobDep(job_id=job.id, depends_on=train.id))
            for loops, (easy, hard) in by_loops.items():
                for subset, correct, count in (
                    ("depth=0", easy, 10),
                    ("depth=2", hard, 10),
                    ("all", easy + hard, 20),
                ):
                    s.add(
                        schema.TaskScore(
                            job_id=job.id,
                            task="deduction",
                            subset=subset,
                            loops=loops,
                            n=count,
                            category="reasoning",
                            acc=correct / count,
                            acc_norm=correct / count,
                            stderr=0.1,
                            chance=1 / 3,
                        )
                    )
                s.add(
                    schema.TaskScore(
                        job_id=job.id,
                        task="sciq",
                        subset="all",
                        loops=loops,
                        n=50,
                        category="knowledge",
                        acc=0.3 + 0.01 * loops,
                        acc_norm=None,
                        stderr=0.06,
                        chance=0.25,
                    )
                )


@pytest.fixture(scope="module")
def tasks_db(tmp_path_factory):
    from looplab.orchestrator.db import dispose_all
    from tests.dashboard.conftest import build_fixture_db

    path = tmp_path_factory.mktemp("tasks_db") / "looplab.db"
    url = build_fixture_db(path)
    _add_evals(path)
    dispose_all()
    return url, path


def test_task_scores_query_labels_rows_with_the_trained_variant(tasks_db):
    from looplab.orchestrator import frames

    df = frames.task_scores(tasks_db[0])
    assert len(df) == 4 * 3 * 4  # 4 runs x 3 loop counts x (3 deduction rows + sciq)
    parcae = df[(df["recipe"] == "parcae") & (df["task"] == "deduction") & (df["subset"] == "all")]
    assert set(parcae["train_loops"]) == {8} and set(parcae["variant_label"]) == {"parcae"}
    curves = tasks.accuracy_curves(df)
    at8 = curves[
        (curves["variant_label"] == "parcae") & (curves["subset"] == "depth=2") & (curves["loops"] == 8)
    ]
    assert at8.iloc[0]["acc"] == (7 + 6) / 20 and at8.iloc[0]["n_seeds"] == 2


def test_task_categories_view_means_each_runs_tasks_per_category(tasks_db):
    """parcae seed 0 at 8 loops: deduction (9 + 7) / 20, sciq 0.38, and their mean as the total."""
    import pandas as pd
    import sqlalchemy as sa

    from looplab.orchestrator.db import engine

    with engine(tasks_db[0]).connect() as conn:
        view = pd.read_sql(sa.text("SELECT * FROM task_categories WHERE loops = 8"), conn)
    at8 = view[(view["recipe"] == "parcae") & (view["seed"] == 0)].set_index("category")
    assert at8.loc["reasoning", "mean_acc"] == pytest.approx(0.8) and at8.loc["knowledge", "mean_acc"] == 0.38
    assert at8.loc["total", "mean_acc"] == pytest.approx(0.59) and at8.loc["total", "n_tasks"] == 2
    assert set(view["variant_label"]) == {"parcae", "lean"} and len(view) == 4 * 3


def test_tasks_page_in_apptest(monkeypatch, tasks_db):
    at = render(monkeypatch, tasks_db[0], "tasks")
    headers = [h.value for h in at.header]
    assert headers == ["Accuracy vs loops", "Accuracy by subset", "By category", "Loss as a proxy"]
    wide = next(d.value for d in at.dataframe if "acc@8" in d.value.columns)
    parcae = wide[wide["variant_label"] == "parcae"].iloc[0]
    assert parcae["acc@8"] == (16 + 15) / 40 and parcae["best_loops"] == 8 and parcae["train_loops"] == 8
    caption = " ".join(c.value for c in at.caption)
    assert "**reasoning**: deduction" in caption and "**knowledge**: sciq" in caption
    # by category at 8 loops, parcae: deduction (16 + 15) / 40, sciq 0.38, total their mean
    cats = next(d.value for d in at.dataframe if {"category", "n_tasks"} <= set(d.value.columns))
    at8 = cats[(cats["variant_label"] == "parcae") & (cats["loops"] == 8)].set_index("category")
    assert at8.loc["reasoning", "acc"] == pytest.approx(0.775) and at8.loc["knowledge", "acc"] == 0.38
    assert at8.loc["total", "acc"] == pytest.approx((0.775 + 0.38) / 2) and at8.loc["total", "n_tasks"] == 2
    # loss as a proxy over the 4 runs at their trained loops: final val 3.15, 3.16, 3.20, 3.22 (lean 0,
    # lean 1, parcae 0, parcae 1), total accuracy 0.445, 0.47, 0.59, 0.565: ranks 1 2 4 3, rho 0.8
    proxy = next(d.value for d in at.dataframe if "rho" in d.value.columns).set_index("category")
    assert proxy.loc["total", "rho"] == pytest.approx(0.8) and proxy.loc["total", "n_runs"] == 4


def test_tasks_page_in_a_browser_shows_accuracy_categories_and_the_proxy(tasks_db, dashboard_server, browser):
    expected = ["Accuracy vs loops", "Accuracy by subset", "acc@8", "best_loops", "ci_high", "By category"]
    expected += ["Loss as a proxy", "rho"]  # the category scores and the loss–accuracy correlation
    check_page_in_browser(
        dashboard_server, browser, tasks_db[0], "tasks", "Tasks", expected, height=1800, min_charts=3
    )
    # the two sections below the fold, as a person scrolled to them sees them (saved for review)
    url = page_url(dashboard_server, "tasks", str(tasks_db[1]))
    with open_page(browser, url, "Tasks", ["By category", "Loss as a proxy"], height=1400) as page:
        heading = page.get_by_role("heading", name="By category")
        page.wait_for_timeout(2000)  # the charts above settle first, or they push the section down again
        heading.evaluate("e => e.scrollIntoView({block: 'start'})")  # the app scrolls its own container
        page.wait_for_timeout(1000)
        assert heading.bounding_box()["y"] < 300  # the section is at the top of the screenshot
        page.screenshot(path=str(SHOTS / "tasks_categories_and_proxy.png"))
        html = page.content()
        assert "n_tasks" in html and "rho" in html


def test_extrapolation_page_shows_the_category_scores(monkeypatch, tasks_db):
    at = render(monkeypatch, tasks_db[0], "extrapolation")
    assert "Task accuracy vs effective depth" in [h.value for h in at.header]
    cats = next(d.value for d in at.dataframe if {"category", "n_tasks"} <= set(d.value.columns))
    lean = cats[(cats["variant_label"] == "lean") & (cats["loops"] == 4)].set_index("category")
    # lean at 4 loops: deduction (7 + 4 + 7 + 5) / 40, sciq 0.34
    assert lean.loc["reasoning", "acc"] == pytest.approx(23 / 40) and lean.loc["knowledge", "acc"] == 0.34
    assert lean.loc["total", "acc"] == pytest.approx((23 / 40 + 0.34) / 2)
