"""The iso-depth scaling law (analysis.scaling, analysis.iso_depth): on runs generated from the law with
known parameters plus noise the fit recovers them (each inside its bootstrap interval; over 40 draws the
95 % interval of φ covers the truth at least 80 % of the time), unidentifiable data are refused, a seed
gives the same fit, the nested forms are told apart, the derived answers follow from the fit. The
command and the page against a database of such runs: tests/dashboard/test_scaling_page.py."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import minimize_scalar

from looplab.analysis import iso_depth, scaling
from looplab.model import presets
from looplab.model.counts import arch_summary
from looplab.model.errors import ConfigError

# a law of the size of tiny CPU models (N ~ 1e5, D ~ 1e5..1e6)
TRUE = dict(E=1.5, A=30.0, alpha=0.3, B=40.0, beta=0.3, phi=0.5)
RS, WIDTHS, BUDGETS = (1, 2, 4), (32, 48, 64), (1.5e11, 3e11, 6e11)
NOISE = 0.005


def architectures(rs=RS, widths=WIDTHS) -> pd.DataFrame:
    """One row per member: r, d_model and its counts from the FLOP model (byte vocabulary, seq 64)."""
    rows = []
    for r in rs:
        for width in widths:
            summary = arch_summary(presets.iso_depth(r, width, head_dim=16, seq_len=64), 8)
            rows.append(
                {
                    "r": r,
                    "d_model": width,
                    "n_once": summary["n_once"],
                    "n_rec": summary["n_rec"],
                    "flops_per_token": summary["flops_per_token"],
                }
            )
    return pd.DataFrame(rows)


ARCH = architectures()


def synthetic(seed: int, truth: dict = TRUE, noise: float = NOISE, rs=RS, arch=None) -> pd.DataFrame:
    """Every member (of `arch`, default ARCH) at every budget, tokens = budget / FLOPs per token, loss =
    the law + noise."""
    rng = np.random.default_rng(seed)
    arch = ARCH if arch is None else arch
    runs = arch[arch["r"].isin(rs)].merge(pd.DataFrame({"budget_flops": BUDGETS}), how="cross")
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


@pytest.mark.slow  # docs/testing.md: a coverage rate needs hundreds of bootstrapped fits
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
)
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
    worth = iso_depth.recurrence_worth(fit).set_index("r")
    lo, hi = fit.intervals["phi"]
    for r in RS:
        assert worth.loc[r, "blocks"] == pytest.approx(r**fit.phi)
        if r > 1:  # r^φ is monotone in φ: its interval is r^(φ's interval)
            assert worth.loc[r, "lo"] == pytest.approx(r**lo, rel=1e-3)
            assert worth.loc[r, "hi"] == pytest.approx(r**hi, rel=1e-3)
        assert worth.loc[r, "per_flop"] == pytest.approx(r**fit.phi / r)


def test_width_model_is_the_flop_model_at_any_width():
    coef = iso_depth.width_model(ARCH)
    unseen = architectures(widths=(80, 128))
    for row in unseen.itertuples():
        for column in ("flops_per_token", "n_once", "n_rec"):
            a, b = coef[float(row.r)][column]
            assert a * row.d_model**2 + b * row.d_model == pytest.approx(getattr(row, column), rel=1e-9)


def test_compute_optimal_width_minimises_the_fitted_law_at_the_budget():
    fit = scaling.fit_law(synthetic(6), bootstrap=50, seed=0)
    budget = 6e11
    optimal = iso_depth.compute_optimal(fit, budget).set_index("r")
    assert list(optimal.index) == list(RS)
    for r in RS:
        coef = iso_depth.width_model(ARCH)[float(r)]  # the FLOP model's counts as exact quadratics in width

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
    view = pd.DataFrame(
        {
            "job_id": [1, 2, 3, 4],
            "status": ["succeeded", "failed", "succeeded", "succeeded"],
            "final_val_loss": [3.0, np.nan, 3.1, 3.2],
            "loops": [2, 2, 8, 4],
            "loop_sampler": ["fixed", "fixed", "poisson_seq", "fixed"],
            "n_once": [10, 10, 10, 10],
            "n_rec": [5, 5, 5, 5],
            "tokens": [100, 100, 100, 200],
            "d_model": [32, 32, 32, 48],
            "flops_per_token": [7.0, 7.0, 7.0, 9.0],
            "grid": ["g"] * 4,
        }
    )
    got = iso_depth.runs_for_fit(view)
    assert list(got["job_id"]) == [1, 4] and list(got["r"]) == [2, 4] and list(got["loss"]) == [3.0, 3.2]
    assert list(got["flops"]) == [700.0, 1800.0]
    with pytest.raises(ConfigError, match="missing column"):
        iso_depth.runs_for_fit(view.drop(columns="n_rec"))


def test_the_study_report_as_text_and_json():
    study = iso_depth.fit_iso_depth(synthetic(7), bootstrap=50)
    text = iso_depth.report_text(study)
    assert "phi" in text and "<- supported" in text and "compute-optimal at C = 6e+11" in text
    assert f"{study.fit.phi:.4g}" in text
    out = json.loads(json.dumps(iso_depth.report_json(study)))
    assert out["params"]["phi"] == pytest.approx(study.fit.phi) and len(out["runs"]) == len(synthetic(7))
    assert {row["r"] for row in out["compute_optimal"]} == set(RS)


def test_a_parameter_the_runs_do_not_pin_down_is_flagged():
    good = scaling.fit_law(synthetic(8), bootstrap=0)
    assert good.at_bound == ()
    # loss that does not depend on the model at all: the N term (and with it φ) has nothing to fit
    flat = synthetic(8).assign(loss=lambda d: 1.0 + 40.0 * d["tokens"] ** -0.3)
    flat["loss"] += np.random.default_rng(0).normal(0, NOISE, len(flat))
    fit = scaling.fit_law(flat, bootstrap=0)
    assert fit.at_bound, fit.params
    assert "at the edge of its range" in iso_depth.report_text(iso_depth.fit_iso_depth(flat, bootstrap=20))
