"""Which rows of a frame are seeds of one configuration, and the architecture a researcher filters and
plots by.

A *variant* is recipe + size + the model overrides that differ from the recipe's preset; the queue
stores its id (`variant_id`, 12 hex digits) and a label for people (`variant_label`, e.g.
`fixed4 · loops=8 · d_model=192`) with every job. Seeds of one variant are averaged; two variants of
one recipe never are. A frame without variant columns (a hand-built one, or rows stored before
variants existed) falls back to one variant per recipe, so nothing is averaged across recipes either.

Which runs are averaged together is one rule, used by every page and analysis module (`GROUP_COLUMNS`,
`with_groups`, `group_aggregate`): the same variant at the same size and the same budget. Runs of one
variant at different budgets (a 1M-token run and its iso-time retraining, whose budget is "the time of
run #N") are never pooled: where a frame holds several budgets, each group is its own series, its
label the variant's with the budget appended (`parcae · time of #1`), so Compare, Depth, Extrapolation
and the rest show the same mean and n for the same variant at the same budget.

A configuration is everything that defines a run except its seed (`CONFIG_COLUMNS`); `seed_aggregate`
gives the mean, spread and count over its seeds. A missing value is shown as `MISSING` and tested with
`present`, never replaced by 0.

Pure pandas, no Streamlit, no database: the other analysis modules and the pages call these.
"""

from __future__ import annotations

import math

import pandas as pd

from looplab.model.names import LOOPED_ARCH_COLUMNS

MISSING = "—"
VARIANT_COLUMNS = ("variant_id", "variant_label")
# columns that identify a configuration; the seed is deliberately not one of them
CONFIG_COLUMNS = ("grid", "variant_id", "variant_label", "recipe", "size", "budget_tokens", "budget_time_s")
BUDGET = "budget"  # a run's budget as a label ('61.44k tokens', 'time of #1'): `budget_labels`
# what a listing of runs (the Runs page's table, the report's) opens with: which run, of what, and its state
RUN_KEYS = ("job_id", "grid", "variant_label", "recipe", "size", "seed", BUDGET, "status")
# the rule of which runs' values are averaged together (over seeds): one variant, one size, one budget
GROUP_COLUMNS = ("variant_id", "size", BUDGET)
# The resolved architecture of a run, as `orchestrator.frames` names the columns (the trained loop count is
# `train_loops`: the stored `loops`, or the sampler's mean for sampled recipes).
ARCH_COLUMNS = (
    *LOOPED_ARCH_COLUMNS[:3],
    "train_loops",
    *LOOPED_ARCH_COLUMNS[3:6],
    "n_params",
    *LOOPED_ARCH_COLUMNS[6:],
)
ARCH_LABELS = {
    "n_prelude": "prelude layers",
    "n_recurrent": "recurrent layers",
    "n_coda": "coda layers",
    "train_loops": "loops (trained)",
    "effective_depth": "effective depth",
    "d_model": "d_model",
    "injection": "injection",
    "n_params": "parameters",
    "n_once": "N_once",
    "n_rec": "N_rec",
    "variant_label": "variant",
    "recipe": "recipe",
    "size": "size",
    "train_flops": "training FLOPs",
    "flops_per_token": "FLOPs per token",
}


def with_variants(df: pd.DataFrame, name: str = "recipe") -> pd.DataFrame:
    """`df` with `variant_id` and `variant_label` on every row.

    A row without a variant takes the value of its `name` column (the recipe, or a decode bench's
    `arch`) as both id and label. A label that two variants of one size share (two grid labels that
    collide) gets the id's first six characters appended, so a table keyed by label stays one row per
    variant.
    """
    out = df.copy()
    fallback = out[name] if name in out.columns else pd.Series(MISSING, index=out.index, dtype=object)
    for col in VARIANT_COLUMNS:
        current = out[col] if col in out.columns else pd.Series(None, index=out.index, dtype=object)
        out[col] = current.astype(object).where(current.notna(), fallback.astype(object))
    if out.empty:
        return out
    scope = ["size", "variant_label"] if "size" in out.columns else ["variant_label"]
    shared = out.groupby(scope, dropna=False)["variant_id"].transform("nunique") > 1
    if shared.any():
        out.loc[shared, "variant_label"] = [
            f"{label} ({str(vid)[:6]})"
            for label, vid in zip(out.loc[shared, "variant_label"], out.loc[shared, "variant_id"])
        ]
    return out


def variant_info(df: pd.DataFrame, name: str = "recipe") -> pd.DataFrame:
    """One row per variant (index `variant_id`): its label, recipe, size and architecture columns
    (the first non-missing value of each among the variant's rows)."""
    df = with_variants(df, name)
    cols = [c for c in ("variant_label", name, "size", *ARCH_COLUMNS, "flops_per_token") if c in df.columns]
    cols = list(dict.fromkeys(cols))
    if df.empty:
        return pd.DataFrame(columns=cols, index=pd.Index([], name="variant_id"))
    return df.groupby("variant_id", dropna=False)[cols].first()


def arch_options(runs: pd.DataFrame) -> dict[str, list]:
    """The architecture columns worth filtering by (present, with at least two distinct values) and
    their values, sorted; numbers that are whole come back as int."""
    out = {}
    for col in ARCH_COLUMNS:
        if col not in runs.columns:
            continue
        values = runs[col].dropna().unique().tolist()
        if len(values) < 2:
            continue
        out[col] = sorted(_plain(v) for v in values) if _numeric(values) else sorted(map(str, values))
    return out


def _numeric(values: list) -> bool:
    return all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)


def _plain(v):
    """A numpy or float scalar as the plain Python number a person reads (8.0 -> 8)."""
    v = float(v)
    return int(v) if v.is_integer() else v


def filter_arch(runs: pd.DataFrame, chosen: dict[str, list]) -> pd.DataFrame:
    """Rows whose architecture value is among the chosen ones, per column; an empty choice keeps all.

    Raises ValueError naming a column that is not an architecture column of the frame.
    """
    keep = pd.Series(True, index=runs.index)
    for col, values in chosen.items():
        if col not in ARCH_COLUMNS or col not in runs.columns:
            raise ValueError(
                f"architecture filter {col!r}: not a column of the runs; accepted: "
                f"{', '.join(c for c in ARCH_COLUMNS if c in runs.columns)}"
            )
        if values:
            keep &= runs[col].isin(list(values))
    return runs[keep]


def plot_columns(df: pd.DataFrame, extra: tuple[str, ...] = ()) -> list[str]:
    """Columns a chart can use as its x axis or colour: the variant, recipe, size, the architecture
    columns present with a value, then `extra` ones present."""
    base = ["variant_label", "recipe", "size", *ARCH_COLUMNS, *extra]
    return [c for c in dict.fromkeys(base) if c in df.columns and df[c].notna().any()]


def present(x) -> bool:
    """False for a missing value (None, NaN, pd.NA): missing data stays missing, never 0."""
    return x is not None and not (isinstance(x, float) and math.isnan(x)) and x is not pd.NA


# ---------------------------------------------------------------- seeds of one configuration


def config_columns(df: pd.DataFrame) -> list[str]:
    """The configuration columns present in `df` (everything that defines a run except its seed)."""
    return [c for c in CONFIG_COLUMNS if c in df.columns]


def seed_aggregate(df: pd.DataFrame, value: str, by: list[str] | None = None) -> pd.DataFrame:
    """Mean, std, min, max and count over seeds of `value`, one row per configuration.

    `by` defaults to the configuration columns present. `n_seeds` counts non-missing values, and
    std needs two of them (one seed gives NaN, not 0).
    """
    by = list(by) if by is not None else config_columns(df)
    if "seed" in by:
        raise ValueError("seed_aggregate groups over seeds; 'seed' cannot be a grouping column")
    if df.empty:
        return pd.DataFrame(columns=[*by, "mean", "std", "min", "max", "n_seeds"])
    out = df.groupby(by, dropna=False, sort=True)[value].agg(["mean", "std", "min", "max", "count"])
    return out.reset_index().rename(columns={"count": "n_seeds"})


def human_count(n: float) -> str:
    """A count in the unit a person reads: 512, 61.44k, 2.5M, 1B, 3T. Six significant digits at most,
    as before units were chosen: budget labels are grouping keys, and two budgets must not share one."""
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:g}{unit}"
    return f"{n:g}"


def budget_labels(runs: pd.DataFrame) -> list[str]:
    """A short label per run for its budget: '2M tokens', '61.44k tokens', '3e+15 FLOPs', '60 s', or
    'time of #12'."""
    out = []
    for r in runs.itertuples(index=False):
        ref = getattr(r, "match_time_of", None)
        if present(ref):
            out.append(f"time of #{int(ref)}")
        elif present(getattr(r, "budget_flops", None)):
            out.append(f"{r.budget_flops:.3g} FLOPs")
        elif present(getattr(r, "budget_tokens", None)):
            out.append(f"{human_count(r.budget_tokens)} tokens")
        elif present(getattr(r, "budget_time_s", None)):
            out.append(f"{r.budget_time_s:g} s")
        else:
            out.append(MISSING)
    return out


# ---------------------------------------------------------------- one rule for what is averaged


def with_budget(df: pd.DataFrame) -> pd.DataFrame:
    """`df` with a `budget` label per row (`budget_labels`); kept as it is where the frame has one."""
    if BUDGET in df.columns:
        return df
    out = df.copy()
    out[BUDGET] = budget_labels(out) if not out.empty else pd.Series(dtype=object)
    return out


def with_groups(df: pd.DataFrame, name: str = "recipe") -> pd.DataFrame:
    """`df` with variant columns, `budget`, and `group` (the series a chart draws and a table lists):
    the variant's label, with the budget appended when the frame holds more than one budget, so two
    budgets of one variant are two series, never one line through both."""
    out = with_budget(with_variants(df, name))
    if out.empty:
        return out.assign(group=pd.Series(dtype=object))
    several = out[BUDGET].nunique(dropna=False) > 1
    out["group"] = [
        f"{label} · {budget}" if several else label
        for label, budget in zip(out["variant_label"], out[BUDGET])
    ]
    return out


def labelled_by_group(df: pd.DataFrame, name: str = "recipe") -> pd.DataFrame:
    """`with_groups`, its `variant_label` the group's label: for code that keys series by the label."""
    return with_groups(df, name).assign(variant_label=lambda d: d["group"]).drop(columns="group")


def group_aggregate(df: pd.DataFrame, value: str, by: list[str] | tuple[str, ...] = (), name: str = "recipe"):
    """`seed_aggregate` of `value` over the seeds of each group (`GROUP_COLUMNS`) and `by`, with the
    variant's recipe and architecture columns alongside; `variant_label` is the group's label (`group`:
    the variant's, with the budget where the frame holds several), so a chart or table keyed by it has
    one series per variant and budget."""
    df = with_groups(df, name)
    keys = [c for c in GROUP_COLUMNS if c in df.columns]
    agg = seed_aggregate(df, value, by=[*keys, *by])
    info = variant_info(df, name).drop(columns=[*keys, *by], errors="ignore").reset_index()
    labels = (
        df.drop_duplicates(keys)[[*keys, "group"]] if not df.empty else pd.DataFrame(columns=[*keys, "group"])
    )
    out = agg.merge(info.drop(columns="variant_label", errors="ignore"), on="variant_id", how="left")
    for key in keys:  # a key with no value (the size of a family stating its own shape) may read as float
        if out[key].dtype != labels[key].dtype:
            out, labels = out.astype({key: object}), labels.astype({key: object})
    return out.merge(labels, on=keys, how="left").rename(columns={"group": "variant_label"})
