"""The lean-recipe study's part of the claims registry (`analysis/claims.py`, records in
`analysis/claims_data/lean.toml`), measured on the runs of a results database and judged by the registry's
one rule: one scorecard row per claim (`claims.SCORECARD_COLUMNS`).

Measured here, from the depth frame (`orchestrator.frames.depth`: train_job_id, recipe, size, seed,
loops, val_loss, far_copy_loss, variant columns) and the finished runs with
`comparison.eval_loss_per_run`'s loss (`evals`):
- a claim on a depth sweep (metric frame `depth`): each of its series is the plainest variant of the
  recipe the metric names, its values the sweep's loss per (loop count, seed);
- a claim at equal data (metric `runs.eval_loss` with the iso-data note): the block of one size and
  token budget holding every series (the largest such budget), each series's per-seed eval_loss at
  the x the claim reads; iso-time runs are left out.
- a claim on parcae's training-loop sampler (`SAMPLER_CLAIMS`), once parcae runs are among them: exact,
  from the recipe's sampler (`sampler_judgement`).
- the test split ordering the recipes as validation does (`HELDOUT_CLAIMS`): Spearman's ρ per seed of
  the three recipes' validation and test losses, each at its best loop count on validation, from the
  sweeps that evaluated the test split (`heldout_points`).
Any other claim (iso-time pairs, decode timings, loop geometry, a difference the study only prints)
is not measured from these frames: its row says so, verdict "not run".

Every verdict carries our scale beside the study's: these CPU-sized runs are at another scale than
every claim, so a scale-bound figure is judged on sign only (`scale_note` says which).
"""

from __future__ import annotations

import pandas as pd
from scipy import stats as scipy_stats

from looplab.analysis import claims, far_copy, heldout
from looplab.analysis.claims_base import Claim, Scale
from looplab.analysis.claims_lean import EQUAL_DATA
from looplab.analysis.variants import with_variants
from looplab.model.presets import preset

RECIPES = ("parcae", "fixed4", "lean")
# claims on the training-loop sampler itself: P(loops <= n) of the sampler the parcae runs trained with
SAMPLER_CLAIMS = {"lean.tenth_draw_four_or_fewer": 4}
# claims on the test split against validation: read from the sweeps that evaluated both (heldout_points)
HELDOUT_CLAIMS = {"lean.test_agrees_with_validation"}
COLUMNS = claims.SCORECARD_COLUMNS
POINTS = claims.POINT_COLUMNS


def variant_of(df: pd.DataFrame, recipe: str) -> str | None:
    """The label of `recipe`'s plainest variant in `df` (the label equal to the recipe, else the one with
    the fewest overrides); None when the recipe has no row."""
    labels = sorted(set(with_variants(df).loc[lambda d: d["recipe"] == recipe, "variant_label"]))
    if not labels:
        return None
    return recipe if recipe in labels else min(labels, key=lambda label: (label.count(" · "), label))


def _series_measured(claim: Claim) -> bool:
    """Whether every series θ reads is one the metric maps to a looplab recipe."""
    mapped = {name for name, _ in claim.metric.series}
    return bool(mapped) and {s for s, _ in claims.needed(claim)} <= mapped


def scale_of(runs: pd.DataFrame, seeds) -> Scale:
    """Our runs' scale as a registry Scale: parameters and tokens when the frame has them."""
    seeds = tuple(sorted(int(s) for s in set(seeds) if pd.notna(s)))
    size = ""
    if "n_params" in runs and runs["n_params"].notna().any():
        size = f"{float(runs['n_params'].median()) / 1e6:.3g}M"
    elif "size" in runs and runs["size"].notna().any():
        size = " / ".join(sorted(set(runs["size"].dropna().astype(str))))
    tokens = ""
    if "budget_tokens" in runs and runs["budget_tokens"].notna().any():
        tokens = f"{int(runs['budget_tokens'].median())} token"
    return Scale(size, tokens, seeds)


def _block(df: pd.DataFrame, labels: set[str]) -> pd.DataFrame:
    """The rows of the (size, token budget) block holding every label, the largest budget if several do
    (the first size by name on a tie): one scale per claim, never a mean over two."""
    df = df[df["variant_label"].isin(labels)]
    full = df.groupby(["size", "budget_tokens"])["variant_label"].transform("nunique") == len(labels)
    df = df[full]
    if df.empty:
        return df
    df = df[df["budget_tokens"] == df["budget_tokens"].max()]
    return df[df["size"] == sorted(set(df["size"]))[0]]


def _labels(claim: Claim, df: pd.DataFrame) -> dict[str, str | None]:
    """{the claim's series: the plainest variant of the recipe the metric maps it to, None if absent}."""
    return {name: variant_of(df, recipe) if not df.empty else None for name, recipe in claim.metric.series}


def _present_block(claim: Claim, depth: pd.DataFrame) -> tuple[dict, pd.DataFrame | None]:
    """Each series's variant label in `depth`, and the one block of the sweeps holding the labels that
    have runs (None when no series has any)."""
    labels = _labels(claim, depth)
    present = {label for label in labels.values() if label is not None}
    return labels, (_block(with_variants(depth), present) if present else None)


def _depth_points(claim: Claim, depth: pd.DataFrame) -> tuple[pd.DataFrame, list]:
    """Each series's sweep loss per (seed, loop count) in one block; series without runs give none."""
    column = claim.metric.column
    if column == "far_copy_loss":  # only splits of the current definition at the note's distance
        depth = far_copy.comparable(depth)
    labels, block = _present_block(claim, depth)
    if block is None:
        return pd.DataFrame(columns=POINTS), []
    rows, jobs = [], []
    for name, label in labels.items():
        d = block[block["variant_label"] == label].dropna(subset=[column])
        per = d.groupby(["seed", "loops"])[column].mean().reset_index()
        rows += [(name, int(r.loops), r.seed, float(getattr(r, column))) for r in per.itertuples()]
        jobs += sorted(set(d["train_job_id"]))
    return pd.DataFrame(rows, columns=POINTS), jobs


def _equal_data_points(claim: Claim, evals: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The per-seed eval_loss of each series in the largest (size, budget) block holding all of them."""
    df = evals.dropna(subset=["eval_loss"]) if not evals.empty else evals
    if not df.empty and "match_time_of" in df:
        df = df[df["match_time_of"].isna()]
    labels = _labels(claim, df)
    if df.empty or any(label is None for label in labels.values()):
        return pd.DataFrame(columns=POINTS), df.iloc[0:0]
    df = _block(with_variants(df), set(labels.values()))
    x_of = dict(claims.needed(claim))
    rows = []
    for name, label in labels.items():
        part = df[df["variant_label"] == label].groupby("seed")["eval_loss"].mean()
        rows += [(name, x_of[name], seed, float(v)) for seed, v in part.items()]
    return pd.DataFrame(rows, columns=POINTS), df


def heldout_points(claim: Claim, depth: pd.DataFrame) -> tuple[pd.DataFrame, list]:
    """Per seed, each recipe's validation and test loss at its best loop count on validation (series
    "validation" and "test", x the recipe), from sweeps that evaluated the test split, in one block."""
    labels, block = _present_block(claim, heldout.with_test(depth))
    if block is None:
        return pd.DataFrame(columns=POINTS), []
    rows, jobs = [], []
    for name, label in labels.items():
        d = block[block["variant_label"] == label]
        per = d.groupby(["seed", "loops"])[["val_loss", "test_loss"]].mean().reset_index()
        for seed, sweep in per.groupby("seed"):
            best = sweep.loc[sweep["val_loss"].idxmin()]
            rows += [
                ("validation", name, seed, float(best["val_loss"])),
                ("test", name, seed, float(best["test_loss"])),
            ]
        jobs += sorted(set(d["train_job_id"]))
    return pd.DataFrame(rows, columns=POINTS), jobs


def sampler_judgement(claim: Claim, runs: tuple = ()) -> claims.Judgement:
    """P(loops <= n) of the parcae recipe's training-loop sampler, exact from its definition
    (families/looped/model.py `sample_loops`: Poisson with the recipe's loop count as its mean, at least 1, so for
    n >= 1 it is the Poisson CDF at n): a property of the sampler the parcae runs `runs` trained with."""
    cfg = preset("parcae")
    if cfg.loop_sampler not in ("poisson_seq", "poisson_batch"):
        return claims.judge(claim, None, None, [f"a Poisson loop sampler (parcae's is {cfg.loop_sampler})"])
    p = float(scipy_stats.poisson.cdf(SAMPLER_CLAIMS[claim.id], cfg.loops))
    ours = claims.Estimate(p, p, p, 1, "exact: the sampler's distribution")
    scale = Scale(note=f"the parcae recipe's sampler: Poisson, mean {cfg.loops} loops")
    return claims.judge(claim, ours, scale, runs=runs)


def judge_lean_claim(claim: Claim, depth: pd.DataFrame, evals: pd.DataFrame) -> claims.Judgement:
    """One lean claim measured on the frames (see the module docstring) and judged."""
    frame, note = claim.metric.frame, claim.metric.note
    if claim.id in SAMPLER_CLAIMS:
        parcae = evals[evals["recipe"] == "parcae"] if "recipe" in evals else evals.iloc[:0]
        if parcae.empty:
            return claims.judge(claim, None, None, ["parcae runs (the sampler they trained with)"])
        return sampler_judgement(claim, tuple(sorted(parcae["job_id"])))
    if claim.id in HELDOUT_CLAIMS:
        points, jobs = heldout_points(claim, depth)
        if points.empty:
            return claims.judge(
                claim, None, None, ["depth sweeps of parcae, fixed4 and lean with the test split"]
            )
        runs = evals[evals["job_id"].isin(jobs)] if not evals.empty and "job_id" in evals else evals
        return claims.judge_points(claim, points, scale_of(runs, points["seed"]), jobs)
    if frame == "depth" and _series_measured(claim):
        points, jobs = _depth_points(claim, depth)
        runs = evals[evals["job_id"].isin(jobs)] if not evals.empty and "job_id" in evals else evals
        return claims.judge_points(claim, points, scale_of(runs, points["seed"]), jobs)
    if frame == "runs" and note == EQUAL_DATA and _series_measured(claim):
        points, block = _equal_data_points(claim, evals)
        jobs = sorted(block["job_id"]) if "job_id" in block else []
        return claims.judge_points(claim, points, scale_of(block, points["seed"]), jobs)
    return claims.judge(claim, None, None, [f"a measurement from these frames ({claim.metric.describe()})"])


def lean_study_findings(depth: pd.DataFrame, evals: pd.DataFrame) -> pd.DataFrame:
    """The scorecard of the lean-recipe study's claims (`claims.SCORECARD_COLUMNS`) on these frames."""
    return claims.scorecard(judge_lean_claim(c, depth, evals) for c in claims.claims_of("lean"))


def applies(runs: pd.DataFrame) -> bool:
    """Whether `runs` hold the study's three recipes (a report lists the findings then)."""
    return not runs.empty and set(RECIPES) <= set(runs["recipe"].dropna())
