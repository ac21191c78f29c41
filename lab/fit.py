"""`looplab fit iso-depth`: the study's scaling law fitted to the finished runs of a database, printed.

Declared in lab/cli.py; the fit and its report are `analysis.iso_depth`. Reads the `runs` view
read-only (final_val_loss, n_once, n_rec, loops = r, tokens, d_model, flops_per_token), so it can run
while the queue runs.
"""

from __future__ import annotations

import json

import pandas as pd
from sqlalchemy import text

from looplab.analysis import iso_depth
from looplab.model.errors import ConfigError
from looplab.model.presets import ISO_DEPTH_RECIPE
from looplab.orchestrator import frames
from looplab.orchestrator.db import resolve_url
from looplab.orchestrator.states import JobStatus


def study_runs(url: str, grid: str | None = None) -> pd.DataFrame:
    """The runs the fit reads: one grid's (any fixed-loop recipe), else every run of recipe iso_depth."""
    with frames.engine(url).connect() as conn:
        runs = pd.read_sql(text("SELECT * FROM runs ORDER BY job_id"), conn)
    if grid is not None:
        chosen = runs[runs["grid"] == grid]
        if chosen.empty:
            names = ", ".join(sorted({str(g) for g in runs["grid"].dropna()})) or "none"
            raise ConfigError(f"--grid: no runs in grid {grid!r}; grids with runs: {names}")
        return chosen
    chosen = runs[runs["recipe"] == ISO_DEPTH_RECIPE]
    if chosen.empty:
        raise ConfigError(
            "fit: no run of recipe iso_depth in this database; submit the study "
            "(lab.studies.iso_depth_grid, or `looplab demo --study iso-depth`), or pick runs with --grid"
        )
    return chosen


def fit_runs(url: str, grid: str | None = None) -> pd.DataFrame:
    """`study_runs` that succeeded, in the shape the fit reads (`analysis.iso_depth.runs_for_fit`)."""
    runs = study_runs(url, grid)
    return iso_depth.runs_for_fit(runs[runs["status"] == JobStatus.SUCCEEDED])


def cli_fit(args) -> int:
    runs = fit_runs(resolve_url(args.db), args.grid)
    if runs.empty:
        raise ConfigError("fit: none of the selected runs has finished (succeeded, with a fixed loop count)")
    study = iso_depth.fit_iso_depth(
        runs, flops=args.flops, bootstrap=args.bootstrap, seed=args.seed, robust=args.robust
    )
    print(json.dumps(iso_depth.report_json(study), indent=1) if args.json else iso_depth.report_text(study))
    return 0
