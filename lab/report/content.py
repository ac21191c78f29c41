"""What a study report shows, computed once: the selected grids' runs read by `orchestrator.frames` and
every number computed by the same `analysis` functions, with the same defaults, as the dashboard's pages
(Compare, Depth, Decode, Tasks, Scaling), so a report and the dashboard filtered to the same grids agree
to the last digit (tests/lab/test_report.py checks it against the pages themselves).

The page defaults used: the reference variant is `comparison.default_reference` (parcae's plainest
variant), the noise threshold and the δ of `seeds_needed` are `comparison.NOISE_THRESHOLD`, the iso-FLOP
tolerance `comparison.FLOP_TOLERANCE`, the loop geometry is the forward with the most loops, the
scaling fit uses `scaling.DEFAULT_BOOTSTRAP` resamples with seed 0 and the linear loss.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from looplab.analysis import (
    claims,
    claims_measure,
    comparison,
    curves,
    extrapolation,
    iso_depth,
    scaling,
    stats,
    tasks,
    timing,
    variants,
)
from looplab.model.presets import ISO_DEPTH_RECIPE
from looplab.orchestrator import frames
from looplab.orchestrator.errors import USER_ERRORS
from looplab.orchestrator.states import JobStatus

ROOT = Path(__file__).resolve().parents[2]
CURVE_KEY = "val_loss"  # the training curve a report draws


@dataclass
class StudyData:
    """The numbers of a report on `grids` (their rows: id, name, created_at, spec)."""

    url: str
    grids: pd.DataFrame
    code_version: str
    runs: pd.DataFrame  # every run of the grids, with its variant columns and budget label
    done: pd.DataFrame  # the succeeded ones: every comparison reads these
    reference: str | None
    noise: stats.NoiseFloor
    iso_data: pd.DataFrame
    iso_matrix: pd.DataFrame
    data_fits: pd.DataFrame
    iso_flop: pd.DataFrame
    iso_flop_curve: pd.DataFrame
    iso_time: pd.DataFrame
    iso_time_pairs: pd.DataFrame
    throughput: pd.DataFrame
    depth_curves: pd.DataFrame
    depth_wide: pd.DataFrame
    round_deltas: pd.DataFrame  # the forward with the most loops
    extrapolation: pd.DataFrame
    decode: pd.DataFrame
    task_tables: dict[str, pd.DataFrame]
    curves: pd.DataFrame  # CURVE_KEY points of the runs, labelled
    scorecards: dict[str, pd.DataFrame]  # per study the selection is part of: its claims judged
    scaling: iso_depth.IsoDepthStudy | None = None
    scaling_note: str = ""
    notes: list[str] = field(default_factory=list)


def code_version(root: Path = ROOT) -> str:
    """The git commit of the checkout writing the report (with `+ local changes` when dirty), else a
    note that it is unknown. The runs themselves do not record the code they ran."""
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown (not a git checkout)"
    return commit + (" + local changes" if dirty else "")


def _of_runs(df: pd.DataFrame, runs: pd.DataFrame, on: str = "train_job_id") -> pd.DataFrame:
    return df[df[on].isin(runs["job_id"])] if not df.empty else df


def _scaling(done: pd.DataFrame) -> tuple[iso_depth.IsoDepthStudy | None, str]:
    """The Scaling page's fit of the selection's fixed-loop runs when it holds iso-depth runs."""
    if ISO_DEPTH_RECIPE not in set(done["recipe"].dropna()):
        return None, "no iso-depth runs in these grids: no scaling-law fit"
    fit_runs = iso_depth.runs_for_fit(done)
    try:
        study = iso_depth.fit_iso_depth(
            fit_runs,
            flops=iso_depth.default_budget(fit_runs) or 1e15,
            bootstrap=scaling.DEFAULT_BOOTSTRAP,
            seed=0,
            robust="linear",
        )
    except USER_ERRORS as e:
        return None, f"the law cannot be fitted to these {len(fit_runs)} runs: {e}"
    return study, ""


def _scorecards(url: str, done: pd.DataFrame, depth: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The scorecard (`looplab claims`) of each study the finished runs are part of, judged on them only."""
    studies = [s for s in claims.STUDIES if claims_measure.applies(s, done)]
    if not studies:
        return {}
    iso, why = claims_measure.iso_fit(done) if "iso-depth" in studies else (None, "")
    measured = {"deltas": frames.round_deltas(url), "interactions": frames.round_interactions(url)}
    return {s: claims_measure.scorecard(done, depth, s, iso=iso, iso_note=why, **measured) for s in studies}


def study_data(url: str, grids: list[str]) -> StudyData:
    """Every number of a report on `grids` (names or ids) of the database at `url`."""
    picked = frames.grid_rows(url, grids, "report")
    runs = frames.runs(url)
    runs["budget"] = variants.budget_labels(runs)
    # labels made unique over the whole database first, as the pages do before their grid filter
    runs = variants.with_variants(runs)
    runs = runs[runs["grid_id"].isin(picked["id"])].sort_values("job_id")
    done = runs[runs["status"] == JobStatus.SUCCEEDED]
    depth = frames.depth(url)
    evals = comparison.eval_loss_per_run(done, _of_runs(depth, done))
    noise = stats.noise_floor(evals)
    reference = comparison.default_reference(list(runs["variant_label"]))
    iso = comparison.iso_data_table(evals, reference=reference, noise=noise)
    fit_table, _ = stats.data_fits(evals)
    flop = comparison.iso_flop_curve(evals)
    pairs = timing.mark_pairs(comparison.iso_time_pairs(done, noise=noise), done)

    sweeps = _of_runs(depth, runs)  # the Depth page reads every selected run's sweeps
    by_loops = curves.depth_curves(sweeps)
    deltas = _of_runs(frames.round_deltas(url), runs)
    most = int(deltas["loops"].max()) if not deltas.empty else None
    dec = variants.with_variants(frames.decode(url), name="arch")
    dec = dec[dec["grid_id"].isin(picked["id"])]
    dec_ref = comparison.default_reference(list(dec["variant_label"]))
    scores = _of_runs(frames.task_scores(url), runs)
    acc = tasks.accuracy_curves(scores)
    task_tables = {name: tasks.accuracy_wide(acc[acc["task"] == name]) for name in dict.fromkeys(acc["task"])}
    shown = runs[runs["status"].isin([JobStatus.RUNNING, JobStatus.SUCCEEDED])]
    points = frames.curves(url, tuple(int(i) for i in shown["job_id"]), (CURVE_KEY,))
    points = points.merge(shown[["job_id", "variant_label", "seed"]], on="job_id")
    study, scaling_note = _scaling(done)
    return StudyData(
        url=url,
        grids=picked,
        code_version=code_version(),
        runs=runs,
        done=done,
        reference=reference,
        noise=noise,
        iso_data=iso,
        iso_matrix=comparison.iso_data_matrix(iso).reset_index(),
        data_fits=fit_table,
        iso_flop=comparison.iso_flop_table(evals, reference=reference, noise=noise)
        if not flop.empty
        else flop,
        iso_flop_curve=flop,
        iso_time=comparison.iso_time_summary(pairs, noise=noise) if not pairs.empty else pairs,
        iso_time_pairs=pairs,
        throughput=comparison.throughput_table(done, reference=reference),
        depth_curves=by_loops,
        depth_wide=curves.depth_wide(by_loops),
        round_deltas=curves.round_delta_curves(deltas, loops=most) if most else deltas,
        extrapolation=extrapolation.summary(extrapolation.loss_curves(sweeps)),
        decode=timing.mark_decode(comparison.decode_table(dec, reference=dec_ref), dec)
        if not dec.empty
        else dec,
        task_tables=task_tables,
        curves=points,
        scorecards=_scorecards(url, done, depth),
        scaling=study,
        scaling_note=scaling_note,
    )


def grid_specs(data: StudyData) -> list[tuple[str, str]]:
    """(grid name, its stored spec as indented JSON) per grid of the report."""
    return [
        (r.name, json.dumps(json.loads(r.spec), indent=1, sort_keys=True)) for r in data.grids.itertuples()
    ]
