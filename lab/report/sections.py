"""The report's sections in reading order, as blocks both renderers draw (HTML with inline SVG charts,
Markdown with the same tables): what was run (grids, configs, code version), the findings when the
runs are the lean-recipe study, the comparisons at equal data, compute and time with their intervals and
verdicts, depth curves, loop geometry, decode, the scaling-law fit, task scores and throughput.

`cell` is how a value is shown in both (a missing value as "—", counts without decimals, FLOPs in
scientific notation, times in UTC); the HTML also carries each value as it was computed.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from looplab.analysis.comparison import NOISE_THRESHOLD
from looplab.analysis.variants import MISSING, RUN_KEYS
from looplab.lab.report.content import CURVE_KEY, StudyData, grid_specs
from looplab.lab.report.svg import LineChart, Series
from looplab.orchestrator.db import display_url

RUN_COLUMNS = [
    *RUN_KEYS,
    "tokens",
    "train_seconds",
    "tokens_per_s",
    "final_val_loss",
    "loop_mode",
    "train_loops",
    "effective_depth",
    "d_model",
    "n_params",
    "flops_per_token",
    "train_flops",
    "variant_id",
]
ROUND_COLUMNS = [
    "variant_label",
    "size",
    "loops",
    "round",
    "mean",
    "std",
    "min",
    "max",
    "n_seeds",
    "variant_id",
]


@dataclass
class Table:
    name: str  # stable id: the HTML table's data-name
    frame: pd.DataFrame
    caption: str = ""


@dataclass
class Section:
    title: str
    text: list[str] = field(default_factory=list)
    blocks: list = field(
        default_factory=list
    )  # Table | LineChart | tuple[str, str] (a code block: title, text)


def _integral(values: pd.Series) -> bool:
    v = pd.to_numeric(values, errors="coerce").dropna()
    return not v.empty and bool(np.all(np.mod(v.to_numpy(dtype=float), 1) == 0))


def column_kinds(frame: pd.DataFrame) -> dict[str, str]:
    """How each column is shown: "int" (every value whole), "sci", "time" (`*_at`), "float" (4 decimals)
    or "text"."""
    kinds = {}
    for c in frame.columns:
        s = frame[c]
        name = str(c)
        if pd.api.types.is_bool_dtype(s) or not pd.api.types.is_numeric_dtype(s):
            kinds[c] = "text"
        elif name.endswith("_at"):
            kinds[c] = "time"
        elif "flops" in name or not _integral(s) and not 1e-3 <= (s.abs().max() or 1) < 1e7:
            kinds[c] = "sci"  # FLOPs, and columns of only tiny or only huge values
        elif _integral(s):
            kinds[c] = "int"
        else:
            kinds[c] = "float"
    return kinds


def missing(value) -> bool:
    if value is None or value is pd.NA or value is pd.NaT:
        return True
    return isinstance(value, float | np.floating) and math.isnan(value)


def cell(value, kind: str) -> str:
    """A value as a person reads it in a report table."""
    if missing(value):
        return MISSING
    if kind == "time":
        return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(value)))
    if kind == "int":
        return f"{float(value):,.0f}"
    if kind == "sci":
        return f"{float(value):.3e}"
    if kind == "float":
        return f"{float(value):,.4f}"
    return str(value)


def _series(frame: pd.DataFrame, by: str, x: str, y: str = "mean", band: bool = True) -> list[Series]:
    out = []
    for name, part in frame.groupby(by, sort=True):
        part = part.sort_values(x)
        lo = list(part["min"]) if band and "min" in part else None
        hi = list(part["max"]) if band and "max" in part else None
        out.append(Series(str(name), list(part[x].astype(float)), list(part[y].astype(float)), lo, hi))
    return out


def sections(data: StudyData) -> list[Section]:
    """Every section of the report on `data`, in reading order."""
    return [
        _about(data),
        _runs(data),
        *_scorecards(data),
        _iso_data(data),
        _iso_flop(data),
        _iso_time(data),
        _depth(data),
        _geometry(data),
        _decode(data),
        _scaling(data),
        _tasks(data),
        Section(
            "Training throughput",
            [f"Tokens per second per variant; ratio to `{data.reference}`."],
            [Table("throughput", data.throughput)],
        ),
    ]


def _about(data: StudyData) -> Section:
    counts = data.runs["status"].value_counts().to_dict()
    status = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "none"
    text = [
        f"Grids: {', '.join(data.grids['name'])} (ids {', '.join(str(i) for i in data.grids['id'])}); "
        f"database `{display_url(data.url)}`.",
        f"Training runs: {len(data.runs)} ({status}). Every comparison reads the succeeded ones.",
        f"Code version (of the checkout that wrote this report; the runs do not record theirs): "
        f"`{data.code_version}`. Written {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        "Every number comes from the functions of the dashboard's pages (`analysis/`) with their defaults: "
        f"reference variant `{data.reference}`, 95 % intervals, verdicts read off the intervals.",
    ]
    return Section(
        "Study", text, [(f"grid {name}: configuration as submitted", spec) for name, spec in grid_specs(data)]
    )


def _runs(data: StudyData) -> Section:
    cols = [c for c in RUN_COLUMNS if c in data.runs.columns]
    pts = data.curves
    series = [
        Series(
            f"{label} · seed {int(seed) if not missing(seed) else '?'} · #{job}",
            list(part["tokens"].astype(float)),
            list(part["value"].astype(float)),
        )
        for (job, label, seed), part in pts.groupby(["job_id", "variant_label", "seed"], dropna=False)
    ]
    chart = LineChart(f"{CURVE_KEY} during training", "tokens", CURVE_KEY, series, points=False)
    return Section(
        "Runs",
        ["One row per training run; the configuration each variant differs by is in its label."],
        [Table("runs", data.runs[cols]), chart],
    )


# each study as the scorecard's heading names it
STUDY_NAMES = {
    "lean": "the lean-recipe study",
    "iso-depth": "the iso-depth study",
    "loop-design": "the loop-design report",
}
REPORT_COLUMNS = [
    "claim",
    "statement",
    "verdict",
    "judged",
    "study_figure",
    "band",
    "study_scale",
    "ours",
    "our_scale",
    "scale_note",
    "premise",
    "reason",
    "stated",
    "contradiction",
]


def _scorecards(data: StudyData) -> list[Section]:
    out = []
    for study, card in data.scorecards.items():
        counts = card["verdict"].value_counts()
        tally = ", ".join(f"{n} {verdict}" for verdict, n in counts.items())
        text = [
            f"Each claim of {STUDY_NAMES.get(study, study)} (the registry, "
            "`analysis/claims_data/`, with the study's own numbers) judged on these runs by the one rule of "
            "`analysis/claims.py`, on sign and size: replicated when the 95 % interval lies on the claimed "
            "side of the line and, for a magnitude, inside the band of the study's figure; contradicted on "
            "the other side or wholly outside the band; not resolved across either edge; not run without the "
            "runs it needs. A share, a ratio or an exponent is judged on size at any scale, a loss "
            "difference on size only at the parameters and tokens the study prints for it, else on sign "
            "only (`judged`, and `scale_note` for why). A study figure computed from its "
            "printed values is marked derived; `stated` and `contradiction` give the study's own summary "
            "and where its text and tables disagree. `looplab claims` prints the same.",
            f"Verdicts: {tally}.",
        ]
        name = "findings" if study == "lean" else f"scorecard_{study.replace('-', '_')}"
        title = f"Scorecard of {STUDY_NAMES.get(study, study)}"
        out.append(Section(title, text, [Table(name, card[REPORT_COLUMNS])]))
    return out


def _iso_data(data: StudyData) -> Section:
    floor = data.noise.describe(NOISE_THRESHOLD)
    text = [
        "Same size and token budget; looped variants with a sampled loop count at the best loop count of their "
        "depth sweep (`best_loops`), fixed-loop ones at their trained count, a plain transformer by its final "
        "validation loss. `diff` = variant − reference with its 95 % interval; `verdict` better / worse when the "
        "interval excludes 0, else not resolved.",
        f"Noise floor: {floor}.",
    ]
    blocks = [
        Table("iso_matrix", data.iso_matrix, "Mean validation loss over seeds (rows: size × tokens)"),
        Table("iso_data", data.iso_data, "Per seed, mean, difference to the reference with its interval"),
        Table("data_fits", data.data_fits, "L(D) = E + B·D^(−β) per variant (needs ≥ 3 token budgets)"),
    ]
    return Section("Iso-data", text, blocks)


def _iso_flop(data: StudyData) -> Section:
    chart = LineChart(
        "loss at equal training compute",
        "training FLOPs",
        "loss (mean over seeds)",
        _series(data.iso_flop_curve, "variant_label", "train_flops"),
        log_x=10,
    )
    text = [
        "Training FLOPs = FLOPs per token × tokens trained; runs of one size within 5 % of each other's FLOPs "
        "are compared, by the loss iso-data uses."
    ]
    return Section("Iso-FLOP", text, [chart, Table("iso_flop", data.iso_flop)])


def _iso_time(data: StudyData) -> Section:
    text = [
        "A run retrained with the wall-clock training time of a reference run (budget `match_time_of`); both "
        "finished their learning-rate decay, so their final losses compare."
    ]
    return Section(
        "Iso-time",
        text,
        [Table("iso_time_summary", data.iso_time), Table("iso_time_pairs", data.iso_time_pairs)],
    )


def _depth(data: StudyData) -> Section:
    chart = LineChart(
        "validation loss vs inference loops",
        "inference loops",
        "val_loss (mean over seeds)",
        _series(data.depth_curves, "variant_label", "loops"),
        log_x=2,
    )
    text = ["Depth sweeps: validation loss at each inference loop count, mean over seeds (band: min–max)."]
    return Section(
        "Depth",
        text,
        [
            chart,
            Table("depth_wide", data.depth_wide),
            Table("extrapolation", data.extrapolation, "At the trained effective depth and beyond"),
        ],
    )


def _geometry(data: StudyData) -> Section:
    rd = data.round_deltas
    loops = int(rd["loops"].max()) if not rd.empty else None
    later = rd[rd["round"] > 1] if not rd.empty else rd
    chart = LineChart(
        f"relative change per round (rounds 2+, {loops} loops)",
        "round",
        "‖h_t − h_{t−1}‖ / ‖h_{t−1}‖",
        _series(later, "variant_label", "round", band=False),
        log_y=True,
    )
    text = [
        "How much each round changes the hidden state, mean over seeds, in the forward with the most loops. "
        "Round 1 is the change from the random initial state (in the table, not the chart)."
    ]
    cols = [c for c in ROUND_COLUMNS if c in rd.columns]
    return Section("Loop geometry", text, [chart, Table("round_deltas", rd[cols] if cols else rd)])


def _decode(data: StudyData) -> Section:
    text = [
        "Per-token latency (median step, p10–p90) and KV-cache size; ratios to the reference variant at the "
        "same size, context, batch, device and dtype. `contended`: timed beside another job."
    ]
    return Section("Decode", text, [Table("decode", data.decode)])


def _scaling(data: StudyData) -> Section:
    study = data.scaling
    if study is None:
        return Section("Scaling law", [data.scaling_note])
    fit = study.fit
    lo, hi = fit.intervals["phi"]
    text = [
        f"L = E + A·(N_once + r^φ·N_rec)^(−α) + B·D^(−β) fitted to {fit.n_runs} runs: φ = {fit.phi:.3f} "
        f"({fit.confidence:.0%} bootstrap interval {lo:.3f}–{hi:.3f}), R² {fit.r2:.4f}, RMSE {fit.rmse:.4f}."
    ]
    blocks = [
        Table("scaling_params", fit.parameter_table()),
        Table("scaling_worth", study.worth),
        Table(
            "scaling_forms",
            study.forms[["form", "phi", "n_params", "rmse", "loo_rmse", "aic", "r2", "supported"]],
        ),
    ]
    if study.optimal is not None and not study.optimal.empty:
        blocks.append(
            Table(
                "scaling_optimal",
                study.optimal,
                f"Compute-optimal width and tokens at {study.flops:.3g} FLOPs",
            )
        )
    return Section("Scaling law", text, blocks)


def _tasks(data: StudyData) -> Section:
    if not data.task_tables:
        return Section("Task scores", ["No task scores in these grids (attach `then=['eval']`)."])
    blocks = [
        Table(f"tasks_{name}", wide, f"{name}: accuracy per inference loop count, seeds pooled")
        for name, wide in data.task_tables.items()
    ]
    return Section("Task scores", ["Multiple-choice accuracy against the inference loop count."], blocks)
