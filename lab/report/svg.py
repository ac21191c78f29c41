"""Line charts as inline SVG text, so a report is one self-contained file: no script, no font or
stylesheet fetched, nothing a browser must load from anywhere (matplotlib is not a dependency, and
altair renders to SVG only through vl-convert, which is not one either).

A chart is data (`LineChart` of `Series`: a name, x and y values and an optional low-high band, e.g. the
min-max spread over seeds) and `render` turns it into an `<svg>` element: axes with round ticks
(linear, or powers of 2 or 10 on a log axis), one coloured line per series with its points (each with a
native hover title giving its values), the bands shaded, a legend on the right. Points that cannot be
drawn (NaN, or not positive on a log axis) are left out, never moved.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

PALETTE = (
    "#4e79a7",
    "#f28e2b",
    "#e15759",
    "#76b7b2",
    "#59a14f",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
    "#bab0ac",
)  # tableau10, the dashboard's palette
WIDTH, HEIGHT = 720, 360
LEFT, RIGHT, TOP, BOTTOM = 70, 210, 34, 46  # margins; the legend sits in the right one
LEGEND_CHARS = 30


@dataclass(frozen=True)
class Series:
    name: str
    x: Sequence[float]
    y: Sequence[float]
    low: Sequence[float] | None = None  # a band from low to high at each x (None: no band)
    high: Sequence[float] | None = None


@dataclass(frozen=True)
class LineChart:
    title: str
    x_label: str
    y_label: str
    series: Sequence[Series]
    log_x: int | None = None  # the base of a logarithmic x axis (2 or 10), None: linear
    log_y: bool = False
    points: bool = True


def _ok(v: float, log: bool) -> bool:
    return v is not None and math.isfinite(v) and (v > 0 or not log)


def _fmt(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 1e5 or abs(v) < 1e-3:
        return f"{v:.1e}"
    return f"{v:.4g}"


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """Round values (1, 2 or 5 x 10^k apart) spanning [lo, hi]."""
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / max(n - 1, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= 0.7 * raw)  # about n ticks, a few more at most
    first = math.ceil(lo / step - 1e-9) * step
    return [round(first + i * step, 12) for i in range(int((hi - first) / step + 1e-9) + 1)]


def log_ticks(lo: float, hi: float, base: int) -> list[float]:
    """The powers of `base` in [lo, hi]; on a base-10 axis spanning less than a decade or two also 2 and
    5 times them; the ends themselves when fewer than two such values fall inside."""
    k0, k1 = math.floor(math.log(lo, base)), math.ceil(math.log(hi, base))
    steps = (1, 2, 5) if base == 10 and k1 - k0 <= 2 else (1,)
    ticks = [float(m * base**k) for k in range(k0, k1 + 1) for m in steps]
    ticks = [t for t in ticks if lo * (1 - 1e-9) <= t <= hi * (1 + 1e-9)]
    return ticks if len(ticks) >= 2 else [lo, hi]


class _Axis:
    """Maps data values to pixels on [p0, p1], linearly or on a log scale."""

    def __init__(self, values: list[float], p0: float, p1: float, log: int | None) -> None:
        lo, hi = min(values), max(values)
        if log:
            lo, hi = (lo / 1.5, hi * 1.5) if lo == hi else (lo, hi)
            self.ticks = log_ticks(lo, hi, log)
            self.f = lambda v: math.log(v, log)
        else:
            pad = (hi - lo) * 0.05 or abs(hi) * 0.05 or 1.0
            lo, hi = lo - pad, hi + pad
            self.ticks = [t for t in nice_ticks(lo, hi) if lo <= t <= hi]
            self.f = lambda v: v
        self.a, self.b, self.p0, self.p1 = self.f(lo), self.f(hi), p0, p1

    def __call__(self, v: float) -> float:
        return self.p0 + (self.f(v) - self.a) / ((self.b - self.a) or 1.0) * (self.p1 - self.p0)


def render(chart: LineChart) -> str:
    """The chart as one `<svg>` element (an empty-state note when nothing can be drawn)."""
    log_y = 10 if chart.log_y else None
    xs = [v for s in chart.series for v in s.x if _ok(v, bool(chart.log_x))]
    ys = [
        v
        for s in chart.series
        for key in ("y", "low", "high")
        for v in (getattr(s, key) or ())
        if _ok(v, chart.log_y)
    ]
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" '
        f'height="{HEIGHT}" role="img" font-family="sans-serif" font-size="11">',
        f"<title>{escape(chart.title)}</title>",
        f'<text x="{LEFT}" y="18" font-size="13" font-weight="bold">{escape(chart.title)}</text>',
    ]
    if not xs or not ys:
        out.append(f'<text x="{LEFT}" y="{HEIGHT / 2}">nothing to draw</text></svg>')
        return "".join(out)
    x0, x1, y0, y1 = LEFT, WIDTH - RIGHT, HEIGHT - BOTTOM, TOP
    ax, ay = _Axis(xs, x0, x1, chart.log_x), _Axis(ys, y0, y1, log_y)
    out.append(f'<rect x="{x0}" y="{y1}" width="{x1 - x0}" height="{y0 - y1}" fill="none" stroke="#999"/>')
    for t in ax.ticks:
        px = ax(t)
        out.append(
            f'<line x1="{px:.1f}" y1="{y0}" x2="{px:.1f}" y2="{y0 + 4}" stroke="#999"/>'
            f'<text x="{px:.1f}" y="{y0 + 16}" text-anchor="middle">{_fmt(t)}</text>'
        )
    for t in ay.ticks:
        py = ay(t)
        out.append(
            f'<line x1="{x0}" y1="{py:.1f}" x2="{x1}" y2="{py:.1f}" stroke="#eee"/>'
            f'<text x="{x0 - 6}" y="{py + 4:.1f}" text-anchor="end">{_fmt(t)}</text>'
        )
    out.append(
        f'<text x="{(x0 + x1) / 2}" y="{HEIGHT - 8}" text-anchor="middle">{escape(chart.x_label)}</text>'
        f'<text transform="translate(14 {(y0 + y1) / 2}) rotate(-90)" text-anchor="middle">'
        f"{escape(chart.y_label)}</text>"
    )
    for i, s in enumerate(chart.series):
        out += _series(s, PALETTE[i % len(PALETTE)], ax, ay, chart)
        ly = y1 + 6 + 16 * i
        name = s.name if len(s.name) <= LEGEND_CHARS else s.name[: LEGEND_CHARS - 1] + "…"
        out.append(
            f'<rect x="{x1 + 12}" y="{ly}" width="10" height="10" fill="{PALETTE[i % len(PALETTE)]}"/>'
            f'<text x="{x1 + 28}" y="{ly + 9}"><title>{escape(s.name)}</title>{escape(name)}</text>'
        )
    out.append("</svg>")
    return "".join(out)


def _series(s: Series, color: str, ax: _Axis, ay: _Axis, chart: LineChart) -> list[str]:
    """The band, line and points of one series."""
    log_x, log_y = bool(chart.log_x), chart.log_y
    keep = [i for i in range(len(s.x)) if _ok(s.x[i], log_x) and _ok(s.y[i], log_y)]
    keep.sort(key=lambda i: s.x[i])
    out = []
    if s.low is not None and s.high is not None:
        band = [i for i in keep if _ok(s.low[i], log_y) and _ok(s.high[i], log_y)]
        if len(band) > 1:
            edge = [f"{ax(s.x[i]):.1f},{ay(s.low[i]):.1f}" for i in band]
            edge += [f"{ax(s.x[i]):.1f},{ay(s.high[i]):.1f}" for i in reversed(band)]
            out.append(
                f'<polygon points="{" ".join(edge)}" fill="{color}" fill-opacity="0.15" stroke="none"/>'
            )
    if len(keep) > 1:
        path = " ".join(f"{ax(s.x[i]):.1f},{ay(s.y[i]):.1f}" for i in keep)
        out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="1.8"/>')
    if chart.points or len(keep) == 1:
        for i in keep:
            tip = escape(f"{s.name}: {chart.x_label} {_fmt(s.x[i])}, {chart.y_label} {s.y[i]:.6g}")
            out.append(
                f'<circle cx="{ax(s.x[i]):.1f}" cy="{ay(s.y[i]):.1f}" r="3" fill="{color}">'
                f"<title>{tip}</title></circle>"
            )
    return out
