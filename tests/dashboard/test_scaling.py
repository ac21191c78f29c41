"""The iso-depth scaling law: on runs generated from the law with known parameters plus noise the fit
recovers them (each inside its bootstrap interval; over 40 draws the 95 % interval of φ covers the truth
at least 80 % of the time), unidentifiable data are refused, a seed gives the same fit, the nested forms
are told apart, the derived answers follow from the fit; then `looplab fit iso-depth`, the Scaling page
(AppTest) and the page in a headless browser, against a database of such runs."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import minimize_scalar

from dashboard import scaling
from model.counts import arch_summary
from model.presets import iso_depth
from orchestrator.errors import ConfigError
from tests.dashboard.browser import check_page_in_browser
from tests.dashboard.test_pages import render

# a law of the size of tiny CPU models (N ~ 1e5, D ~ 1e5..1e6)
TRUE = dict(E=1.5, A=30.0, alpha=0.3, B=40.0, beta=0.3, phi=0.5)
RS, WIDTHS, BUDGETS = (1, 2, 4), (32, 48, 64), (1.5e11, 3e11, 6e11)
NOISE = 0.005


def architectures(rs=RS, widths=WIDTHS) -> pd.DataFrame:
    """One row per member: r, d_model and its counts from the FLOP model (byte vocabulary, seq 64)."""
    rows = []
    for r in rs:
        for width in widths:
            summary = arch_summary(iso_depth(r, width, head_dim=16, seq_len=64), 8)
            rows.append({"r": r, "d_model": width, "n_once": summary["n_once"], "n_rec": summary["n_rec"],
                         "flops_per_token": summary["flops_per_token"]})  # fmt: skip
    return pd.DataFrame(rows)


ARCH = architectures()


def synthetic(seed: int, truth: dict = TRUE, noise: float = NOISE, rs=RS) -> pd.DataFrame:
    """Every member at every budget, tokens = budget / FLOPs per token, loss = the law + noise."""
    rng = np.random.default_rng(seed)
    runs = ARCH[ARCH["r"].isin(rs)].merge(pd.DataFrame({"budget_flops": BUDGETS}), how="cross")
    runs["tokens"] = np.floor(runs["budget_flops"] / runs["flops_per_token"])
    runs["flops"] = runs["tokens"] * runs["flops_per_token"]
    runs["loss"] = scaling.law(truth, runs["n_once"], runs["n_rec"], runs["r"], runs["tokens"])
    runs["loss"] += rng.normal(0, noise, len(runs))
    return runs


# ---------------------------------------------------------------- the fit


def test_fit_recovers_known_parameters_inside_their_intervals():
    fit = scaling.fit_law(synthetic(0), bootstrap=200, seed=0)
    for name, true in TRUE.items():
        lo, hi = fit.intervals[name]
        assert lo <= true <= hi, (name, true, lo, hi)
        assert lo < fit.params[name] < hi
    assert abs(fit.phi - TRUE["phi"]) < 0.1 and fit.n_bootstrap_fitted == 200
    assert fit.r2 > 0.99 and fit.rmse < 2 * NOISE
    assert np.allclose(fit.table["loss"] - fit.table["predicted"], fit.table["residual"])
    assert np.allclose(
        fit.table["n_eff"], fit.table["n_once"] + fit.table["r"] ** fit.phi * fit.table["n_rec"]
    )


def test_phi_interval_covers_the_truth_about_95_percent_of_the_time():
    draws, covered, widths = 40, 0, []
    for draw in range(draws):
        fit = scaling.fit_law(synthetic(100 + draw), bootstrap=50, seed=draw)
        lo, hi = fit.intervals["phi"]
        covered += lo <= TRUE["phi"] <= hi
        widths.append(hi - lo)
    assert covered >= 0.8 * draws, f"{covered}/{draws}"
    assert covered < draws or np.median(widths) < 0.5  # not covering by being uselessly wide


def test_the_fit_is_deterministic_for_a_seed():
    runs = synthetic(1)
    a, b = scaling.fit_law(runs, bootstrap=50, seed=7), scaling.fit_law(runs, bootstrap=50, seed=7)
    assert a.params == b.params and a.intervals == b.intervals and np.array_equal(a.draws, b.draws)
    other = scaling.fit_law(runs, bootstrap=50, seed=8)
    assert other.params == a.params and not np.array_equal(other.draws, a.draws)


@pytest.mark.parametrize(
    "runs,kwargs,message",
    [
        (synthetic(0, rs=(2,)), {}, "r: every run has recurrence r=2, so φ cannot be identified"),
        (synthetic(0).iloc[:7], {}, "runs: 7 runs for 6 parameters; the fit needs at least 8"),
        (synthetic(0).iloc[:6], {"phi": 1.0}, "runs: 6 runs for 5 parameters; the fit needs at least 7"),
        (synthetic(0).query("budget_flops == 3e11").assign(tokens=1e5), {}, "tokens: fewer than 3 distinct"),
        (synthetic(0).assign(n_once=1.0, n_rec=1.0), {}, "n_once + n_rec: fewer than 3 distinct model sizes"),
        (synthetic(0).drop(columns="tokens"), {}, "runs: missing column(s) tokens"),
        (synthetic(0).assign(loss=np.nan), {}, "loss: every run needs a finite value > 0"),
        (synthetic(0), {"robust": "l1"}, "robust: unknown 'l1'; accepted: linear, huber"),
        (synthetic(0), {"bootstrap": -1}, "bootstrap: must be >= 0, got -1"),
    ],
)  # fmt: skip
def test_data_that_cannot_identify_the_law_are_refused(runs, kwargs, message):
    with pytest.raises(ConfigError) as e:
        scaling.fit_law(runs, **kwargs)
    assert message in str(e.value), str(e.value)


def test_the_nested_forms_are_told_apart():
    forms = scaling.compare_forms(synthetic(2)).set_index("form")
    assert list(forms.index) == ["free", "phi=1", "phi=0"]
    assert forms.loc["free", "supported"] and forms["supported"].sum() == 1
    assert forms.loc["phi=1", "phi"] == 1.0 and forms.loc["phi=0", "phi"] == 0.0
    assert forms.loc["phi=1", "loo_rmse"] > 2 * forms.loc["free", "loo_rmse"]
    assert forms.loc["phi=0", "loo_rmse"] > 2 * forms.loc["free", "loo_rmse"]
    assert forms.loc["free", "aic"] < min(forms.loc["phi=1", "aic"], forms.loc["phi=0", "aic"])
    # runs where loops are worth nothing: the φ = 0 form is not beaten on held-out error by much
    nothing = scaling.compare_forms(synthetic(3, truth={**TRUE, "phi": 0.0})).set_index("form")
    assert nothing.loc["phi=0", "loo_rmse"] < 1.1 * nothing.loc["free", "loo_rmse"]
    assert nothing.loc["phi=1", "loo_rmse"] > 2 * nothing.loc["phi=0", "loo_rmse"]


def test_a_robust_loss_resists_an_outlier():
    runs = synthetic(4)
    runs.loc[5, "loss"] += 0.5
    plain = scaling.fit_law(runs, bootstrap=0)
    robust = scaling.fit_law(runs, bootstrap=60, robust="soft_l1")
    assert abs(robust.phi - TRUE["phi"]) < abs(plain.phi - TRUE["phi"])
    assert robust.intervals["phi"][0] <= TRUE["phi"] <= robust.intervals["phi"][1]
    assert abs(robust.table.loc[5, "residual"] - 0.5) < 0.05  # the outlier stands out in its residual
    assert math.isnan(plain.intervals["phi"][0])  # no bootstrap, no interval


# ---------------------------------------------------------------- derived answers


def test_one_recurrence_is_worth_r_to_the_phi_blocks():
    fit = scaling.fit_law(synthetic(5), bootstrap=100, seed=0)
    worth = scaling.recurrence_worth(fit).set_index("r")
    lo, hi = fit.intervals["phi"]
    for r in RS:
        assert worth.loc[r, "blocks"] == pytest.approx(r**fit.phi)
        if r > 1:  # r^φ is monotone in φ: its interval is r^(φ's interval)
            assert worth.loc[r, "lo"] == pytest.approx(r**lo, rel=1e-3)
            assert worth.loc[r, "hi"] == pytest.approx(r**hi, rel=1e-3)
        assert worth.loc[r, "per_flop"] == pytest.approx(r**fit.phi / r)


def test_width_model_is_the_flop_model_at_any_width():
    coef = scaling.width_model(ARCH)
    unseen = architectures(widths=(80, 128))
    for row in unseen.itertuples():
        for column in ("flops_per_token", "n_once", "n_rec"):
            a, b = coef[float(row.r)][column]
            assert a * row.d_model**2 + b * row.d_model == pytest.approx(getattr(row, column), rel=1e-9)


def test_compute_optimal_width_minimises_the_fitted_law_at_the_budget():
    fit = scaling.fit_law(synthetic(6), bootstrap=50, seed=0)
    budget = 6e11
    optimal = scaling.compute_optimal(fit, budget).set_index("r")
    assert list(optimal.index) == list(RS)
    for r in RS:
        coef = scaling.width_model(ARCH)[float(r)]  # the FLOP model's counts as exact quadratics in width

        def counts(width: float, coef: dict = coef) -> tuple[float, float, float]:
            return tuple(
                coef[c][0] * width**2 + coef[c][1] * width for c in ("n_once", "n_rec", "flops_per_token")
            )

        def loss_at(log_width: float, r: int = r, counts=counts) -> float:
            n_once, n_rec, per_token = counts(math.exp(log_width))
            return float(fit.predict(n_once, n_rec, r, budget / per_token))

        best = minimize_scalar(loss_at, bounds=(math.log(8), math.log(256)), method="bounded")  # continuous
        row = optimal.loc[r]
        assert row["d_model"] == pytest.approx(math.exp(best.x), rel=0.02)
        assert best.fun - 1e-9 <= row["loss"] <= best.fun + 1e-5  # a grid of widths: never below the minimum
        assert row["tokens"] * counts(row["d_model"])[2] == pytest.approx(budget, rel=1e-9)
        assert row["d_model_lo"] <= row["d_model"] <= row["d_model_hi"]
        assert row["loss_lo"] <= row["loss"] <= row["loss_hi"] and not row["at_edge"]
    assert optimal.loc[1, "gap_to_r1"] == 0.0
    assert optimal.loc[4, "gap_to_r1"] == pytest.approx(optimal.loc[4, "loss"] - optimal.loc[1, "loss"])
    assert optimal.loc[4, "gap_lo"] <= optimal.loc[4, "gap_to_r1"] <= optimal.loc[4, "gap_hi"]


def test_runs_for_fit_reads_the_finished_fixed_loop_runs():
    view = pd.DataFrame({
        "job_id": [1, 2, 3, 4], "status": ["succeeded", "failed", "succeeded", "succeeded"],
        "final_val_loss": [3.0, np.nan, 3.1, 3.2], "loops": [2, 2, 8, 4],
        "loop_sampler": ["fixed", "fixed", "poisson_seq", "fixed"], "n_once": [10, 10, 10, 10],
        "n_rec": [5, 5, 5, 5], "tokens": [100, 100, 100, 200], "d_model": [32, 32, 32, 48],
        "flops_per_token": [7.0, 7.0, 7.0, 9.0], "grid": ["g"] * 4,
    })  # fmt: skip
    got = scaling.runs_for_fit(view)
    assert list(got["job_id"]) == [1, 4] and list(got["r"]) == [2, 4] and list(got["loss"]) == [3.0, 3.2]
    assert list(got["flops"]) == [700.0, 1800.0]
    with pytest.raises(ConfigError, match="missing column"):
        scaling.runs_for_fit(view.drop(columns="n_rec"))


def test_the_study_report_as_text_and_json():
    study = scaling.fit_iso_depth(synthetic(7), bootstrap=50)
    text = scaling.report_text(study)
    assert "phi" in text and "<- supported" in text and "compute-optimal at C = 6e+11" in text
    assert f"{study.fit.phi:.4g}" in text
    out = json.loads(json.dumps(scaling.report_json(study)))
    assert out["params"]["phi"] == pytest.approx(study.fit.phi) and len(out["runs"]) == len(synthetic(7))
    assert {row["r"] for row in out["compute_optimal"]} == set(RS)


# ---------------------------------------------------------------- database, CLI, page, browser


def build_study_db(path: Path) -> str:
    """A database with the synthetic study as grid "iso" (recipe iso_depth), one failed and one
    running iso_depth job, and a parcae run of another grid (none of which the fit may read)."""
    from orchestrator import schema
    from orchestrator.db import dispose_all, engine, resolve_url, session
    from orchestrator.states import JobStatus

    url = resolve_url(str(path))
    eng = engine(url)
    now = time.time()
    runs = synthetic(11)
    with session(eng) as s:
        s.add(schema.GridRow(id=1, name="iso", spec="{}", spec_hash="g1", created_at=now))
        s.add(schema.GridRow(id=2, name="other", spec="{}", spec_hash="g2", created_at=now))
        s.flush()
        extra = [(JobStatus.FAILED, 1, "iso_depth"), (JobStatus.RUNNING, 1, "iso_depth"),
                 (JobStatus.SUCCEEDED, 2, "parcae")]  # fmt: skip
        for n, row in enumerate([*runs.itertuples(), *extra]):
            status, grid, recipe = (JobStatus.SUCCEEDED, 1, "iso_depth") if n < len(runs) else row
            arch = runs.iloc[n % len(runs)]
            job = schema.Job(
                grid_id=grid, kind="train", config=json.dumps({"n": n}), config_hash=f"h{n}", recipe=recipe,
                size="tiny", seed=0, status=status, created_at=now, loop_sampler="fixed", loops=int(arch["r"]),
                n_once=int(arch["n_once"]), n_rec=int(arch["n_rec"]), d_model=int(arch["d_model"]),
                flops_per_token=float(arch["flops_per_token"]), budget_flops=float(arch["budget_flops"]),
                variant_label=f"iso_depth r={int(arch['r'])} d={int(arch['d_model'])}",
            )  # fmt: skip
            s.add(job)
            s.flush()
            if status == JobStatus.SUCCEEDED:
                s.add(schema.TrainResult(job_id=job.id, steps=10, tokens=int(arch["tokens"]), train_seconds=10.0,
                                         final_val_loss=float(arch["loss"]) + (5.0 if recipe == "parcae" else 0.0)))  # fmt: skip
    eng.dispose()
    dispose_all()
    return url


@pytest.fixture(scope="module")
def study_db(tmp_path_factory):
    path = tmp_path_factory.mktemp("scaling_db") / "looplab.db"
    return build_study_db(path), path


def _looplab(capsys, *args: str) -> tuple[int, str, str]:
    from orchestrator.cli import main

    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_fit_prints_the_table_and_json(study_db, capsys):
    path = str(study_db[1])
    code, out, err = _looplab(capsys, "--db", path, "fit", "iso-depth", "--bootstrap", "40")
    assert code == 0, err
    assert "iso-depth scaling law: 27 runs, r in {1, 2, 4}" in out and "<- supported" in out
    code, out, _ = _looplab(
        capsys, "--db", path, "fit", "iso-depth", "--grid", "iso", "--bootstrap", "40", "--json"
    )
    got = json.loads(out)
    expected = scaling.fit_iso_depth(scaling.runs_for_fit(synthetic(11).assign(
        final_val_loss=lambda d: d["loss"], loops=lambda d: d["r"])), bootstrap=40)  # fmt: skip
    assert got["params"]["phi"] == pytest.approx(expected.fit.phi, rel=1e-6)
    assert got["intervals"]["phi"] == pytest.approx(list(expected.fit.intervals["phi"]), rel=1e-6)
    assert got["n_runs"] == 27 and got["budget_flops"] == 6e11
    code, _, err = _looplab(capsys, "--db", path, "fit", "iso-depth", "--grid", "nope")
    assert code == 2 and "--grid: no runs in grid 'nope'; grids with runs: iso, other" in err
    code, _, err = _looplab(capsys, "--db", path, "fit", "iso-depth", "--grid", "other")
    assert code == 2 and "runs: 1 runs for 6 parameters" in err


def test_scaling_page(monkeypatch, study_db):
    at = render(monkeypatch, study_db[0], "scaling", timeout=120)
    metrics = {m.label: m.value for m in at.metric}
    fit = scaling.fit_law(
        scaling.runs_for_fit(synthetic(11).assign(final_val_loss=lambda d: d["loss"], loops=lambda d: d["r"])),
        bootstrap=scaling.DEFAULT_BOOTSTRAP,
    )  # fmt: skip
    assert metrics["φ"] == f"{fit.phi:.3f}"
    lo, hi = fit.intervals["phi"]
    assert metrics["φ 95% interval"] == f"[{lo:.3f}, {hi:.3f}]"
    headers = [h.value for h in at.header]
    assert headers == ["Runs against the fitted law", "Residuals", "Parameters", "Which form the data support",
                       "What one recurrence is worth", "Compute-optimal width and tokens"]  # fmt: skip
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
    expected = ["Runs against the fitted law", "Residuals", "Which form the data support", "gap_to_r1",
                "loo_rmse"]  # fmt: skip
    check_page_in_browser(
        dashboard_server, browser, study_db[0], "scaling", "Scaling", expected, height=2600, min_charts=3
    )


def test_a_parameter_the_runs_do_not_pin_down_is_flagged():
    good = scaling.fit_law(synthetic(8), bootstrap=0)
    assert good.at_bound == ()
    # loss that does not depend on the model at all: the N term (and with it φ) has nothing to fit
    flat = synthetic(8).assign(loss=lambda d: 1.0 + 40.0 * d["tokens"] ** -0.3)
    flat["loss"] += np.random.default_rng(0).normal(0, NOISE, len(flat))
    fit = scaling.fit_law(flat, bootstrap=0)
    assert fit.at_bound, fit.params
    assert "at the edge of its range" in scaling.report_text(scaling.fit_iso_depth(flat, bootstrap=20))
