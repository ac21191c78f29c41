"""The claims scorecard (`analysis.claims.scorecard`) as a terminal reads it: grouped by study, one line
per claim that fits `WIDTH` (120) columns, with the verdict, what was judged (size and sign, sign only,
not judgeable), the study's figure with its band, ours with its interval and seeds, and the scale; a
second, indented line where the study's own text states a figure or contradicts its tables. The CSV
and JSON of `looplab claims` carry every column at full width.

Pure: a frame in, text out.
"""

from __future__ import annotations

import math

import pandas as pd

from looplab.analysis import claims

WIDTH = 120
# (heading, width) of each column; the widths add up to WIDTH with one space between columns
COLUMNS = (
    ("claim", 28),
    ("verdict", 12),
    ("judged", 6),
    ("study [band]", 30),
    ("ours [interval] n", 33),
    ("scale", 5),
)
JUDGED = {"size and sign": "size", "sign only": "sign", "not judgeable": "n/j", "": ""}


def _fit(text: str, width: int) -> str:
    """`text` cut to `width` characters (an ellipsis marks a cut), padded to it."""
    text = " ".join(str(text).split())
    return (text if len(text) <= width else text[: width - 1] + "…").ljust(width)


def _number(value: float) -> str:
    return f"{value:.4g}" if math.isfinite(value) else "—"


def _study(row: pd.Series) -> str:
    """The study's figure (the text before its interval) and its band's ends."""
    if str(row["study_figure"]).startswith("no values"):
        return "not printed"
    figure = str(row["study_figure"]).split(" ")[0]
    figure += "*" if "; derived: " in str(row["study_figure"]) else ""
    band = str(row["band"])
    if band.startswith("["):  # "d": the band's width is our default, not the study's
        return f"{figure} {band.split(']')[0]}]" + ("d" if "(band: default (" in band else "")
    return figure


def _ours(row: pd.Series) -> str:
    if not math.isfinite(row["value"]):
        return "—"
    interval = (
        f"[{_number(row['low'])}, {_number(row['high'])}]" if math.isfinite(row["low"]) else "no interval"
    )
    return f"{_number(row['value'])} {interval} n{int(row['n_seeds'])}"


# the scale column: what a judgement compared, by the runs' scale (`analysis.claims.SCALE_NOTES`)
SCALES = dict(zip(claims.SCALE_NOTES, ("study", "free", "other", "n/s"), strict=True))


def _scale(row: pd.Series) -> str:
    if not math.isfinite(row["value"]):
        return ""
    return SCALES.get(row["scale_note"], "?")


def _line(cells: list[str]) -> str:
    return " ".join(_fit(c, w) for c, (_, w) in zip(cells, COLUMNS, strict=True)).rstrip()


def _notes(row: pd.Series) -> list[str]:
    """The study's stated figure and its contradiction, each an indented line cut to `WIDTH`."""
    out = []
    for label in ("stated", "contradiction"):
        text = row.get(label, "")
        if isinstance(text, str) and text:
            out.append("    " + _fit(f"{label}: {text}", WIDTH - 4).rstrip())
    return out


def counts(card: pd.DataFrame) -> str:
    """ "N claims: n replicated, ..." in the verdicts' order of appearance."""
    tally = card["verdict"].value_counts()
    return f"{len(card)} claims: " + ", ".join(f"{n} {verdict}" for verdict, n in tally.items())


def text_scorecard(card: pd.DataFrame) -> str:
    """The scorecard grouped by study, every line at most `WIDTH` characters; a key at the foot."""
    lines = [_line([h for h, _ in COLUMNS]), "-" * WIDTH]
    for study, group in card.groupby("study", sort=False):
        lines.append(f"== {study}: {counts(group)}")
        for _, row in group.iterrows():
            claim = str(row["claim"]).split(".", 1)[-1]
            cells = [claim, row["verdict"], JUDGED.get(row["judged"], row["judged"]), _study(row), _ours(row)]
            lines.append(_line([*cells, _scale(row)]))
            lines += _notes(row)
    lines += [
        "-" * WIDTH,
        counts(card),
        "judged: size = size and sign (a band of the study's figure), sign = sign only, n/j = not judgeable",
        "scale: study = at the study's scale; free = another, the figure (a share, ratio, exponent) judged on",
        "size anyway; other = another, sign only; n/s = the study prints no size or tokens for it, sign only.",
        "* derived from the study's printed values (the computation is in study_figure).",
        "d after a band: its width is our documented default, not the study's (the band column says why).",
        "Every column in full: --csv or --json.",
    ]
    return "\n".join(line[:WIDTH] for line in lines)
