"""The joint scaling law of the iso-depth study and its fit, with bootstrap intervals (pure: no
Streamlit, no database).

    L(N_once, N_rec, r, D) = E + A · (N_once + r^φ · N_rec)^(−α) + B · D^(−β)

N_once: non-embedding parameters a token passes once (prelude, coda, injection, final norm); N_rec: the
shared block's, applied r times; D: training tokens; φ: what one recurrence is worth, in distinct
blocks (a block looped r times counts as r^φ blocks). φ = 1 says loops are as good as distinct layers,
φ = 0 that they are worth nothing.

How it is fitted (`fit_law`):
- nonlinear least squares (`scipy.optimize.least_squares`, analytic Jacobian) on the loss itself;
  E, A, α, B, β are positive through a log parameterisation, φ is free within [−2, 3]; N and D are
  divided by their geometric means inside the fit (A and B are reported in the data's own units);
- several starting points: a grid of (α, β, φ), each completed by non-negative linear least squares
  for (E, A, B), the best few refined; an optional robust loss (`robust="huber"` etc.);
- 95 % intervals by a bootstrap over runs (resample runs with replacement, refit from the full-data
  estimate; seeded, so the same data and seed give the same numbers), percentile intervals;
- R², RMSE and every run's residual; `at_bound` names any parameter whose estimate sits on the edge
  of its range (the runs do not pin it down: its interval then spans the range, and the report says so).
It refuses data that cannot identify φ or the law: a single r, fewer runs than parameters + 2, fewer than
three distinct token counts or model sizes.

Which form the data support (`compare_forms`): φ free, φ = 1 and φ = 0 are each fitted, and the form
with the lowest leave-one-run-out RMSE (held-out error: each run predicted by the law fitted without
it) is the supported one; AIC is shown beside it.

What the fit answers (what one recurrence is worth, the compute-optimal width and tokens per r) and the
study's report are `analysis/iso_depth.py`.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
from scipy.optimize import least_squares, nnls

from looplab.model import fields
from looplab.model.errors import ConfigError

PARAMS = ("E", "A", "alpha", "B", "beta", "phi")
FORMS = {"free": None, "phi=1": 1.0, "phi=0": 0.0}  # form name -> fixed φ (None: fitted)
ROBUST_LOSSES = ("linear", "huber", "soft_l1", "cauchy", "arctan")
REQUIRED = ("loss", "r", "n_once", "n_rec", "tokens")
DEFAULT_BOOTSTRAP = 200
PHI_BOUNDS = (-2.0, 3.0)
_EXPONENT_BOUNDS = (math.log(1e-3), math.log(4.0))  # α and β, as logs
_SCALE_BOUNDS = (-40.0, 40.0)  # log E, log A', log B' (A', B' in normalised units)
_STARTS = {"alpha": (0.15, 0.4, 0.8), "beta": (0.15, 0.4, 0.8), "phi": (0.0, 0.5, 1.0)}
_REFINED_STARTS = 4  # the best starting points by their linear fit that least squares refines


# ---------------------------------------------------------------- the law and its Jacobian


@dataclasses.dataclass(frozen=True)
class _Data:
    """The runs as the fit uses them: 1-D arrays of one length, N and D divided by their scales."""

    loss: np.ndarray
    r: np.ndarray
    n_once: np.ndarray  # / n_scale
    n_rec: np.ndarray  # / n_scale
    log_d: np.ndarray  # log(D / d_scale)
    n_scale: float
    d_scale: float

    def take(self, index: np.ndarray) -> _Data:
        return dataclasses.replace(
            self,
            loss=self.loss[index],
            r=self.r[index],
            n_once=self.n_once[index],
            n_rec=self.n_rec[index],
            log_d=self.log_d[index],
        )


def _terms(theta: np.ndarray, data: _Data, phi: float | None):
    """(E, the N term, the D term, N_eff / n_scale, r^φ, φ) for the internal parameters `theta` =
    [log E, log A', log α, log B', log β(, φ)] (φ last when it is fitted)."""
    phi_value = theta[5] if phi is None else phi
    alpha, beta = math.exp(theta[2]), math.exp(theta[4])
    r_phi = data.r**phi_value
    n_eff = data.n_once + r_phi * data.n_rec
    term_n = np.exp(theta[1] - alpha * np.log(n_eff))
    term_d = np.exp(theta[3] - beta * data.log_d)
    return math.exp(theta[0]), term_n, term_d, n_eff, r_phi, phi_value


def _residuals(theta: np.ndarray, data: _Data, phi: float | None) -> np.ndarray:
    e, term_n, term_d, *_ = _terms(theta, data, phi)
    return e + term_n + term_d - data.loss


def _jacobian(theta: np.ndarray, data: _Data, phi: float | None) -> np.ndarray:
    e, term_n, term_d, n_eff, r_phi, _ = _terms(theta, data, phi)
    alpha, beta = math.exp(theta[2]), math.exp(theta[4])
    cols = [
        np.full_like(term_n, e),
        term_n,
        -alpha * np.log(n_eff) * term_n,
        term_d,
        -beta * data.log_d * term_d,
    ]
    if phi is None:  # d/dφ of A'·n_eff^(−α): −α·A'·n_eff^(−α−1) · r^φ ln r · N_rec
        cols.append(-alpha * term_n * r_phi * np.log(data.r) * data.n_rec / n_eff)
    return np.stack(cols, axis=1)


def _bounds(phi: float | None) -> tuple[list[float], list[float]]:
    lo = [_SCALE_BOUNDS[0], _SCALE_BOUNDS[0], _EXPONENT_BOUNDS[0], _SCALE_BOUNDS[0], _EXPONENT_BOUNDS[0]]
    hi = [_SCALE_BOUNDS[1], _SCALE_BOUNDS[1], _EXPONENT_BOUNDS[1], _SCALE_BOUNDS[1], _EXPONENT_BOUNDS[1]]
    if phi is None:
        lo, hi = [*lo, PHI_BOUNDS[0]], [*hi, PHI_BOUNDS[1]]
    return lo, hi


def _refine(theta0: np.ndarray, data: _Data, phi: float | None, robust: str, f_scale: float):
    lo, hi = _bounds(phi)
    theta0 = np.clip(theta0, np.asarray(lo) + 1e-9, np.asarray(hi) - 1e-9)
    return least_squares(
        _residuals,
        theta0,
        jac=_jacobian,
        bounds=(lo, hi),
        method="trf",
        loss=robust,
        f_scale=f_scale,
        x_scale="jac",
        args=(data, phi),
        max_nfev=400,
    )


def _linear_start(data: _Data, alpha: float, beta: float, phi: float) -> tuple[float, np.ndarray]:
    """(sum of squares, theta) of the best non-negative E, A', B' for fixed exponents and φ."""
    n_eff = data.n_once + data.r**phi * data.n_rec
    design = np.stack([np.ones_like(n_eff), n_eff**-alpha, np.exp(-beta * data.log_d)], axis=1)
    coef, norm = nnls(design, data.loss)
    coef = np.maximum(coef, 1e-6 * max(float(np.mean(data.loss)), 1e-12))  # logs of zero would be -inf
    theta = np.array(
        [math.log(coef[0]), math.log(coef[1]), math.log(alpha), math.log(coef[2]), math.log(beta), phi]
    )
    return norm**2, theta


def _fit_once(data: _Data, phi: float | None, robust: str, f_scale: float) -> np.ndarray:
    """Internal parameters of the best of several starts (φ dropped when it is fixed)."""
    starts = []
    for alpha in _STARTS["alpha"]:
        for beta in _STARTS["beta"]:
            for phi_start in _STARTS["phi"] if phi is None else (phi,):
                starts.append(_linear_start(data, alpha, beta, phi_start))
    starts.sort(key=lambda s: s[0])
    best = None
    for _, theta in starts[:_REFINED_STARTS]:
        sol = _refine(theta if phi is None else theta[:5], data, phi, robust, f_scale)
        if best is None or sol.cost < best.cost:
            best = sol
    return best.x


def _natural(theta: np.ndarray, data: _Data, phi: float | None) -> np.ndarray:
    """[E, A, α, B, β, φ] in the data's units from internal parameters."""
    alpha, beta = math.exp(theta[2]), math.exp(theta[4])
    a = math.exp(theta[1] + alpha * math.log(data.n_scale))
    b = math.exp(theta[3] + beta * math.log(data.d_scale))
    return np.array([math.exp(theta[0]), a, alpha, b, beta, theta[5] if phi is None else phi])


def law(params: dict[str, float] | np.ndarray, n_once, n_rec, r, tokens) -> np.ndarray:
    """The law at the given runs (arrays broadcast): E + A·(N_once + r^φ N_rec)^(−α) + B·D^(−β).
    Computed in logs, so A = 1e12 with α = 1.5 does not overflow."""
    e, a, alpha, b, beta, phi = (params[k] for k in PARAMS) if isinstance(params, dict) else params
    n_eff = np.asarray(n_once, float) + np.asarray(r, float) ** phi * np.asarray(n_rec, float)
    return (
        e
        + np.exp(math.log(a) - alpha * np.log(n_eff))
        + np.exp(math.log(b) - beta * np.log(np.asarray(tokens, float)))
    )


# ---------------------------------------------------------------- checks


def _prepared(runs: pd.DataFrame, n_params: int) -> _Data:
    """The runs as arrays, refused (ConfigError naming the column) when they cannot identify the law."""
    if not isinstance(runs, pd.DataFrame):
        raise ConfigError(f"runs: expected a DataFrame with columns {', '.join(REQUIRED)}")
    missing = [c for c in REQUIRED if c not in runs]
    if missing:
        raise ConfigError(f"runs: missing column(s) {', '.join(missing)}; needed: {', '.join(REQUIRED)}")
    values = {c: pd.to_numeric(runs[c], errors="coerce").to_numpy(float) for c in REQUIRED}
    for column, lowest, what in (
        ("loss", 0.0, "> 0"),
        ("r", 1.0, ">= 1"),
        ("n_once", 0.0, ">= 0"),
        ("n_rec", 0.0, "> 0"),
        ("tokens", 0.0, "> 0"),
    ):
        v = values[column]
        bad = ~np.isfinite(v) | (v < lowest) | ((v == lowest) & (what == "> 0"))
        if bad.any():
            raise ConfigError(
                f"{column}: every run needs a finite value {what}; run {int(np.argmax(bad))} has {v[bad][0]}"
            )
    n = len(runs)
    if n < n_params + 2:
        raise ConfigError(
            f"runs: {n} runs for {n_params} parameters; the fit needs at least {n_params + 2} (parameters + 2)"
        )
    distinct_r = np.unique(values["r"])
    if len(distinct_r) < 2:
        raise ConfigError(
            f"r: every run has recurrence r={distinct_r[0]:g}, so φ cannot be identified (r^φ is one number); "
            "the fit needs runs at two or more values of r"
        )
    if len(np.unique(values["tokens"])) < 3:
        raise ConfigError(
            "tokens: fewer than 3 distinct token counts; B and β need at least 3 (several budgets)"
        )
    sizes = np.unique(np.round(values["n_once"] + values["n_rec"]))
    if len(sizes) < 3:
        raise ConfigError(
            "n_once + n_rec: fewer than 3 distinct model sizes; A and α need at least 3 (several widths)"
        )
    n_scale = float(np.exp(np.mean(np.log(values["n_once"] + values["n_rec"]))))
    d_scale = float(np.exp(np.mean(np.log(values["tokens"]))))
    return _Data(
        loss=values["loss"],
        r=values["r"],
        n_once=values["n_once"] / n_scale,
        n_rec=values["n_rec"] / n_scale,
        log_d=np.log(values["tokens"] / d_scale),
        n_scale=n_scale,
        d_scale=d_scale,
    )


def _robust(robust: str, f_scale: float | None) -> tuple[str, float | None]:
    robust = fields.choice("robust", robust, ROBUST_LOSSES)
    # f_scale: the residual size where the robust loss bends
    return robust, fields.number("f_scale", f_scale, lo=0.0, lo_open=True, allow_none=True)


# ---------------------------------------------------------------- the fit


@dataclasses.dataclass(frozen=True)
class LawFit:
    """One fitted form of the law. `params`: point estimates (A and B in the units of the data's N and D);
    `intervals`: the bootstrap percentile interval of each (NaN with no bootstrap; a fixed φ is its own
    interval); `draws`: the bootstrap estimates, one row per resample that could be fitted (columns
    PARAMS); `table`: every run with n_eff, predicted and residual (= observed − predicted)."""

    form: str
    params: dict[str, float]
    intervals: dict[str, tuple[float, float]]
    draws: np.ndarray
    table: pd.DataFrame
    r2: float
    rmse: float
    n_runs: int
    n_bootstrap: int  # resamples asked for
    n_bootstrap_fitted: int  # resamples that could be fitted (a resample with a single r cannot)
    confidence: float
    seed: int
    robust: str
    f_scale: float | None
    # parameters whose estimate sits on the edge of its search range: the runs do not pin it down
    at_bound: tuple[str, ...] = ()

    @property
    def phi(self) -> float:
        return self.params["phi"]

    def predict(self, n_once, n_rec, r, tokens) -> np.ndarray:
        return law(self.params, n_once, n_rec, r, tokens)

    def parameter_table(self) -> pd.DataFrame:
        """One row per parameter: estimate and interval."""
        return pd.DataFrame(
            [
                {
                    "parameter": k,
                    "estimate": self.params[k],
                    "lo": self.intervals[k][0],
                    "hi": self.intervals[k][1],
                }
                for k in PARAMS
            ]
        )


def _point_fit(runs: pd.DataFrame, phi: float | None, robust: str, f_scale: float | None):
    """(data, internal parameters, f_scale) of the full-data fit of one form."""
    robust, f_scale = _robust(robust, f_scale)
    data = _prepared(runs, len(PARAMS) - (phi is not None))
    if robust != "linear" and f_scale is None:
        plain = _fit_once(data, phi, "linear", 1.0)
        f_scale = max(1.4826 * float(np.median(np.abs(_residuals(plain, data, phi)))), 1e-9)
    return data, _fit_once(data, phi, robust, f_scale or 1.0), f_scale


def fit_law(
    runs: pd.DataFrame,
    *,
    phi: float | None = None,
    bootstrap: int = DEFAULT_BOOTSTRAP,
    seed: int = 0,
    robust: str = "linear",
    f_scale: float | None = None,
    confidence: float = 0.95,
) -> LawFit:
    """Fit the law to `runs` (columns loss, r, n_once, n_rec, tokens; any others are kept in `table`).

    `phi`: None fits φ; a number fixes it (the nested forms: 1.0, 0.0). `bootstrap`: resamples for the
    intervals (0: none). `robust`: least_squares' loss ("linear", "huber", "soft_l1", ...); its
    `f_scale` defaults to 1.4826 × the median absolute residual of a plain fit. Deterministic for a seed."""
    bootstrap = fields.integer("bootstrap", bootstrap, lo=0)
    fields.number("confidence", confidence, lo=0.0, lo_open=True, hi=1.0, hi_open=True)
    data, theta, f_scale = _point_fit(runs, phi, robust, f_scale)
    estimate = _natural(theta, data, phi)
    params = dict(zip(PARAMS, map(float, estimate)))

    draws, rng = [], np.random.default_rng(seed)
    n = len(data.loss)
    for _ in range(bootstrap):
        index = rng.integers(0, n, n)
        if len(np.unique(data.r[index])) < 2:
            continue  # this resample cannot identify φ: left out (counted in n_bootstrap_fitted)
        sample = data.take(index)
        sol = _refine(theta, sample, phi, robust, f_scale or 1.0)
        draws.append(_natural(sol.x, sample, phi))
    draws_array = np.array(draws).reshape(-1, len(PARAMS))
    tail = (1 - confidence) / 2
    intervals = {}
    for j, k in enumerate(PARAMS):
        if len(draws_array) >= 2:
            lo, hi = np.quantile(draws_array[:, j], [tail, 1 - tail])
            intervals[k] = (float(lo), float(hi))
        else:
            intervals[k] = (math.nan, math.nan)

    lo_bounds, hi_bounds = _bounds(phi)
    at_bound = tuple(
        PARAMS[j]
        for j, value in enumerate(theta)
        if min(value - lo_bounds[j], hi_bounds[j] - value) < 0.01 * (hi_bounds[j] - lo_bounds[j])
    )
    table = runs.reset_index(drop=True).copy()
    table["n_eff"] = table["n_once"] + table["r"].astype(float) ** params["phi"] * table["n_rec"]
    table["predicted"] = law(params, table["n_once"], table["n_rec"], table["r"], table["tokens"])
    table["residual"] = table["loss"] - table["predicted"]
    residual = table["residual"].to_numpy(float)
    total = float(np.sum((data.loss - data.loss.mean()) ** 2))
    return LawFit(
        form=_form_name(phi),
        params=params,
        intervals=intervals,
        draws=draws_array,
        table=table,
        r2=1 - float(np.sum(residual**2)) / total if total > 0 else math.nan,
        rmse=float(np.sqrt(np.mean(residual**2))),
        n_runs=n,
        n_bootstrap=bootstrap,
        n_bootstrap_fitted=len(draws_array),
        confidence=float(confidence),
        seed=seed,
        robust=robust,
        f_scale=f_scale,
        at_bound=at_bound,
    )


def _form_name(phi: float | None) -> str:
    for name, value in FORMS.items():
        if value == phi:
            return name
    return f"phi={phi:g}"


def compare_forms(
    runs: pd.DataFrame, *, robust: str = "linear", f_scale: float | None = None
) -> pd.DataFrame:
    """φ free, φ = 1 and φ = 0 on the same runs: parameters, RMSE, leave-one-run-out RMSE (each run
    predicted by the law fitted to the others, refitted from the full-data estimate), AIC
    (n ln(RSS/n) + 2k); `supported` marks the form with the lowest leave-one-out RMSE (the criterion:
    held-out error)."""
    rows = []
    for name, phi in FORMS.items():
        data, theta, scale = _point_fit(runs, phi, robust, f_scale)
        residual = _residuals(theta, data, phi)  # predicted − observed
        held_out = []
        for i in range(len(data.loss)):
            keep = np.arange(len(data.loss)) != i
            sol = _refine(theta, data.take(keep), phi, robust, scale or 1.0)
            held_out.append(float(_residuals(sol.x, data.take(np.array([i])), phi)[0]))
        n, k = len(data.loss), len(PARAMS) - (phi is not None)
        rss, total = float(np.sum(residual**2)), float(np.sum((data.loss - data.loss.mean()) ** 2))
        rows.append(
            {
                "form": name,
                **dict(zip(PARAMS, map(float, _natural(theta, data, phi)))),
                "n_params": k,
                "rmse": math.sqrt(rss / n),
                "loo_rmse": float(np.sqrt(np.mean(np.square(held_out)))),
                "aic": n * math.log(max(rss, 1e-300) / n) + 2 * k,
                "r2": 1 - rss / total if total > 0 else math.nan,
            }
        )
    table = pd.DataFrame(rows)
    table["supported"] = table["loo_rmse"] == table["loo_rmse"].min()
    return table
