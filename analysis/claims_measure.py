"""Every claim of the registry judged on the runs of a database: the scorecard `looplab claims` prints.

What is measured where: the lean-recipe claims by `analysis.findings` (depth sweeps and the equal-data
block); φ and 4^φ of the iso-depth study from the law fitted to the iso_depth runs
(`analysis.iso_depth`, its bootstrap interval), given here as the fitted study; every other claim's row
is "not run" and names the measurement it needs (its metric). Pure: frames in, a table out.
"""

from __future__ import annotations

import pandas as pd

from analysis import claims, comparison, findings
from analysis.claims_base import Claim, Scale
from analysis.iso_depth import IsoDepthStudy

FIT_CLAIMS = ("iso.phi_below_one", "iso.phi_above_zero", "iso.worth_at_4")


def _unmeasured(claim: Claim) -> claims.Judgement:
    return claims.judge(claim, None, None, [f"a measurement of it ({claim.metric.describe()})"])


def iso_depth_judgements(study: IsoDepthStudy | None, why_not: str = "") -> list[claims.Judgement]:
    """The iso-depth claims on a fitted study: φ with the fit's interval, 4^φ with recurrence_worth's;
    without a fit every claim is not run and `why_not` says why."""
    out = []
    for claim in claims.claims_of("iso-depth"):
        if claim.id not in FIT_CLAIMS:
            out.append(_unmeasured(claim))
            continue
        if study is None:
            out.append(claims.judge(claim, None, None, [why_not or "a fit of iso_depth runs"]))
            continue
        fit = study.fit
        rs = sorted(int(r) for r in fit.table["r"].unique()) if "r" in fit.table else []
        scale = Scale(note=f"{fit.n_runs} runs; r in {', '.join(str(r) for r in rs)}")
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


def judgements(
    done: pd.DataFrame,
    depth: pd.DataFrame,
    study: str | None = None,
    iso: IsoDepthStudy | None = None,
    iso_note: str = "",
) -> list[claims.Judgement]:
    """Each claim of `study` (all three for None) judged on the succeeded runs `done` (the runs frame)
    and their depth sweeps."""
    chosen = {c.id for c in claims.claims_of(study)}
    out: list[claims.Judgement] = []
    if any(c.study == "lean" for c in claims.CLAIMS if c.id in chosen):
        sweeps = depth[depth["train_job_id"].isin(done["job_id"])] if not depth.empty else depth
        evals = comparison.eval_loss_per_run(done, sweeps) if not done.empty else done
        out += [findings.judge_lean_claim(c, sweeps, evals) for c in claims.claims_of("lean")]
    out += iso_depth_judgements(iso, iso_note)
    out += [_unmeasured(c) for c in claims.claims_of("loop-design")]
    return [j for j in out if j.claim.id in chosen]


def scorecard(done: pd.DataFrame, depth: pd.DataFrame, study: str | None = None, **fit) -> pd.DataFrame:
    """`claims.scorecard` of `judgements`."""
    return claims.scorecard(judgements(done, depth, study, **fit))
