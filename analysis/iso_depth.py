"""What the iso-depth scaling law says, from the finished runs of a results database to a report.

Derived answers (`fit_iso_depth` puts them together): the effective parameters N_once + r^φ N_rec per
run; per r, "one recurrence is worth r^φ blocks" with its interval; and at a chosen FLOP budget C the
compute-optimal width and tokens per r, found by minimising the fitted L over the width with
D = C / FLOPs-per-token(width). FLOPs per token, N_once and N_rec of a family member are exact
quadratics a·d² + b·d in the width d for a fixed r, vocabulary and sequence length (every term of the
FLOP model is a matmul with a d-sized side or attention over d channels), so they are read off the
runs' own values (the FLOP model's, stored at submission) at two or more widths per r. The loss gap to
r = 1 at equal compute is the difference of the two compute-optimal losses; every derived number has
its interval from the same bootstrap draws.

The law and its fit are `analysis/scaling.py`; `runs_for_fit` turns a runs table (the `runs` view, or
`orchestrator.frames.runs`) into the fit's input, and `report_text` / `report_json` are what
`looplab fit iso-depth` prints (lab/fit.py). Pure: no Streamlit, no database.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from looplab.analysis.scaling import PARAMS, LawFit, compare_forms, fit_law
from looplab.model import fields
from looplab.model.errors import ConfigError
from looplab.model.presets import (
    ISO_DEPTH_RECIPE as ISO_DEPTH_RECIPE,  # re-exported: the pages may not import model
)

_WIDTH_POINTS = 600  # candidate widths of the compute-optimal search (log-spaced)


# ---------------------------------------------------------------- derived answers


def recurrence_worth(fit: LawFit, rs: Sequence[float] | None = None) -> pd.DataFrame:
    """Per r: one block looped r times is worth r^φ distinct blocks (with its interval) while it costs r
    block applications; `per_flop` = r^φ / r."""
    rs = sorted({float(r) for r in (rs if rs is not None else fit.table["r"])})
    phis = fit.draws[:, PARAMS.index("phi")] if len(fit.draws) else np.array([])
    tail = (1 - fit.confidence) / 2
    rows = []
    for r in rs:
        worth = r**fit.phi
        if len(phis) >= 2:
            lo, hi = np.quantile(r**phis, [tail, 1 - tail])
        else:
            lo = hi = math.nan
        rows.append(
            {
                "r": int(r) if r.is_integer() else r,
                "blocks": worth,
                "lo": float(lo),
                "hi": float(hi),
                "cost_blocks": r,
                "per_flop": worth / r,
            }
        )
    return pd.DataFrame(rows)


def _quadratic(widths: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Least-squares (a, b) of values = a·d² + b·d (exact for the FLOP model and the parameter counts)."""
    design = np.stack([widths**2, widths], axis=1)
    return np.linalg.lstsq(design, values, rcond=None)[0]


def width_model(runs: pd.DataFrame) -> dict[float, dict[str, np.ndarray]]:
    """Per r with runs at two or more widths: the (a, b) of flops_per_token, n_once and n_rec as
    a·d² + b·d in d_model, read off the runs' own values."""
    out = {}
    for r, group in runs.groupby("r"):
        group = group.drop_duplicates("d_model")
        if len(group) < 2:
            continue
        widths = group["d_model"].to_numpy(float)
        out[float(r)] = {
            c: _quadratic(widths, group[c].to_numpy(float)) for c in ("flops_per_token", "n_once", "n_rec")
        }
    return out


def _loss_grid(
    rows: np.ndarray, n_once: np.ndarray, n_rec: np.ndarray, r: float, tokens: np.ndarray
) -> np.ndarray:
    """The law for every parameter row (M, 6) at every candidate (G,) -> (M, G)."""
    e, a, alpha, b, beta, phi = (rows[:, [j]] for j in range(len(PARAMS)))  # each (M, 1)
    n_eff = n_once[None, :] + r**phi * n_rec[None, :]  # (M, G)
    return e + np.exp(np.log(a) - alpha * np.log(n_eff)) + np.exp(np.log(b) - beta * np.log(tokens)[None, :])


def _interval(values: np.ndarray, confidence: float) -> tuple[float, float]:
    if len(values) < 2:
        return math.nan, math.nan
    tail = (1 - confidence) / 2
    lo, hi = np.quantile(values, [tail, 1 - tail])
    return float(lo), float(hi)


def optimal_draws(
    fit: LawFit, flops: float, width_range: tuple[float, float] | None = None
) -> dict[float, dict[str, np.ndarray]]:
    """At a budget of `flops` training FLOPs, per r: the compute-optimal `width`, `tokens`,
    `unique_params`, `loss` and `gap` (to r = 1's compute-optimal loss; NaN without r = 1), each an array
    whose entry 0 is the estimate's and the rest one per bootstrap draw, every draw re-optimised, and
    `at_edge` (the estimate's optimum on the search's boundary). A figure derived from several r (a
    trend over r) takes its interval from these draws jointly. The search runs over `width_range`
    (default: a quarter of the narrowest to 4x the widest width trained). Needs columns d_model and
    flops_per_token, two widths per r."""
    fields.number("flops", flops, lo=0.0, lo_open=True)
    missing = [c for c in ("d_model", "flops_per_token") if c not in fit.table]
    if missing:
        raise ConfigError(
            f"runs: missing column(s) {', '.join(missing)} (needed for the compute-optimal width)"
        )
    if width_range is None:
        width_range = (fit.table["d_model"].min() / 4, fit.table["d_model"].max() * 4)
    widths = np.geomspace(float(width_range[0]), float(width_range[1]), _WIDTH_POINTS)  # (G,)
    rows = np.vstack([[fit.params[k] for k in PARAMS], fit.draws])  # row 0: the estimate, then the draws
    found: dict[float, dict[str, np.ndarray]] = {}
    for r, coef in width_model(fit.table).items():
        per_token, n_once, n_rec = (
            coef[c][0] * widths**2 + coef[c][1] * widths for c in ("flops_per_token", "n_once", "n_rec")
        )
        valid = (per_token > 0) & (n_rec > 0) & (n_once >= 0)
        if not valid.any():
            continue
        w, per_token, n_once, n_rec = widths[valid], per_token[valid], n_once[valid], n_rec[valid]
        tokens = flops / per_token
        loss = _loss_grid(rows, n_once, n_rec, r, tokens)  # (1 + draws, G)
        best = np.argmin(loss, axis=1)
        found[r] = {
            "width": w[best],
            "tokens": tokens[best],
            "unique_params": (n_once + n_rec)[best],
            "loss": loss[np.arange(len(best)), best],
            "at_edge": np.array([best[0] in (0, len(w) - 1)]),
        }
    reference = found.get(1.0)
    for f in found.values():
        f["gap"] = f["loss"] - reference["loss"] if reference is not None else np.full_like(f["loss"], np.nan)
    return found


def compute_optimal(
    fit: LawFit, flops: float, width_range: tuple[float, float] | None = None
) -> pd.DataFrame:
    """At a budget of `flops` training FLOPs, per r: the width d and tokens D = flops / FLOPs-per-token(d)
    that minimise the fitted loss, the loss there, and its gap to r = 1's compute-optimal loss, each with
    its bootstrap interval (`optimal_draws`). `at_edge` flags an optimum on the search's boundary (the
    range does not contain the optimum)."""
    out = []
    for r, f in sorted(optimal_draws(fit, flops, width_range).items()):
        row = {
            "r": int(r) if r.is_integer() else r,
            "flops": float(flops),
            "d_model": float(f["width"][0]),
            "tokens": float(f["tokens"][0]),
            "n_params": float(f["unique_params"][0]),
            "loss": float(f["loss"][0]),
        }
        row["d_model_lo"], row["d_model_hi"] = _interval(f["width"][1:], fit.confidence)
        row["tokens_lo"], row["tokens_hi"] = _interval(f["tokens"][1:], fit.confidence)
        row["loss_lo"], row["loss_hi"] = _interval(f["loss"][1:], fit.confidence)
        row["gap_to_r1"] = float(f["gap"][0])
        row["gap_lo"], row["gap_hi"] = (
            _interval(f["gap"][1:], fit.confidence)
            if math.isfinite(row["gap_to_r1"])
            else (math.nan, math.nan)
        )
        row["at_edge"] = bool(f["at_edge"][0])
        out.append(row)
    return pd.DataFrame(out)


# ---------------------------------------------------------------- from the results database to a report


def runs_for_fit(runs: pd.DataFrame) -> pd.DataFrame:
    """The fixed-loop runs with a result of a runs table (the `runs` view, or `orchestrator.frames.runs`)
    in the shape `fit_law` reads: loss = final validation loss, r = the trained loop count, n_once, n_rec,
    tokens trained; with job_id, grid, variant_label, seed, d_model, flops_per_token, flops (= FLOPs per
    token × tokens) and budget_flops when the table has them. Runs with a sampled loop count are left
    out: their loop count is a mean, not an r. The caller passes the finished runs (their status is a
    job state, `orchestrator.states`): a run that failed after reporting a loss is no result."""
    loops = "train_loops" if "train_loops" in runs else "loops"
    needed = ["final_val_loss", loops, "n_once", "n_rec", "tokens"]
    missing = [c for c in needed if c not in runs]
    if missing:
        raise ConfigError(f"runs: missing column(s) {', '.join(missing)}; read the runs view")
    keep = pd.Series(True, index=runs.index)
    if "loop_mode" in runs:
        keep &= runs["loop_mode"].isin(["fixed", "none"])
    elif "loop_sampler" in runs:
        keep &= runs["loop_sampler"] == "fixed"
    for column in needed:
        keep &= runs[column].notna()
    chosen = runs[keep]
    out = pd.DataFrame(
        {
            "job_id": chosen["job_id"] if "job_id" in chosen else range(len(chosen)),
            "loss": chosen["final_val_loss"].astype(float),
            "r": chosen[loops].astype(int),
            "n_once": chosen["n_once"].astype(float),
            "n_rec": chosen["n_rec"].astype(float),
            "tokens": chosen["tokens"].astype(float),
        }
    )
    for column in ("grid", "variant_label", "seed", "d_model", "flops_per_token", "budget_flops"):
        if column in chosen:
            out[column] = chosen[column]
    if "flops_per_token" in out:
        out["flops"] = out["flops_per_token"].astype(float) * out["tokens"]
    return out.reset_index(drop=True)


@dataclasses.dataclass(frozen=True)
class IsoDepthStudy:
    """Everything the study reports: the fit (φ free) with its intervals and residuals, the three forms
    compared, what one recurrence is worth per r, and the compute-optimal width and tokens per r at
    `flops` (None without widths and FLOPs per token in the runs)."""

    fit: LawFit
    forms: pd.DataFrame
    worth: pd.DataFrame
    optimal: pd.DataFrame | None
    flops: float | None


def default_budget(runs: pd.DataFrame) -> float | None:
    """The budget the compute-optimal answers are given at by default: the largest FLOP budget the runs
    were given, else the most FLOPs a run spent."""
    for column in ("budget_flops", "flops"):
        if column in runs and runs[column].notna().any():
            return float(runs[column].max())
    return None


def fit_iso_depth(runs: pd.DataFrame, *, flops: float | None = None, **fit_options) -> IsoDepthStudy:
    """The whole study from `runs_for_fit`'s table: `fit_law` (with `fit_options`: bootstrap, seed,
    robust, f_scale), `compare_forms`, `recurrence_worth` and `compute_optimal` at `flops` (default:
    `default_budget`)."""
    fit = fit_law(runs, **fit_options)
    robust = fit_options.get("robust", "linear")
    forms = compare_forms(runs, robust=robust, f_scale=fit.f_scale if robust != "linear" else None)
    budget = default_budget(runs) if flops is None else flops
    optimal = None
    if budget is not None and {"d_model", "flops_per_token"} <= set(runs.columns):
        optimal = compute_optimal(fit, budget)
    return IsoDepthStudy(fit, forms, recurrence_worth(fit), optimal, budget)


def _fmt(value: float) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    return f"{value:.4g}" if abs(value) < 1e5 else f"{value:.3e}"


def _span(lo: float, hi: float) -> str:
    return f"[{_fmt(lo)}, {_fmt(hi)}]"


def report_text(study: IsoDepthStudy) -> str:
    """The study as the command line prints it."""
    fit = study.fit
    rs = ", ".join(str(int(r)) for r in sorted(fit.table["r"].unique()))
    pct = f"{fit.confidence:.0%}"
    lines = [
        f"iso-depth scaling law: {fit.n_runs} runs, r in {{{rs}}}; {pct} intervals from {fit.n_bootstrap_fitted} "
        f"bootstrap resamples over runs (of {fit.n_bootstrap}, seed {fit.seed}); loss {fit.robust}",
        "  L = E + A * (N_once + r^phi * N_rec)^(-alpha) + B * D^(-beta)   (N: parameters, D: tokens)",
        "",
        f"  {'parameter':<10} {'estimate':>11}  {pct} interval",
    ]
    for k in PARAMS:
        edge = "  (at the edge of its range: not identified by these runs)" if k in fit.at_bound else ""
        lines.append(f"  {k:<10} {_fmt(fit.params[k]):>11}  {_span(*fit.intervals[k])}{edge}")
    lines.append(f"  R^2 {fit.r2:.4f}   RMSE {fit.rmse:.4g}")
    lines += ["", "forms (supported: lowest leave-one-run-out RMSE; AIC for reference):"]
    for row in study.forms.itertuples():
        mark = "  <- supported" if row.supported else ""
        lines.append(
            f"  {row.form:<6} phi {_fmt(row.phi):>7}  RMSE {row.rmse:.4g}  LOO RMSE {row.loo_rmse:.4g}  "
            f"AIC {row.aic:.1f}{mark}"
        )
    lines += ["", "one recurrence is worth r^phi distinct blocks (at a compute cost of r):"]
    for row in study.worth.itertuples():
        lines.append(
            f"  r={row.r:<3} {_fmt(row.blocks):>7} blocks {_span(row.lo, row.hi)}   per FLOP {row.per_flop:.3f}"
        )
    if study.optimal is not None and not study.optimal.empty:
        lines += [
            "",
            f"compute-optimal at C = {study.flops:.3g} training FLOPs (loss gap to r=1 at equal compute):",
        ]
        for row in study.optimal.itertuples():
            edge = "  (width range edge)" if row.at_edge else ""
            lines.append(
                f"  r={row.r:<3} d_model {row.d_model:7.1f} {_span(row.d_model_lo, row.d_model_hi)}  "
                f"tokens {row.tokens:.3g} {_span(row.tokens_lo, row.tokens_hi)}  loss {row.loss:.4f}  "
                f"gap {row.gap_to_r1:+.4f} {_span(row.gap_lo, row.gap_hi)}{edge}"
            )
    lines += ["", "per run (residual = observed - fitted):"]
    columns = [
        c
        for c in ("job_id", "r", "d_model", "tokens", "n_eff", "loss", "predicted", "residual")
        if c in fit.table
    ]
    with pd.option_context("display.width", 160, "display.precision", 4):
        lines.append(fit.table[columns].to_string(index=False))
    return "\n".join(lines)


def report_json(study: IsoDepthStudy) -> dict:
    """The study as plain JSON values (`looplab fit iso-depth --json`)."""
    fit = study.fit

    def records(df: pd.DataFrame | None) -> list[dict]:
        if df is None:
            return []
        return [{k: _plain(v) for k, v in row.items()} for row in df.to_dict(orient="records")]

    return {
        "law": "L = E + A*(N_once + r^phi*N_rec)^(-alpha) + B*D^(-beta)",
        "params": {k: fit.params[k] for k in PARAMS},
        "intervals": {k: [_plain(v) for v in fit.intervals[k]] for k in PARAMS},
        "confidence": fit.confidence,
        "r2": fit.r2,
        "rmse": fit.rmse,
        "n_runs": fit.n_runs,
        "bootstrap": fit.n_bootstrap,
        "bootstrap_fitted": fit.n_bootstrap_fitted,
        "seed": fit.seed,
        "robust": fit.robust,
        "at_bound": list(fit.at_bound),
        "forms": records(study.forms),
        "worth": records(study.worth),
        "budget_flops": study.flops,
        "compute_optimal": records(study.optimal),
        "runs": records(fit.table),
    }


def _plain(value):
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
