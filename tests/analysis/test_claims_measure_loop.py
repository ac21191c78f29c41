"""The loop-design report's claims measured on runs (analysis/claims_measure.py): the loop geometry past
the trained count, one sample per training seed (never per run), and channel-wise against dense injection's cross-round interaction,
one ratio per seed. Frames are built by hand in the shapes orchestrator.frames reads, so each verdict of
the one rule can be produced, both ways."""

from __future__ import annotations

import pandas as pd
import pytest

from looplab.analysis import claims, claims_measure

FALLS, GROWS = "loop.update_falls_beyond_horizon", "loop.variance_grows_beyond_horizon"
RATIO = "loop.channel_interaction_7x_dense"


def runs(n: int, injections=("channel",), seeds=(0,), trained: int = 4) -> pd.DataFrame:
    rows, job = [], 1
    for seed in seeds:
        for injection in injections:
            for _ in range(n):
                rows.append(
                    {
                        "job_id": job,
                        "recipe": "base_loop",
                        "injection": injection,
                        "train_loops": trained,
                        "d_model": 64,
                        "seed": seed,
                        "n_params": 2e5,
                        "budget_tokens": 102400,
                    }
                )
                job += 1
    return pd.DataFrame(rows)


def deltas(done: pd.DataFrame, slope: float, noise: float = 0.0) -> pd.DataFrame:
    """Each run swept to 8 loops: rel_change falling by 0.1 a round, state_var growing by `slope`."""
    rows = []
    for i, job in enumerate(done["job_id"]):
        for r in range(1, 9):
            wobble = noise * (-1) ** i
            rows.append(
                {
                    "train_job_id": job,
                    "loops": 8,
                    "round": r,
                    "rel_change": 1.0 - 0.1 * r * slope + wobble,
                    "state_var": 1.0 + slope * r + wobble,
                }
            )
    return pd.DataFrame(rows)


def verdicts(done, deltas=None, interactions=None) -> dict[str, str]:
    got = claims_measure.loop_design_judgements(done, deltas, interactions)
    return {j.claim.id: str(j.verdict) for j in got}


def test_state_past_the_trained_count_falling_update_and_growing_variance_are_replicated():
    done = runs(2, seeds=(0, 1, 2))
    got = verdicts(done, deltas(done, slope=1.0, noise=0.01))
    assert got[FALLS] == got[GROWS] == claims.ClaimVerdict.REPLICATED


def test_the_opposite_trends_contradict_both_claims():
    done = runs(2, seeds=(0, 1, 2))
    got = verdicts(done, deltas(done, slope=-1.0, noise=0.01))
    assert got[FALLS] == got[GROWS] == claims.ClaimVerdict.CONTRADICTED


def test_runs_are_not_counted_as_seeds_and_other_recipes_are_not_the_studys():
    done = runs(9, seeds=(0, 1))  # nine runs of two seeds: two samples, not nine
    judged = {j.claim.id: j for j in claims_measure.loop_design_judgements(done, deltas(done, 1.0, 0.01))}
    assert judged[FALLS].ours.n == 2 and judged[FALLS].ours.method.startswith("t interval over 2 seeds")
    assert len(judged[FALLS].runs) == 18
    # the lean recipe's runs are not the loop-design study's: nothing to judge
    lean = done.assign(recipe="lean")
    judged = {j.claim.id: j for j in claims_measure.loop_design_judgements(lean, deltas(lean, 1.0, 0.01))}
    assert judged[FALLS].verdict == claims.ClaimVerdict.NOT_RUN and judged[FALLS].runs == ()


def test_a_sweep_that_stops_at_the_trained_count_leaves_them_not_run():
    done = runs(3)
    short = deltas(done, 1.0)
    short = short[short["round"] <= 4].assign(loops=4)
    got = claims_measure.loop_design_judgements(done, short, None)
    falls = next(j for j in got if j.claim.id == FALLS)
    assert falls.verdict == claims.ClaimVerdict.NOT_RUN and "rel_change at trained" in falls.reason


def interactions(done: pd.DataFrame, ratio: float) -> pd.DataFrame:
    """Every pair of rounds at 4 loops: dense's interaction 0.1 (+ a per-seed wobble), channel's `ratio`
    times it."""
    rows = []
    for job, injection, seed in zip(done["job_id"], done["injection"], done["seed"], strict=True):
        base = 0.1 + 0.005 * seed
        value = base * (ratio if injection == "channel" else 1.0) * (1 + 0.02 * (seed % 2))
        for skipped in range(1, 4):
            for r in range(skipped + 1, 5):
                rows.append(
                    {"train_job_id": job, "loops": 4, "skipped": skipped, "round": r, "interaction": value}
                )
    return pd.DataFrame(rows)


@pytest.mark.parametrize(
    "ratio, verdict",
    [(7.0, claims.ClaimVerdict.REPLICATED), (0.5, claims.ClaimVerdict.CONTRADICTED)],
)
def test_channel_against_dense_interaction_is_judged_per_seed(ratio, verdict):
    done = runs(1, injections=("channel", "dense"), seeds=(0, 1, 2))
    judged = next(
        j
        for j in claims_measure.loop_design_judgements(done, None, interactions(done, ratio))
        if j.claim.id == RATIO
    )
    assert judged.verdict == verdict
    assert judged.ours.n == 3 and judged.ours.value == pytest.approx(ratio, rel=0.05)


@pytest.mark.parametrize(
    "ratio, verdict",
    [(7.0, claims.ClaimVerdict.REPLICATED), (1.05, claims.ClaimVerdict.NOT_RESOLVED)],
)
def test_one_seed_of_each_injection_takes_our_default_noise(ratio, verdict):
    """One seed has no spread of its own: the report states no noise for an interaction, so each value
    gets our documented default (±10 %), and a ratio of 1.05 reaches across the line at 1."""
    done = runs(1, injections=("channel", "dense"), seeds=(0,))
    judged = next(
        j
        for j in claims_measure.loop_design_judgements(done, None, interactions(done, ratio))
        if j.claim.id == RATIO
    )
    assert judged.verdict == verdict and judged.ours.n == 1, judged.reason
    assert judged.ours.method == "one run ∪ our default noise ±10% per value"


def test_the_task_claims_stay_not_run_and_name_their_metric():
    done = runs(2)
    got = {j.claim.id: j for j in claims_measure.loop_design_judgements(done, deltas(done, 1.0), None)}
    task = got["loop.history_window_1_beats_4"]
    assert task.verdict == claims.ClaimVerdict.NOT_RUN and "accuracy" in task.reason


def test_applies_tells_the_studies_apart():
    assert claims_measure.applies("loop-design", runs(1))
    assert not claims_measure.applies("iso-depth", runs(1))
    assert claims_measure.applies("iso-depth", pd.DataFrame({"recipe": ["iso_depth"]}))
    assert not claims_measure.applies("lean", runs(1))
