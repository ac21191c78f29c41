"""analysis.stats on hand-built samples: the noise floor, intervals on a difference, the power estimate
and the loss-to-data exchange rate, each checked against a value worked by hand or by scipy directly."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

from looplab.analysis import stats
from looplab.model.errors import ConfigError

NAN = float("nan")


def run(variant, seed, loss, *, size="tiny", budget=1_000_000, **kw):
    row = dict(
        variant_id=variant,
        variant_label=variant,
        recipe=variant,
        size=size,
        seed=seed,
        budget_tokens=budget,
        match_time_of=None,
        eval_loss=loss,
    )
    return {**row, **kw}


def sample(values, seeds=None) -> pd.Series:
    return pd.Series(values, index=list(range(len(values))) if seeds is None else seeds, dtype=float)


# ---------------------------------------------------------------- noise floor


def test_noise_floor_pools_replicated_variants_only():
    runs = pd.DataFrame(
        [
            run("a", 0, 3.0),
            run("a", 1, 3.2),
            run("a", 2, 3.1),  # s² = 0.01, 2 dof
            run("b", 0, 2.0),
            run("b", 1, 2.1),  # s² = 0.005, 1 dof
            run("c", 0, 9.0),  # one seed: contributes nothing
            run("a", 0, 5.0, size="small"),
            run("a", 1, 5.4, size="small"),  # s² = 0.08, 1 dof
            run("b", 0, 7.0, size="small"),  # one seed
            run("b", 1, 1.0, size="small", match_time_of=3),  # iso-time run: not a replicate
            run("c", 1, NAN),  # no loss: left out
        ]
    )
    floor = stats.noise_floor(runs)
    groups = floor.groups.set_index(["size", "variant_label"])
    assert groups.loc[("tiny", "a"), "std"] == pytest.approx(0.1) and groups.loc[("tiny", "a"), "dof"] == 2
    assert groups.loc[("tiny", "c"), "n_seeds"] == 1 and groups.loc[("tiny", "c"), "dof"] == 0
    assert math.isnan(groups.loc[("tiny", "c"), "std"])
    assert groups.loc[("small", "b"), "n_seeds"] == 1  # the iso-time run did not join it
    # pooled: (2·0.01 + 1·0.005 + 1·0.08) / 4 = 0.02625
    assert floor.dof == 4 and floor.n_variants == 3
    assert floor.sigma == pytest.approx(math.sqrt(0.02625))
    low = math.sqrt(4 * 0.02625 / scipy_stats.chi2.ppf(0.975, 4))
    high = math.sqrt(4 * 0.02625 / scipy_stats.chi2.ppf(0.025, 4))
    assert (floor.low, floor.high) == (pytest.approx(low), pytest.approx(high))
    assert floor.low < floor.sigma < floor.high
    assert "σ = 0.1620" in floor.describe(0.01) and "4 degree(s) of freedom" in floor.describe(0.01)


def test_noise_floor_without_replicates_falls_back_to_the_threshold():
    floor = stats.noise_floor(pd.DataFrame([run("a", 0, 3.0), run("b", 0, 3.1), run("b", 0, 3.3)]))
    assert not floor.measured and floor.dof == 0 and math.isnan(floor.sigma)
    # the same seed twice is one seed (its mean), not a replicate
    assert floor.groups.set_index("variant_label").loc["b", "mean"] == pytest.approx(3.2)
    assert floor.describe(0.01) == "no replicated seeds: using the fixed 0.01 threshold"
    assert not stats.noise_floor(pd.DataFrame()).measured


# ---------------------------------------------------------------- intervals


SEED_EFFECT = [0.0, 0.30, -0.20, 0.50, 0.10]  # a large effect of the seed, shared by both sides
SIDE = [3.0 + e - 0.02 + j for e, j in zip(SEED_EFFECT, (0.001, -0.002, 0.0, 0.002, -0.001))]
REF = [3.0 + e + j for e, j in zip(SEED_EFFECT, (0.0, 0.001, -0.001, 0.0, 0.0))]


def test_paired_interval_when_seeds_are_shared():
    iv = stats.difference_interval(sample(SIDE), sample(REF))
    per_seed = np.array(SIDE) - np.array(REF)
    half = scipy_stats.t.ppf(0.975, 4) * per_seed.std(ddof=1) / math.sqrt(5)
    assert iv.method == stats.PAIRED and (iv.n, iv.n_ref) == (5, 5)
    assert iv.diff == pytest.approx(per_seed.mean())
    assert (iv.low, iv.high) == (pytest.approx(per_seed.mean() - half), pytest.approx(per_seed.mean() + half))
    assert stats.interval_verdict(iv, threshold=1.0) == "better"  # the threshold plays no part


def test_verdicts_keep_the_strings_tables_and_reports_show():
    # the tables, the dashboard's colours and the reports' CSS classes read these exact strings
    assert [v.value for v in stats.Verdict] == ["better", "worse", "not resolved", "noise", "reference"]
    iv = stats.difference_interval(sample(SIDE), sample(REF))
    got = stats.interval_verdict(iv, threshold=1.0)
    assert got is stats.Verdict.BETTER and str(got) == "better" and f"{got}" == "better"
    # higher is better (an accuracy): the same interval below 0 is worse
    assert stats.interval_verdict(iv, threshold=1.0, lower_is_better=False) is stats.Verdict.WORSE


def test_welch_interval_when_seeds_differ_does_not_resolve_the_same_values():
    # the same numbers from different seeds: the seed effect no longer cancels
    iv = stats.difference_interval(sample(SIDE), sample(REF, seeds=[10, 11, 12, 13, 14]))
    expected = scipy_stats.ttest_ind(SIDE, REF, equal_var=False).confidence_interval(0.95)
    assert iv.method == stats.WELCH
    assert (iv.low, iv.high) == (pytest.approx(expected.low), pytest.approx(expected.high))
    assert iv.low < 0 < iv.high and stats.interval_verdict(iv, threshold=0.001) == "not resolved"


def test_worse_when_the_interval_is_above_zero_and_missing_sides():
    iv = stats.difference_interval(sample([3.5, 3.6, 3.55]), sample([3.0, 3.1, 3.05]))
    assert iv.low > 0 and stats.interval_verdict(iv, 0.01) == "worse"
    empty = stats.difference_interval(sample([3.0]), pd.Series([NAN], dtype=float))
    assert math.isnan(empty.diff) and stats.interval_verdict(empty, 0.01) == "—"
    with pytest.raises(ConfigError, match="level"):
        stats.difference_interval(sample([3.0]), sample([3.0]), level=95)


def test_one_seed_per_side_without_a_noise_floor_has_no_interval():
    iv = stats.difference_interval(sample([3.00]), sample([3.05]))
    assert iv.method == stats.TOO_SMALL and not iv.defined
    assert math.isnan(iv.low) and math.isnan(iv.high) and iv.diff == pytest.approx(-0.05)
    # the fixed threshold is the only judge left
    assert stats.interval_verdict(iv, threshold=0.01) == "better"
    assert stats.interval_verdict(iv, threshold=0.1) == "noise"


def test_one_seed_per_side_with_a_noise_floor():
    floor = stats.noise_floor(pd.DataFrame([run("a", s, v) for s, v in enumerate((3.0, 3.02, 2.98, 3.01))]))
    sigma, dof = floor.sigma, floor.dof
    assert dof == 3
    iv = stats.difference_interval(sample([3.00]), sample([3.05]), floor)
    half = scipy_stats.t.ppf(0.975, dof) * sigma * math.sqrt(2)  # diff ± t·σ·√2; t → 1.96 for many dof
    assert iv.method == stats.FLOOR
    assert (iv.low, iv.high) == (pytest.approx(-0.05 - half), pytest.approx(-0.05 + half))
    assert stats.interval_verdict(iv, 0.01) == ("better" if -0.05 + half < 0 else "not resolved")
    # one seed against three: √(1/1 + 1/3)
    iv = stats.difference_interval(sample([3.00]), sample([3.05, 3.04, 3.06]), floor)
    half = scipy_stats.t.ppf(0.975, dof) * sigma * math.sqrt(1 + 1 / 3)
    assert iv.method == stats.FLOOR and iv.high == pytest.approx(iv.diff + half)


def test_bootstrap_is_deterministic_and_two_seeds_only_show_their_range():
    side, ref = sample([3.00, 3.10, 3.04]), sample([3.05, 3.12])  # 3 and 2 seeds, not the same seeds
    first = stats.difference_interval(side, ref, bootstrap_seed=7)
    assert first.method == stats.BOOTSTRAP
    assert first == stats.difference_interval(side, ref, bootstrap_seed=7)
    values = sample(np.random.default_rng(0).normal(3.0, 0.05, 10))  # many distinct resampled means
    ref_values = sample(np.random.default_rng(1).normal(3.0, 0.05, 10))
    assert stats.bootstrap_interval(values, ref_values, False, seed=7) == stats.bootstrap_interval(
        values, ref_values, False, seed=7
    )
    assert stats.bootstrap_interval(values, ref_values, False, seed=7) != stats.bootstrap_interval(
        values, ref_values, False, seed=8
    )
    # n = 2 paired: the resampled mean is d1, (d1+d2)/2 or d2, so the interval is the per-seed range
    paired = stats.difference_interval(sample([3.00, 3.10]), sample([3.05, 3.12]))
    assert paired.method == stats.BOOTSTRAP
    assert (paired.low, paired.high) == (pytest.approx(-0.05), pytest.approx(-0.02))
    assert stats.interval_verdict(paired, 0.01) == "better"  # what two agreeing seeds alone would claim
    # with a measured noise floor the interval is at least the noise-floor one
    floor = stats.noise_floor(pd.DataFrame([run("a", s, v) for s, v in enumerate((3.0, 3.02, 2.98, 3.01))]))
    widened = stats.difference_interval(sample([3.00, 3.10]), sample([3.05, 3.12]), floor)
    half = scipy_stats.t.ppf(0.975, floor.dof) * floor.sigma * math.sqrt(1 / 2 + 1 / 2)
    assert widened.method == stats.BOOTSTRAP_AND_FLOOR
    assert (widened.low, widened.high) == (pytest.approx(-0.035 - half), pytest.approx(-0.035 + half))
    assert stats.interval_verdict(widened, 0.01) == "not resolved"


# ---------------------------------------------------------------- power


@pytest.mark.parametrize("sigma, delta", [(0.02, 0.01), (0.01, 0.01), (0.005, 0.02), (0.03, 0.005)])
def test_seeds_needed_closed_form_and_power(sigma, delta):
    z_alpha, z_power = scipy_stats.norm.ppf(0.975), scipy_stats.norm.ppf(0.8)
    n = stats.seeds_needed(sigma, delta)
    assert n == max(1, math.ceil(2 * ((z_alpha + z_power) * sigma / delta) ** 2))

    def power(k):  # a two-sided z test of two means of k seeds each
        return scipy_stats.norm.cdf(delta / (sigma * math.sqrt(2 / k)) - z_alpha)

    assert power(n) >= 0.8 and (n == 1 or power(n - 1) < 0.8)


def test_seeds_needed_hand_worked_and_refusals():
    # σ = δ: 2·(1.95996 + 0.84162)² = 15.70 → 16 seeds per side
    assert stats.seeds_needed(0.01, 0.01) == 16
    assert math.isnan(stats.seeds_needed(NAN, 0.01))
    with pytest.raises(ConfigError, match="delta"):
        stats.seeds_needed(0.01, 0.0)
    with pytest.raises(ConfigError, match="power"):
        stats.seeds_needed(0.01, 0.01, power=80)


# ---------------------------------------------------------------- loss-to-data exchange rate


E, B, BETA = 2.0, 150.0, 0.32
BUDGETS = [1e6, 2e6, 4e6, 8e6, 16e6]


def synthetic(tokens):
    return E + B * np.asarray(tokens, dtype=float) ** -BETA


def test_fit_recovers_known_law_and_the_data_worth():
    tokens = np.repeat(BUDGETS, 2)  # two seeds per budget, the same loss
    fit = stats.fit_loss_vs_data(tokens, synthetic(tokens))
    assert (fit.E, fit.B, fit.beta) == (
        pytest.approx(E, rel=1e-5),
        pytest.approx(B, rel=1e-4),
        pytest.approx(BETA, rel=1e-5),
    )
    assert fit.n_budgets == 5 and fit.n_runs == 10 and fit.rmse < 1e-8
    # ΔL = 0.01 at D = 4M: (1 − ΔL / (B·D^−β))^(−1/β) − 1, with the true parameters
    drop, at = 0.01, 4e6
    analytic = (1 - drop / (B * at**-BETA)) ** (-1 / BETA) - 1
    assert fit.worth_pct(drop, at) == pytest.approx(100 * analytic, rel=1e-4)
    assert synthetic(at * (1 + analytic)) == pytest.approx(synthetic(at) - drop)  # it does lower L by ΔL
    assert fit.worth_pct(-drop, at) < 0  # a worse variant is worth less data
    assert math.isinf(fit.data_multiplier(1.01 * B * at**-BETA, at))  # more than data can ever remove


def test_fit_with_three_budgets_is_exact_and_refuses_two():
    fit = stats.fit_loss_vs_data(BUDGETS[:3], synthetic(BUDGETS[:3]))
    assert fit.beta == pytest.approx(BETA, rel=1e-4) and fit.n_budgets == 3
    with pytest.raises(ConfigError, match="3 token budgets, got 2"):
        stats.fit_loss_vs_data([1e6, 1e6, 2e6], synthetic([1e6, 1e6, 2e6]))


def test_data_fits_per_variant_with_a_note_where_there_is_none():
    rows = [run("a", s, float(synthetic(d)), budget=d) for d in BUDGETS for s in (0, 1)]
    rows += [run("b", 0, 3.0, budget=1e6), run("b", 0, 2.9, budget=2e6)]
    rows += [run("a", 0, 0.5, budget=3e6, match_time_of=1)]  # iso-time: not part of the fit
    table, fits = stats.data_fits(pd.DataFrame(rows))
    table = table.set_index("variant_label")
    assert table.loc["a", "beta"] == pytest.approx(BETA, rel=1e-5) and table.loc["a", "note"] == ""
    assert table.loc["a", "n_runs"] == 10
    assert math.isnan(table.loc["b", "E"]) and "needs runs at >= 3 token budgets" in table.loc["b", "note"]
    assert list(fits) == [("tiny", "a")]
