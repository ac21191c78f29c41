"""Streamlit pieces every page shares: the database URL, cached loaders, filters, tables.

The loaders wrap `orchestrator.frames` in `st.cache_data(ttl=5)`: a page rerun (a widget change, the
queue's auto-refresh) reuses results for a few seconds instead of querying again, and the data is
never more than a few seconds stale. Filters live in `st.session_state["filters"]`, set once by the
sidebar in `app.py`, so they hold across pages: grid, size, budget, recipe, variant, and every
architecture column with more than one value among the runs (`analysis.variants.arch_options`).
"""

from __future__ import annotations

import os

import pandas as pd
import streamlit as st

from looplab.analysis import comparison, variants
from looplab.analysis.stats import ClaimVerdict, Verdict
from looplab.orchestrator import frames
from looplab.orchestrator.health_view import LINK, events_frame

TTL_S = 5
NO_JOBS = (
    "No jobs yet: submit a grid with `looplab submit grids.py` (or try `looplab demo --fast`), "
    "then start the queue with `looplab run`. This page refreshes on its own."
)
VERDICT_COLORS = {
    Verdict.BETTER: "#d4f4dd",
    Verdict.WORSE: "#fbd9d3",
    Verdict.NOT_RESOLVED: "#eeeeee",
    Verdict.NOISE: "#eeeeee",
    Verdict.REFERENCE: "#dde7f7",
    ClaimVerdict.REPLICATED: "#d4f4dd",
    ClaimVerdict.CONTRADICTED: "#fbd9d3",
    ClaimVerdict.NOT_RUN: "#ffffff",
}
# the same verdicts as line colours on a chart (the cell colours are too pale to draw with)
VERDICT_STROKES = {
    Verdict.BETTER: "#2e9b4f",
    Verdict.WORSE: "#d0503a",
    Verdict.NOT_RESOLVED: "#9a9a9a",
    Verdict.NOISE: "#9a9a9a",
    Verdict.REFERENCE: "#4a78c2",
}


def db_url() -> str:
    """The database: `?db=` query parameter, else $LOOPLAB_DB (set by `looplab dashboard`), else the default.
    Behind the lab's proxy only the dashboard's own: a link must not choose whose database, or role, a
    signed-in person reads."""
    from looplab.dashboard import access
    from looplab.orchestrator.db import resolve_url
    from looplab.orchestrator.errors import ConfigError

    asked = st.query_params.get("db")
    if asked and os.environ.get(access.AUTH_ENV) == "proxy":
        raise ConfigError("?db=: not accepted behind the sign-in proxy; open the page without it")
    return resolve_url(asked or os.environ.get("LOOPLAB_DB") or None)


@st.cache_data(ttl=30, show_spinner=False)
def person_url(url: str, user: str) -> str:
    """`access.person_url`, asked again after 30 s (the Queue page reruns every few seconds; a refusal,
    an exception, is never cached)."""
    from looplab.dashboard import access

    return access.person_url(url, user)


def open_db(user: str | None = None) -> str | None:
    """The URL if the database opens read-only (as signed-in `user`'s role: dashboard/access.py);
    otherwise explains why on the page and returns None."""
    from sqlalchemy.exc import DBAPIError

    from looplab.dashboard import access
    from looplab.orchestrator.db import describe_error
    from looplab.orchestrator.errors import USER_ERRORS

    url = None
    try:
        url = db_url()
        if user:
            url = person_url(url, user)
        frames.engine(url)
    except access.NoRole as e:
        st.error(f"Signed in as {user}: {e}")
        return None
    except USER_ERRORS as e:
        st.error(f"Cannot open the results database: {e}")
        st.caption("Pass `--db PATH` to `looplab dashboard`, or set LOOPLAB_DB.")
        return None
    except DBAPIError as e:  # e.g. the server is not running: say which database, and what to do
        if user and "permission denied" in str(
            e.orig
        ):  # the person's role may not read: the database said so
            st.error(
                f"Signed in as {user}: the database refused to read as role {user}: "
                f"{str(e.orig).splitlines()[0]}; ask an admin to run `looplab db grant {user} --as reader` (or member)"
            )
            return None
        st.error(f"Cannot open the results database: {describe_error(e, url)}")
        return None
    return url


# ---------------------------------------------------------------- cached loaders


cached = st.cache_data(ttl=TTL_S, show_spinner=False)  # a loader's result for TTL_S seconds

# the frames as orchestrator.frames reads them, cached
jobs = cached(frames.jobs)
latest = cached(frames.latest)
depth = cached(frames.depth)
round_deltas = cached(frames.round_deltas)
round_interactions = cached(frames.round_interactions)
task_scores = cached(frames.task_scores)
decode = cached(frames.decode)
depth_metric_keys = cached(frames.depth_metric_keys)
reported_keys = cached(frames.reported_keys)
curves = cached(frames.curves)
superseded = cached(frames.superseded)
rewinds = cached(frames.rewinds)


@cached
def health_events(url: str, job_ids: tuple[int, ...]) -> pd.DataFrame:
    return events_frame(frames.engine(url), job_ids)


@cached
def runs(url: str) -> pd.DataFrame:
    df = frames.runs(url)
    df["budget"] = variants.budget_labels(df)
    return df


# ---------------------------------------------------------------- filters


FILTERS = (
    ("grid", "Grid"),
    ("size", "Size"),
    ("budget", "Budget"),
    ("recipe", "Recipe"),
    ("variant_label", "Variant"),
)


def sidebar_filters(runs_df: pd.DataFrame) -> None:
    """Multiselects for grid, size, budget, recipe and variant, and (folded) for each architecture
    column with more than one value; an empty selection = everything.

    A query parameter (`?recipe=lean,parcae&size=tiny&d_model=192`) preselects values, so a view can be
    linked.
    """
    chosen = {}
    for col, label in FILTERS:
        options = sorted({v for v in runs_df[col] if isinstance(v, str)}) if col in runs_df else []
        chosen[col] = st.sidebar.multiselect(
            label, options, default=_from_query(col, options), key=f"filter_{col}", placeholder="all"
        )
    arch = variants.arch_options(runs_df)
    if arch:
        wanted = {col: _from_query(col, options) for col, options in arch.items()}
        with st.sidebar.expander("Architecture", expanded=any(wanted.values())):
            for col, options in arch.items():
                chosen[col] = st.multiselect(
                    variants.ARCH_LABELS[col],
                    options,
                    default=wanted[col],
                    key=f"filter_{col}",
                    placeholder="all",
                )
    st.session_state["filters"] = chosen


def _from_query(col: str, options: list) -> list:
    """The options a `?col=a,b` query parameter names (compared as text, so `?loops=8` finds 8)."""
    asked = set(st.query_params.get(col, "").split(","))
    return [v for v in options if str(v) in asked]


def filter_runs(runs_df: pd.DataFrame) -> pd.DataFrame:
    """`runs_df` restricted to the sidebar's selection."""
    keep = pd.Series(True, index=runs_df.index)
    for col, values in st.session_state.get("filters", {}).items():
        if values and col in runs_df:
            keep &= runs_df[col].isin(values)
    return runs_df[keep]


def filter_by_runs(df: pd.DataFrame, selected_runs: pd.DataFrame, on: str = "train_job_id") -> pd.DataFrame:
    return df[df[on].isin(selected_runs["job_id"])] if not df.empty else df


def selected_sweeps(url: str, where_else: str = "") -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the filtered runs, their depth-sweep rows); stops the page with a hint when there are none.
    `where_else`: another way to get sweeps, added to the hint (e.g. a demo command)."""
    chosen = filter_runs(runs(url))
    sweeps = filter_by_runs(depth(url), chosen)
    if sweeps.empty:
        other = f" (or {where_else})" if where_else else ""
        st.info(
            f"No depth sweep results yet: attach `then=['depth_sweep']` to a train grid{other}, or wait "
            "for the sweeps to finish."
        )
        st.stop()
    return chosen, sweeps


def selected(col: str) -> list:
    return st.session_state.get("filters", {}).get(col) or []


# ---------------------------------------------------------------- tables


# columns that hold counts or ids: shown without decimals even when a missing value made them float
INT_COLUMNS = {
    "job_id",
    "ref_job_id",
    "grid_id",
    "seed",
    "ref_seed",
    "budget_tokens",
    "tokens",
    "ref_tokens",
    "steps",
    "loops",
    "train_loops",
    "eval_loops",
    "round",
    "n_seeds",
    "n_runs",
    "n_pairs",
    "progress_done",
    "progress_total",
    "context_len",
    "batch_size",
    "priority",
    "attempts",
    "match_time_of",
    "n_prelude",
    "n_recurrent",
    "n_coda",
    "d_model",
    "n_params",
    "n_params_non_embedding",
    "n_once",
    "n_rec",
    "train_job_id",
    "sweep_job_id",
    "n_ref",
    "seeds_needed",
    "n_budgets",
    "trained_depth",
    "inference_depth",
    "best_depth",
    "deepest",
    "skipped",
}
# columns whose values span many orders of magnitude: shown as 1.98e+12
SCIENTIFIC_COLUMNS = {"flops", "train_flops", "flops_per_token", "achieved_flops_per_s", "budget_flops"}


def table(
    df: pd.DataFrame, *, precision: int = 4, key: str | None = None, height: int | str = "auto"
) -> None:
    """A dataframe as people read it: counts without decimals, epoch timestamps as UTC clock time,
    FLOPs in scientific notation, a missing value shown as "—" (never 0, never a grey "None"), verdict
    cells coloured.

    Formats go through `column_config` (cheap for thousands of rows) and missing cells through the
    grid's own `placeholder`; only tables with a verdict column (a few rows each) use a pandas Styler,
    for the colours, and then carry their number formats in the Styler (the grid ignores a Styler's
    text for a number column that has a format of its own).
    """
    if df.empty:
        st.caption("nothing to show for this selection")
        return
    df = df.copy()
    formats: dict = {}
    for c in df.columns:
        if (
            not isinstance(c, str)
            or not pd.api.types.is_numeric_dtype(df[c])
            or pd.api.types.is_bool_dtype(df[c])
        ):
            continue
        if c.endswith("_at"):
            df[c] = pd.to_datetime(df[c], unit="s", utc=True).dt.tz_localize(None)
            formats[c] = ("YYYY-MM-DD HH:mm:ss", lambda v: v.strftime("%Y-%m-%d %H:%M:%S"))
        elif c in SCIENTIFIC_COLUMNS:
            formats[c] = ("scientific", "{:.3e}")
        elif c in INT_COLUMNS or pd.api.types.is_integer_dtype(df[c]):
            formats[c] = ("localized", "{:,.0f}")
        else:
            formats[c] = (f"%.{precision}f", f"{{:,.{precision}f}}")
    if "verdict" in df.columns:
        shown = df.style.format({c: fmt for c, (_, fmt) in formats.items()}, na_rep=variants.MISSING)
        shown = shown.map(lambda v: f"background-color: {VERDICT_COLORS.get(v, 'white')}", subset=["verdict"])
        st.dataframe(shown, hide_index=True, key=key, height=height, placeholder=variants.MISSING)
        return
    config = {
        c: st.column_config.DatetimeColumn(c, format=grid_format, help="UTC")
        if c.endswith("_at")
        else st.column_config.NumberColumn(c, format=grid_format)
        for c, (grid_format, _) in formats.items()
    }
    if LINK in df.columns:  # the morning view's deep links (orchestrator.health_view.run_link)
        config[LINK] = st.column_config.LinkColumn(
            LINK, display_text="open run", help="its run on the Runs page"
        )
    st.dataframe(
        df, hide_index=True, key=key, height=height, column_config=config, placeholder=variants.MISSING
    )


def reference_picker(
    options: list[str], label: str = "Reference variant", key: str = "reference"
) -> str | None:
    """A selectbox of variant labels; the default is `parcae`'s variant with the fewest overrides
    (`analysis.comparison.default_reference`)."""
    options = sorted({o for o in options if isinstance(o, str)})
    if not options:
        return None
    default = options.index(comparison.default_reference(options))
    return st.selectbox(label, options, index=default, key=key)


# The hues of named series (variants, recipes, runs): Okabe & Ito's colour-blind-safe eight, the
# yellow last (it is faint on white), then Paul Tol's "muted" ones, so up to 16 series are told apart
# with any of the common colour-vision deficiencies; no two are the light and dark of one hue, as
# tableau20's pairs were (two variants could hide each other).
PALETTE = (
    "#0072B2",  # blue
    "#E69F00",  # orange
    "#009E73",  # bluish green
    "#D55E00",  # vermillion
    "#56B4E9",  # sky blue
    "#CC79A7",  # reddish purple
    "#000000",  # black
    "#F0E442",  # yellow
    "#332288",  # indigo (Tol muted from here)
    "#117733",  # green
    "#882255",  # wine
    "#999933",  # olive
    "#44AA99",  # teal
    "#AA4499",  # purple
    "#DDCC77",  # sand
    "#BBBBBB",  # grey (Tol's rose sat too near the reddish purple)
)


def color(field: str, numeric: bool = False, title: str | None = None, **kw):
    """An Altair colour channel: distinct colour-blind-safe hues for names (variants, recipes:
    `PALETTE`), an ordered scale for numbers (d_model 64 < 96 < 192 reads as light to dark)."""
    import altair as alt

    if numeric:
        return alt.Color(f"{field}:O", title=title, scale=alt.Scale(scheme="viridis"), **kw)
    return alt.Color(f"{field}:N", title=title, scale=alt.Scale(range=list(PALETTE)), **kw)


def mean_with_spread(
    base,
    *,
    y_title: str,
    tooltip: list,
    spread: str | None = "area",
    points: bool = True,
    log_y: bool = False,
    line: bool = True,
):
    """A line of the mean over seeds drawn over each point's min–max spread: `spread` "area" (a band
    along a curve), "rule" (a bar at each of a few far-apart points) or None (the line alone). `base`
    is an Altair chart encoding x and colour over rows with `mean`, `min` and `max` columns; the
    legend comes from the line. `log_y`: a logarithmic y axis (positive values only). `line=False`:
    points only, for points that are not one series along x (variants of different recipes at a
    categorical or architecture x), where a line would read as a trend that is not there."""
    import altair as alt

    scale = alt.Scale(type="log") if log_y else alt.Scale(zero=False)
    mark = base.mark_line(point=points) if line else base.mark_point(filled=True, size=90)
    line = mark.encode(y=alt.Y("mean:Q", title=y_title, scale=scale), tooltip=tooltip)
    if spread is None:
        return line
    marks = {"area": base.mark_area(opacity=0.2), "rule": base.mark_rule(opacity=0.5)}
    return line + marks[spread].encode(y="min:Q", y2="max:Q")


def seed_tooltip(*fields, std: bool = True) -> list:
    """A mean-over-seeds chart's tooltip: `fields`, then the mean (and with `std` the standard
    deviation) to four decimals, then how many seeds."""
    import altair as alt

    spread = [alt.Tooltip("std:Q", format=".4f")] if std else []
    return [*fields, alt.Tooltip("mean:Q", format=".4f"), *spread, "n_seeds"]


def loops_picker(counts: list, key: str, where=st) -> int:
    """A selectbox of the loop counts a forward pass was measured with, in `where` (a column or the page),
    the largest chosen at first."""
    return where.selectbox(
        "Forward pass with", counts, index=len(counts) - 1, key=key, format_func="{} loops".format
    )


def loss_input(label: str, value: float, key: str, lowest: float = 0.0, where=st) -> float:
    """A loss difference typed in `where` (a column, the sidebar or the page): three decimals, in steps
    of 0.005, at least `lowest`."""
    return where.number_input(label, min_value=lowest, value=value, step=0.005, format="%.3f", key=key)


def accuracy_marks(base, tooltip: list) -> tuple:
    """(lines with points, error bars) of task accuracy over `base` (an Altair chart encoding x and
    colour over rows with `acc`, `ci_low` and `ci_high`: the Wilson interval), the y axis 0 to 1."""
    import altair as alt

    lines = base.mark_line(point=True).encode(
        y=alt.Y("acc:Q", title="accuracy", scale=alt.Scale(domain=[0, 1])), tooltip=tooltip
    )
    return lines, base.mark_errorbar().encode(y=alt.Y("ci_low:Q", title="accuracy"), y2="ci_high:Q")


def axis_picker(label: str, options: list[str], default: str, key: str) -> str:
    """A selectbox of column names for a chart axis or colour, shown by their readable names."""
    index = options.index(default) if default in options else 0
    return st.selectbox(
        label, options, index=index, key=key, format_func=lambda c: variants.ARCH_LABELS.get(c, c)
    )


def url() -> str:
    """The database URL `app.py` opened for this run."""
    return st.session_state["db_url"]


@st.cache_data(ttl=TTL_S, show_spinner=False)
def database_role(url: str) -> str | None:
    """PostgreSQL: the role this URL's sessions read as (`current_user`: the signed-in person's behind
    the proxy); None on SQLite, which has no roles."""
    eng = frames.engine(url)
    if eng.dialect.name != "postgresql":
        return None
    with eng.connect() as conn:
        return conn.exec_driver_sql("SELECT current_user").scalar()


def runs_page(title: str) -> tuple[str, pd.DataFrame, pd.DataFrame]:
    """The start of a page about runs: its title, then (database URL, every run with its variant
    columns, the runs the sidebar filters select). Stops the page with a note when there is no job."""
    st.title(title)
    db = url()
    all_runs = variants.with_variants(runs(db))
    if not require_jobs(all_runs):
        st.stop()
    linked = linked_jobs()
    if linked is None:
        return db, all_runs, filter_runs(all_runs)
    chosen = all_runs[all_runs["job_id"].isin(linked)]  # the link is the selection, whatever the sidebar
    absent = sorted(linked - set(int(j) for j in chosen["job_id"]))
    if absent:
        st.info(f"job(s) {', '.join(map(str, absent))} of the link: no training run of that id here")
    st.caption(f"job(s) {', '.join(map(str, sorted(linked)))}, from the link (`?{JOB_PARAM}=`)")
    return db, all_runs, chosen


JOB_PARAM = "job"  # ?job=12,13: the runs a deep link opens (orchestrator.health_view.run_link)


def linked_jobs(quiet: bool = False) -> set[int] | None:
    """The job ids a `?job=12,13` query parameter names (the morning view's links), else None; a value
    that is no list of ids is named on the page (once: `quiet` for a second reader) and ignored."""
    raw = st.query_params.get(JOB_PARAM)
    if raw is None:
        return None
    try:
        ids = {int(v) for v in str(raw).split(",") if v.strip()}
    except ValueError:
        ids = set()
    if not ids:
        if not quiet:
            st.error(
                f"{JOB_PARAM}: cannot read {raw!r}; accepted: job ids, comma-separated (?{JOB_PARAM}=12,13)"
            )
        return None
    return ids


def require_jobs(jobs_df: pd.DataFrame) -> bool:
    """False (and a friendly note on the page) when the database holds no job yet."""
    if jobs_df.empty:
        st.info(NO_JOBS)
        return False
    return True


# ---------------------------------------------------------------- health markers on curves


def health_markers(url: str, cur: pd.DataFrame, x: str) -> pd.DataFrame:
    """The health events of the runs drawn in `cur` (rows per run's point: job_id, step, `x`, raw)
    at their curves' points: the run's raw point at or before the event's step (an event between two
    evaluations sits on the evaluation before it). What a marker needs: x, raw value, rule, message."""
    found = health_events(url, tuple(int(i) for i in cur["job_id"].unique())).dropna(subset=["step"])
    if found.empty:
        return found
    found = found.assign(step=found["step"].astype("int64")).sort_values("step")
    columns = list(dict.fromkeys(["job_id", "step", x, "raw"]))  # x may be the step itself
    points = cur[columns].dropna(subset=["step"]).assign(step=lambda d: d["step"].astype("int64"))
    out = pd.merge_asof(found, points.sort_values("step"), on="step", by="job_id", direction="backward")
    return out.dropna(subset=[x, "raw"])


def with_health_markers(chart, markers: pd.DataFrame, x: str):
    """`chart` with the health `markers` (`health_markers`) drawn over it as ▼ at each run's raw point,
    coloured by rule on a scale of their own (the runs' colours stay theirs); `chart` unchanged when
    there is none. Each ▼ sits just above its point, opaque and pointing at it, so a chart that draws
    its points (Compare's wall-time curves) does not hide it under them."""
    import altair as alt

    if markers.empty:
        return chart
    marked = (
        alt.Chart(markers)
        .mark_point(shape="triangle-down", size=90, filled=True, opacity=1, yOffset=-7)
        .encode(
            x=f"{x}:Q",
            y="raw:Q",
            color=alt.Color("rule:N", title="health", scale=alt.Scale(scheme="set1")),
            tooltip=["job_id", "rule", "level", "step", "message"],
        )
    )
    return alt.layer(chart, marked).resolve_scale(color="independent")


def health_caption(markers: pd.DataFrame, note: str = "") -> None:
    """How many health events the chart above marks (nothing when none); `note` says more."""
    if not markers.empty:
        st.caption(f"{len(markers)} health event(s) marked on the curves (▼; docs/health.md){note}")
