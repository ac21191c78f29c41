"""looplab.analysis.findings: the lean-recipe study's claims measured on frames built from the study's own tables
(so the registry's rule must replicate them through the same path our runs take), then with a shape
broken, a loop count missing and a claim these frames cannot measure."""

from __future__ import annotations

import pandas as pd
import pytest

from looplab.analysis import claims, comparison, findings

C = claims.BY_ID


def table(claim_id: str, series: str) -> dict:
    """{seed: {loops: loss}} of one series of a claim's printed table (the registry's own values)."""
    out: dict = {}
    for p in C[claim_id].points:
        if p.series == series:
            out.setdefault(p.seed, {})[p.x] = p.quote.value
    return out


PARCAE = table("lean.parcae_share_4_of_8", "parcae")  # 144 M / 1 B, seeds 43 and 44, loops 1-32
LEAN = table("lean.lean_best_at_4", "lean")
# fixed4 is not tabulated: best at its trained 4 by 0.05 or more on both seeds
FIXED4 = {s: {x: v + (0.05 + 0.001 * x if x != 4 else 0.0) for x, v in LEAN[s].items()} for s in LEAN}
MODES = {"parcae": ("sampled", 8), "fixed4": ("fixed", 4), "lean": ("fixed", 4)}


def frames(sweeps: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the depth frame, the runs with comparison.eval_loss_per_run's loss), as the report builds them."""
    runs, depth = [], []
    job_id = 0
    for recipe, per_seed in sweeps.items():
        mode, loops = MODES[recipe]
        for seed, losses in per_seed.items():
            job_id += 1
            runs.append(
                dict(
                    job_id=job_id,
                    grid="g",
                    recipe=recipe,
                    size="tiny",
                    seed=seed,
                    status="succeeded",
                    budget_tokens=2**20,
                    budget_time_s=None,
                    match_time_of=None,
                    loop_mode=mode,
                    train_loops=loops,
                    final_val_loss=min(losses.values()),
                )
            )
            depth += [
                dict(
                    train_job_id=job_id,
                    recipe=recipe,
                    size="tiny",
                    seed=seed,
                    budget_tokens=2**20,
                    loops=n,
                    val_loss=v,
                )
                for n, v in losses.items()
            ]
    depth_df = pd.DataFrame(depth)
    return depth_df, comparison.eval_loss_per_run(pd.DataFrame(runs), depth_df)


def card(sweeps: dict) -> pd.DataFrame:
    return findings.lean_study_findings(*frames(sweeps)).set_index("claim")


DEPTH_CLAIMS = [
    "lean.parcae_gain_1_to_4",
    "lean.parcae_gain_4_to_8",
    "lean.parcae_share_4_of_8",
    "lean.parcae_flat_beyond_8",
    "lean.parcae_best_at_12",
    "lean.parcae_flat_6_to_32",
    "lean.lean_best_at_4",
    "lean.lean_8_loops_worse",
    "lean.lean_1_loop_worse",
    "lean.fixed4_best_at_4",
]


def test_every_lean_claim_has_a_row_and_the_studys_tables_replicate_through_the_frames():
    out = card({"parcae": PARCAE, "fixed4": FIXED4, "lean": LEAN})
    assert list(out.columns) == [c for c in claims.SCORECARD_COLUMNS if c != "claim"]
    assert list(out.index) == [c.id for c in claims.claims_of("lean")]
    for claim_id in DEPTH_CLAIMS:
        # the study's own 12-loop best is 0.0001 below 16, inside the sweep's 0.01 noise floor
        expected = "not resolved" if claim_id == "lean.parcae_best_at_12" else "replicated"
        assert out.loc[claim_id, "verdict"] == expected, (claim_id, out.loc[claim_id, "reason"])
        # tiny runs: another scale than the study's, so sign only (a share: size, being scale-free), said so
        assert out.loc[claim_id, "scale_note"] in (claims.OTHER_SCALE, claims.SCALE_FREE)
        assert out.loc[claim_id, "scale_note"] == claims.scale_basis(C[claim_id], False)
    share = out.loc["lean.parcae_share_4_of_8"]
    assert share["value"] == pytest.approx(claims.study_estimate(C["lean.parcae_share_4_of_8"]).value)
    assert share["n_seeds"] == 2 and "seeds 43, 44" in share["our_scale"]
    # equal data: parcae at its best of the sweep (12 loops), lean at 4, as the study's table has them
    equal = out.loc["lean.lean_as_good_144m_1b"]
    assert equal["verdict"] == "replicated" and equal["value"] == pytest.approx((-0.0045 - 0.0054) / 2)
    # the same two seeds cannot resolve "lean better" (−0.005 ± the study's 0.01) in either direction
    assert out.loc["lean.lean_beats_parcae_86m", "verdict"] == "not resolved"
    # fixed4 has lean's loss at 4 here: the same −0.005, the same verdict
    assert out.loc["lean.fixed4_beats_parcae_86m", "verdict"] == "not resolved"


def test_a_broken_shape_is_contradicted_whichever_way_it_breaks():
    lean = {s: {**v, 6: v[4] - 0.02} for s, v in LEAN.items()}  # 6 loops beat 4 on both seeds
    out = card({"parcae": PARCAE, "fixed4": FIXED4, "lean": lean})
    assert out.loc["lean.lean_best_at_4", "verdict"] == "contradicted"
    assert out.loc["lean.lean_best_at_4", "value"] == pytest.approx(-0.02)
    parcae = {s: {**v, 4: v[1] - 0.1 * (v[1] - v[8])} for s, v in PARCAE.items()}  # 4 loops: 10 % of the gain
    out = card({"parcae": parcae, "fixed4": FIXED4, "lean": LEAN})
    assert out.loc["lean.parcae_share_4_of_8", "verdict"] == "contradicted"
    assert out.loc["lean.parcae_gain_4_to_8", "verdict"] == "replicated"  # still falls from 4 to 8


def test_missing_loop_counts_and_recipes_are_named():
    short = {s: {x: v for x, v in c.items() if x <= 16} for s, c in PARCAE.items()}  # a 1-16 sweep
    out = card({"parcae": short, "fixed4": FIXED4, "lean": LEAN})
    assert out.loc["lean.parcae_best_at_12", "verdict"] == "not run"
    assert out.loc["lean.parcae_best_at_12", "reason"] == "needs parcae at 24, parcae at 32"
    assert out.loc["lean.parcae_share_4_of_8", "verdict"] == "replicated"  # 1, 4 and 8 are there
    out = card({"parcae": PARCAE, "lean": LEAN})
    assert out.loc["lean.fixed4_best_at_4", "reason"].startswith("needs fixed4 at 4")
    assert out.loc["lean.fixed4_beats_parcae_86m", "verdict"] == "not run"


def test_a_claim_these_frames_cannot_measure_says_so():
    out = card({"parcae": PARCAE, "fixed4": FIXED4, "lean": LEAN})
    for claim_id in ("lean.train_speedup", "lean.iso_time_86m_1_8h", "lean.parcae_update_shrinks"):
        assert out.loc[claim_id, "verdict"] == "not run"
        assert out.loc[claim_id, "reason"].startswith("needs a measurement from these frames")
        assert out.loc[claim_id, "study_figure"] != "—"  # the study's own figure is still shown


def test_applies_to_the_three_recipes():
    assert findings.applies(pd.DataFrame({"recipe": ["parcae", "fixed4", "lean", "plain"]}))
    assert not findings.applies(pd.DataFrame({"recipe": ["parcae", "lean"]}))


def test_the_test_split_orders_the_recipes_as_validation_does():
    claim = C["lean.test_agrees_with_validation"]  # line 34: test agrees with validation in direction
    depth, evals = frames({"parcae": PARCAE, "fixed4": FIXED4, "lean": LEAN})
    depth.loc[depth["recipe"] == "fixed4", "val_loss"] += 0.003  # no tie with lean at 4 loops
    j = findings.judge_lean_claim(claim, depth, evals)  # no sweep evaluated the test split
    assert j.verdict == claims.ClaimVerdict.NOT_RUN and "with the test split" in j.reason
    # the test loss 0.02 above validation everywhere: the same order on both seeds, ρ = 1
    same = depth.assign(test_loss=depth["val_loss"] + 0.02)
    j = findings.judge_lean_claim(claim, same, evals)
    assert j.verdict == claims.ClaimVerdict.REPLICATED and j.ours.value == 1.0 and j.ours.n == 2
    assert len(j.runs) == 6 and j.judged == claims.SIGN_ONLY  # a rank: a side of the line, no size
    # each recipe at its best loop count on validation: parcae at 12 (the note's), lean and fixed4 at 4
    points, _ = findings.heldout_points(claim, same)
    best = points[points["series"] == "validation"].set_index(["x", "seed"])["value"]
    assert best[("parcae", 43)] == 3.2458 and best[("lean", 43)] == 3.2413
    # test losses in the reverse order of validation on both seeds: ρ = −1
    order = {"parcae": 0.0, "fixed4": 0.2, "lean": 0.4}
    flipped = depth.assign(test_loss=-depth["val_loss"] + depth["recipe"].map(order))
    assert findings.judge_lean_claim(claim, flipped, evals).verdict == claims.ClaimVerdict.CONTRADICTED
