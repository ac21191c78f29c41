"""Every claim of the registry judged on the runs of a database: the scorecard `looplab claims` prints,
the Claims page shows, the study report and the studies' demos end with.

What is measured where: the lean-recipe claims by `analysis.findings` (depth sweeps and the equal-data
block); φ and 4^φ of the iso-depth study from the law fitted to the iso_depth runs
(`analysis.iso_depth`, its bootstrap interval), given here as the fitted study; of the loop-design
report, the loop geometry past the trained count (each run's depth sweep, `round_deltas`, of the
study's own layouts; a sample is a training seed, the mean of that seed's runs: runs are never seeds) and channel-wise against dense injection's cross-round
interaction (`round_interactions`, per seed: the two variants of one layout trained with that seed);
every other claim's row is "not run" and names the measurement it needs (its metric). Pure: frames in,
a table out.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from looplab.analysis import claims, comparison, findings, iso_depth, scaling
from looplab.analysis.claims_base import Claim, Scale
from looplab.analysis.iso_depth import IsoDepthStudy
from looplab.model.presets import LOOP_LAYOUTS

FIT_CLAIMS = ("iso.phi_below_one", "iso.phi_above_zero", "iso.worth_at_4")
# iso-depth claims on the compute-optimal allocation per r at the runs' largest budget
ALLOCATION_CLAIMS = (
    "iso.optimal_width_grows",
    "iso.optimal_tokens_fall",
    "iso.optimal_params_fall",
    "iso.gap_grows_with_r",
    "iso.no_crossover",
)
ALLOCATION_COLUMNS = ("width", "tokens", "unique_params", "gap")  # iso_depth.optimal_draws' figures
# loop-design claims on one model's rounds past its trained count: the round_deltas column each reads
GEOMETRY_CLAIMS = {
    "loop.update_falls_beyond_horizon": "rel_change",
    "loop.variance_grows_beyond_horizon": "state_var",
}
# loop-design claims on a ratio of two injections' mean cross-round interaction, trained alike
INTERACTION_CLAIMS = {"loop.channel_interaction_7x_dense": ("channel", "dense")}


def _unmeasured(claim: Claim) -> claims.Judgement:
    return claims.judge(claim, None, None, [f"a measurement of it ({claim.metric.describe()})"])


def fit_law(runs: pd.DataFrame) -> IsoDepthStudy:
    """The iso-depth law fitted as the Scaling page fits it (its bootstrap, seed 0, the linear loss)."""
    return iso_depth.fit_iso_depth(runs, bootstrap=scaling.DEFAULT_BOOTSTRAP, seed=0, robust="linear")


def iso_fit(
    done: pd.DataFrame, fit: Callable[[pd.DataFrame], IsoDepthStudy] = fit_law, where: str = "these runs"
) -> tuple[IsoDepthStudy | None, str]:
    """The law fitted to the iso_depth runs among `done` by `fit` (the dashboard passes a cached one):
    (the fitted study, "") or (None, what a fit would need; `where` names what `done` is)."""
    runs = done[done["recipe"] == iso_depth.ISO_DEPTH_RECIPE] if "recipe" in done else done.iloc[:0]
    if runs.empty:
        return None, f"iso_depth runs (none in {where})"
    try:
        return fit(iso_depth.runs_for_fit(runs)), ""
    except ValueError as e:  # ConfigError: too few runs, or too few budgets, to identify the law
        return None, f"a fit of the iso_depth runs ({e})"


def _allocation(claim: Claim, study: IsoDepthStudy, scale: Scale) -> claims.Judgement:
    """A claim on the compute-optimal allocation per r: θ from the estimate's optimum and from each
    bootstrap draw's (re-optimised), the interval the draws' percentiles; an optimum on the search's
    edge for an r the claim reads leaves it without an interval (the range does not hold the optimum)."""
    runs = [f"{study.fit.n_runs} runs"]
    if study.flops is None:
        return claims.judge(claim, None, None, ["runs with FLOP budgets (for the compute-optimal width)"])
    try:
        draws = iso_depth.optimal_draws(study.fit, study.flops)
    except ValueError as e:
        return claims.judge(claim, None, None, [f"the compute-optimal widths ({e})"])
    rs = sorted({x for _, x in claims.needed(claim)})
    lacking = [r for r in rs if float(r) not in draws]
    if lacking:
        return claims.judge(claim, None, None, [f"runs at r = {', '.join(str(r) for r in lacking)}"], runs)
    n = len(draws[float(rs[0])]["loss"])
    thetas = np.array(
        [
            claims.theta(
                claim, {(c, r): float(f[c][k]) for r, f in draws.items() for c in ALLOCATION_COLUMNS}
            )
            for k in range(n)
        ]
    )
    edge = [r for r in rs if bool(draws[float(r)]["at_edge"][0])]
    level = study.fit.confidence
    if edge:
        ours = claims.Estimate(
            float(thetas[0]),
            np.nan,
            np.nan,
            study.fit.n_runs,
            "optimum at the search's edge for r = " + ", ".join(str(r) for r in edge),
        )
    else:
        tail = 100 * (1 - level) / 2
        low, high = np.nanpercentile(thetas[1:], [tail, 100 - tail]) if n > 2 else (np.nan, np.nan)
        ours = claims.fitted(
            thetas[0], low, high, study.fit.n_runs, "bootstrap of the fit, re-optimised per draw"
        )
    return claims.judge(claim, ours, scale, runs=runs)


def iso_depth_judgements(study: IsoDepthStudy | None, why_not: str = "") -> list[claims.Judgement]:
    """The iso-depth claims on a fitted study: φ with the fit's interval, 4^φ with recurrence_worth's,
    the compute-optimal allocation per r at the runs' largest budget with its draws' interval; without
    a fit every claim is not run and `why_not` says why."""
    out = []
    for claim in claims.claims_of("iso-depth"):
        if claim.id not in FIT_CLAIMS + ALLOCATION_CLAIMS:
            out.append(_unmeasured(claim))
            continue
        if study is None:
            out.append(claims.judge(claim, None, None, [why_not or "a fit of iso_depth runs"]))
            continue
        fit = study.fit
        rs = sorted(int(r) for r in fit.table["r"].unique()) if "r" in fit.table else []
        scale = Scale(note=f"{fit.n_runs} runs; r in {', '.join(str(r) for r in rs)}")
        if claim.id in ALLOCATION_CLAIMS:
            out.append(_allocation(claim, study, scale))
            continue
        if claim.id == "iso.worth_at_4":
            row = study.worth[study.worth["r"] == 4]
            ours = (
                claims.fitted(row["blocks"].iloc[0], row["lo"].iloc[0], row["hi"].iloc[0], fit.n_runs)
                if len(row)
                else None
            )
            out.append(claims.judge(claim, ours, scale, ["runs at r = 4"], runs=[f"{fit.n_runs} runs"]))
            continue
        low, high = fit.intervals["phi"]
        ours = claims.fitted(fit.phi, low, high, fit.n_runs)
        out.append(claims.judge(claim, ours, scale, runs=[f"{fit.n_runs} runs"]))
    return out


def _of(frame: pd.DataFrame | None, done: pd.DataFrame) -> pd.DataFrame:
    """The rows of a depth-sweep frame whose trained model is among `done` (empty when no frame)."""
    if frame is None or frame.empty or done.empty:
        return pd.DataFrame()
    return frame[frame["train_job_id"].isin(done["job_id"])]


def _study_runs(done: pd.DataFrame) -> pd.DataFrame:
    """The runs of the loop-design study (its layouts' recipes): its claims rest on no other recipe."""
    if "recipe" not in done:
        return done.iloc[:0]
    return done[done["recipe"].isin(LOOP_LAYOUTS)]


def _geometry_points(done: pd.DataFrame, deltas: pd.DataFrame, column: str) -> pd.DataFrame:
    """Per training seed: `column` at its runs' trained round and at the deepest round each run's sweep
    measured past it (the deepest sweep's rounds; a round's state does not depend on how many follow
    it), the mean over the runs of that seed, so a seed is a sample and several runs of one seed are
    not counted as several."""
    done = _study_runs(done)
    trained = dict(zip(done["job_id"], done["train_loops"], strict=True)) if "train_loops" in done else {}
    seed_of = dict(zip(done["job_id"], done["seed"], strict=True)) if "seed" in done else {}
    rows = []
    for job_id, g in deltas.groupby("train_job_id") if not deltas.empty else ():
        n = trained.get(job_id)
        if n is None or pd.isna(n) or g[column].isna().all() or pd.isna(seed_of.get(job_id)):
            continue
        g = g[g["loops"] == g["loops"].max()]
        at, last = g[g["round"] == int(n)], g[g["round"] == g["round"].max()]
        if at.empty or int(last["round"].iloc[0]) <= int(n):
            continue
        rows += [(column, "trained", seed_of[job_id], float(at[column].iloc[0]), job_id)]
        rows += [(column, "beyond", seed_of[job_id], float(last[column].iloc[0]), job_id)]
    frame = pd.DataFrame(rows, columns=[*claims.POINT_COLUMNS, "job_id"])
    return _per_seed_means(frame[claims.POINT_COLUMNS], sorted(frame["job_id"].unique()))


def _per_seed_means(points: pd.DataFrame, jobs: list) -> pd.DataFrame:
    """One value per (series, x, seed): the mean over that seed's runs; the job ids they rest on ride in
    `attrs["jobs"]`."""
    means = points.groupby(["series", "x", "seed"], as_index=False)["value"].mean()[claims.POINT_COLUMNS]
    means.attrs["jobs"] = jobs
    return means


def _interaction_points(claim: Claim, done: pd.DataFrame, interactions: pd.DataFrame) -> pd.DataFrame:
    """Per training seed: the mean interaction of the first injection's run over the second's, of one
    layout of the study (same recipe, loops and width), both at the deepest interaction depth the two
    share; several layouts of one seed give that seed's mean ratio (one sample per seed)."""
    a, b = INTERACTION_CLAIMS[claim.id]
    series, x = claim.terms[0]
    if interactions.empty or "injection" not in done:
        return _per_seed_means(pd.DataFrame(columns=claims.POINT_COLUMNS), [])
    keys = ["recipe", "train_loops", "d_model", "seed"]
    done = _study_runs(done)
    runs = done[done["injection"].isin([a, b])][["job_id", "injection", *keys]]
    rows, jobs = [], []
    for (*_, seed), group in runs.groupby(keys, dropna=False):
        by = dict(zip(group["injection"], group["job_id"], strict=True))
        if set(by) != {a, b}:
            continue
        ia, ib = (interactions[interactions["train_job_id"] == by[k]] for k in (a, b))
        depth = min(ia["loops"].max(), ib["loops"].max())
        mean_a, mean_b = (i[i["loops"] == depth]["interaction"].mean() for i in (ia, ib))
        if pd.notna(mean_a) and pd.notna(mean_b) and mean_b > 0:
            rows.append((series, x, seed, float(mean_a / mean_b)))
            jobs += [by[a], by[b]]
    return _per_seed_means(pd.DataFrame(rows, columns=claims.POINT_COLUMNS), sorted(jobs))


def loop_design_judgements(
    done: pd.DataFrame, deltas: pd.DataFrame | None = None, interactions: pd.DataFrame | None = None
) -> list[claims.Judgement]:
    """The loop-design report's claims on the runs `done` and their sweeps' geometry and interactions;
    the claims on task accuracy need task scores by category (not run until measured)."""
    deltas, interactions = _of(deltas, done), _of(interactions, done)
    out = []
    for claim in claims.claims_of("loop-design"):
        if claim.id in GEOMETRY_CLAIMS:
            points = _geometry_points(done, deltas, GEOMETRY_CLAIMS[claim.id])
        elif claim.id in INTERACTION_CLAIMS:
            points = _interaction_points(claim, done, interactions)
        else:
            out.append(_unmeasured(claim))
            continue
        study = _study_runs(done)
        used = study[study["job_id"].isin(points.attrs["jobs"])]
        scale = findings.scale_of(used, points["seed"])
        out.append(claims.judge_points(claim, points, scale, sorted(used["job_id"])))
    return out


def judgements(
    done: pd.DataFrame,
    depth: pd.DataFrame,
    study: str | None = None,
    iso: IsoDepthStudy | None = None,
    iso_note: str = "",
    deltas: pd.DataFrame | None = None,
    interactions: pd.DataFrame | None = None,
) -> list[claims.Judgement]:
    """Each claim of `study` (all three for None) judged on the succeeded runs `done` (the runs frame)
    and their depth sweeps (`depth`, and their loop geometry `deltas` and `interactions`)."""
    chosen = {c.id for c in claims.claims_of(study)}
    out: list[claims.Judgement] = []
    if any(c.study == "lean" for c in claims.CLAIMS if c.id in chosen):
        sweeps = depth[depth["train_job_id"].isin(done["job_id"])] if not depth.empty else depth
        evals = comparison.eval_loss_per_run(done, sweeps) if not done.empty else done
        out += [findings.judge_lean_claim(c, sweeps, evals) for c in claims.claims_of("lean")]
    out += iso_depth_judgements(iso, iso_note)
    out += loop_design_judgements(done, deltas, interactions)
    return [j for j in out if j.claim.id in chosen]


def scorecard(done: pd.DataFrame, depth: pd.DataFrame, study: str | None = None, **fit) -> pd.DataFrame:
    """`claims.scorecard` of `judgements`."""
    return claims.scorecard(judgements(done, depth, study, **fit))


def applies(study: str, done: pd.DataFrame) -> bool:
    """Whether the runs `done` are (part of) a study of that kind: a report ends with its scorecard."""
    recipes = set(done["recipe"].dropna()) if "recipe" in done else set()
    if study == "lean":
        return findings.applies(done)
    if study == "iso-depth":
        return iso_depth.ISO_DEPTH_RECIPE in recipes
    return bool(recipes & set(LOOP_LAYOUTS))
