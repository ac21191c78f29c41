"""`looplab fit iso-depth` (lab/fit.py), the Scaling page (AppTest) and the page in a headless
browser, against a database of runs generated from the iso-depth law (tests/analysis/test_scaling.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from looplab.analysis import iso_depth, scaling
from tests.analysis.test_scaling import synthetic
from tests.cli import looplab_here
from tests.dashboard.browser import check_page_in_browser
from tests.dashboard.test_pages import render


def build_study_db(path: Path) -> str:
    """A database with the synthetic study as grid "iso" (recipe iso_depth), one failed iso_depth job that
    wrote its result row before it failed, one running iso_depth job, and a parcae run of another grid
    (none of which the fit may read: the command and the page pass only succeeded runs to it)."""
    from looplab.orchestrator import schema
    from looplab.orchestrator.db import dispose_all, engine, resolve_url, session
    from looplab.orchestrator.states import JobStatus

    url = resolve_url(str(path))
    eng = engine(url)
    now = time.time()
    runs = synthetic(11)
    with session(eng) as s:
        s.add(schema.GridRow(id=1, name="iso", spec="{}", spec_hash="g1", created_at=now))
        s.add(schema.GridRow(id=2, name="other", spec="{}", spec_hash="g2", created_at=now))
        s.flush()
        extra = [
            (JobStatus.FAILED, 1, "iso_depth"),
            (JobStatus.RUNNING, 1, "iso_depth"),
            (JobStatus.SUCCEEDED, 2, "parcae"),
        ]
        for n, row in enumerate([*runs.itertuples(), *extra]):
            status, grid, recipe = (JobStatus.SUCCEEDED, 1, "iso_depth") if n < len(runs) else row
            arch = runs.iloc[n % len(runs)]
            job = schema.Job(
                grid_id=grid,
                kind="train",
                config=json.dumps({"n": n}),
                config_hash=f"h{n}",
                recipe=recipe,
                size="tiny",
                seed=0,
                status=status,
                created_at=now,
                loop_sampler="fixed",
                loops=int(arch["r"]),
                n_once=int(arch["n_once"]),
                n_rec=int(arch["n_rec"]),
                d_model=int(arch["d_model"]),
                flops_per_token=float(arch["flops_per_token"]),
                budget_flops=float(arch["budget_flops"]),
                variant_label=f"iso_depth r={int(arch['r'])} d={int(arch['d_model'])}",
            )
            s.add(job)
            s.flush()
            if status != JobStatus.RUNNING:
                s.add(
                    schema.TrainResult(
                        job_id=job.id,
                        steps=10,
                        tokens=int(arch["tokens"]),
                        train_seconds=10.0,
                        final_val_loss=float(arch["loss"]) + (5.0 if recipe == "parcae" else 0.0),
                    )
                )
    eng.dispose()
    dispose_all()
    return url


@pytest.fixture(scope="module")
def study_db(tmp_path_factory):
    path = tmp_path_factory.mktemp("scaling_db") / "looplab.db"
    return build_study_db(path), path


def test_cli_fit_prints_the_table_and_json(study_db, capsys):
    path = str(study_db[1])
    code, out, err = looplab_here(capsys, "--db", path, "fit", "iso-depth", "--bootstrap", "40")
    assert code == 0, err
    assert "iso-depth scaling law: 27 runs, r in {1, 2, 4}" in out and "<- supported" in out
    code, out, _ = looplab_here(
        capsys, "--db", path, "fit", "iso-depth", "--grid", "iso", "--bootstrap", "40", "--json"
    )
    got = json.loads(out)
    expected = iso_depth.fit_iso_depth(
        iso_depth.runs_for_fit(
            synthetic(11).assign(final_val_loss=lambda d: d["loss"], loops=lambda d: d["r"])
        ),
        bootstrap=40,
    )
    assert got["params"]["phi"] == pytest.approx(expected.fit.phi, rel=1e-6)
    assert got["intervals"]["phi"] == pytest.approx(list(expected.fit.intervals["phi"]), rel=1e-6)
    assert got["n_runs"] == 27 and got["budget_flops"] == 6e11
    code, _, err = looplab_here(capsys, "--db", path, "fit", "iso-depth", "--grid", "nope")
    assert code == 2 and "--grid: no runs in grid 'nope'; grids with runs: iso, other" in err
    code, _, err = looplab_here(capsys, "--db", path, "fit", "iso-depth", "--grid", "other")
    assert code == 2 and "runs: 1 runs for 6 parameters" in err


def test_scaling_page(monkeypatch, study_db):
    at = render(monkeypatch, study_db[0], "scaling", timeout=120)
    metrics = {m.label: m.value for m in at.metric}
    fit = scaling.fit_law(
        iso_depth.runs_for_fit(
            synthetic(11).assign(final_val_loss=lambda d: d["loss"], loops=lambda d: d["r"])
        ),
        bootstrap=scaling.DEFAULT_BOOTSTRAP,
    )
    assert metrics["φ"] == f"{fit.phi:.3f}"
    lo, hi = fit.intervals["phi"]
    assert metrics["φ 95% interval"] == f"[{lo:.3f}, {hi:.3f}]"
    headers = [h.value for h in at.header]
    assert headers == [
        "Runs against the fitted law",
        "Residuals",
        "Parameters",
        "Which form the data support",
        "What one recurrence is worth",
        "Compute-optimal width and tokens",
    ]
    tables = [d.value for d in at.dataframe]
    runs_table = next(t for t in tables if "residual" in t.columns)
    assert len(runs_table) == 27  # the failed, running and other-recipe jobs are not fitted
    params = next(t for t in tables if "parameter" in t.columns)
    assert list(params["parameter"]) == list(scaling.PARAMS)
    optimal = next(t for t in tables if "gap_to_r1" in t.columns)
    assert list(optimal["r"]) == [1, 2, 4]


def test_scaling_page_without_study_runs(monkeypatch, fixture_db):
    at = render(monkeypatch, fixture_db[0], "scaling")
    assert any("No finished iso-depth runs yet" in i.value for i in at.info)


def test_scaling_page_renders_in_a_browser(study_db, dashboard_server, browser):
    expected = [
        "Runs against the fitted law",
        "Residuals",
        "Which form the data support",
        "gap_to_r1",
        "loo_rmse",
    ]
    check_page_in_browser(
        dashboard_server, browser, study_db[0], "scaling", "Scaling", expected, height=2600, min_charts=3
    )
