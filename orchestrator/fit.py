"""`looplab fit iso-depth`: the study's scaling law fitted to the finished runs of a database, printed.

Declared in orchestrator/cli.py; it lives here because the fit (`dashboard.scaling`) is the dashboard's
and the orchestrator does not import the dashboard. Reads the `runs` view read-only (final_val_loss,
n_once, n_rec, loops = r, tokens, d_model, flops_per_token), so it can run while the queue runs.
"""

from __future__ import annotations

import json

import pandas as pd
from sqlalchemy import text

from dashboard import data, scaling
from orchestrator.db import resolve_url
from orchestrator.errors import ConfigError

ISO_DEPTH_RECIPE = "iso_depth"


def study_runs(url: str, grid: str | None = None) -> pd.DataFrame:
    """The runs the fit reads: one grid's (any fixed-loop recipe), else every run of recipe iso_depth."""
    with data.engine(url).connect() as conn:
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
            "(orchestrator.studies.iso_depth_grid, or `looplab demo --study iso-depth`), or pick runs with --grid"
        )
    return chosen


def cli_fit(args) -> int:
    url = resolve_url(args.db)
    runs = scaling.runs_for_fit(study_runs(url, args.grid))
    if runs.empty:
        raise ConfigError("fit: none of the selected runs has finished (succeeded, with a fixed loop count)")
    study = scaling.fit_iso_depth(
        runs, flops=args.flops, bootstrap=args.bootstrap, seed=args.seed, robust=args.robust
    )
    print(json.dumps(scaling.report_json(study), indent=1) if args.json else scaling.report_text(study))
    return 0
