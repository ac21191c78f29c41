"""The report's sections as one self-contained HTML page or as Markdown.

HTML: inline CSS and inline SVG charts only; nothing is loaded from anywhere (no script, stylesheet,
font or image URL), so the file opens offline and sends no request. Each table cell carries the value it
shows as JSON in `data-v` (the full float, null for missing), so a reader or a test can take the numbers
back exactly. Markdown: the same text and tables as pipe tables (charts are in the HTML version), to
paste into notes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from html import escape

import numpy as np

from looplab.lab.report.sections import Section, Table, cell, column_kinds, missing
from looplab.lab.report.svg import LineChart, render

STYLE = """
body { font-family: sans-serif; max-width: 1200px; margin: 2em auto; padding: 0 1em; color: #222; }
h1 { font-size: 1.6em; } h2 { border-bottom: 1px solid #ddd; padding-bottom: .2em; margin-top: 2em; }
table { border-collapse: collapse; font-size: 12px; margin: .5em 0 1.5em; display: block; overflow-x: auto; }
th, td { border: 1px solid #ddd; padding: 3px 6px; text-align: right; white-space: nowrap; }
th { background: #f4f4f4; } td.text { text-align: left; }
td.better { background: #d4f4dd; } td.worse { background: #fbd9d3; } td.reference { background: #dde7f7; }
td.not-resolved, td.noise { background: #eeeeee; }
caption { caption-side: top; text-align: left; font-weight: bold; padding: 4px 0; }
pre { background: #f7f7f7; padding: .6em; font-size: 11px; overflow-x: auto; max-height: 24em; }
code { background: #f4f4f4; padding: 0 3px; }
"""
VERDICT_COLUMNS = ("verdict", "holds")


def _json_value(value):
    """A cell's value as JSON: floats in full (repr round-trips), missing as null."""
    if missing(value):
        return None
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        return float(value) if math.isfinite(value) else None
    return str(value)


def _inline(text: str) -> str:
    """Markdown's `code` spans as <code> in escaped HTML."""
    parts = escape(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def html_table(table: Table) -> str:
    frame = table.frame
    caption = f"<caption>{escape(table.caption)}</caption>" if table.caption else ""
    if frame.empty:
        return f'<table data-name="{escape(table.name)}">{caption}<tr><td>nothing to show</td></tr></table>'
    kinds = column_kinds(frame)
    head = "".join(f"<th>{escape(str(c))}</th>" for c in frame.columns)
    rows = []
    for values in frame.itertuples(index=False):
        tds = []
        for c, v in zip(frame.columns, values, strict=True):
            css = [kinds[c]] + ([str(v).replace(" ", "-")] if c in VERDICT_COLUMNS and not missing(v) else [])
            data = escape(json.dumps(_json_value(v)), quote=True)
            tds.append(f'<td class="{" ".join(css)}" data-v="{data}">{escape(cell(v, kinds[c]))}</td>')
        rows.append("<tr>" + "".join(tds) + "</tr>")
    return (
        f'<table data-name="{escape(table.name)}">{caption}<thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def md_table(table: Table) -> str:
    frame = table.frame
    lead = f"**{table.caption}**\n\n" if table.caption else ""
    if frame.empty:
        return lead + "_nothing to show_\n"
    kinds = column_kinds(frame)

    def esc(s: str) -> str:
        return s.replace("|", "\\|").replace("\n", " ")

    head = "| " + " | ".join(esc(str(c)) for c in frame.columns) + " |"
    rule = "| " + " | ".join("---" if kinds[c] == "text" else "---:" for c in frame.columns) + " |"
    rows = [
        "| " + " | ".join(esc(cell(v, kinds[c])) for c, v in zip(frame.columns, r, strict=True)) + " |"
        for r in frame.itertuples(index=False)
    ]
    return lead + "\n".join([head, rule, *rows]) + "\n"


@dataclass(frozen=True)
class Emitter:
    """How one format writes each part of the report; `walk` visits the parts once for every format."""

    title: Callable[[str], str]
    heading: Callable[[str], str]
    paragraph: Callable[[str], str]
    table: Callable[[Table], str]
    chart: Callable[[LineChart], str | None]  # None: the format has no charts
    code: Callable[[str, str], str]  # (name, text)
    page: Callable[[str, str], str]  # (title, the parts joined by newlines)


def walk(title: str, parts: list[Section], emit: Emitter) -> str:
    body = [emit.title(title)]
    for section in parts:
        body.append(emit.heading(section.title))
        body += [emit.paragraph(t) for t in section.text]
        for block in section.blocks:
            if isinstance(block, Table):
                body.append(emit.table(block))
            elif isinstance(block, LineChart):
                if (chart := emit.chart(block)) is not None:
                    body.append(chart)
            else:
                body.append(emit.code(*block))
    return emit.page(title, "\n".join(body))


HTML = Emitter(
    title=lambda title: f"<h1>{escape(title)}</h1>",
    heading=lambda title: f"<h2>{escape(title)}</h2>",
    paragraph=lambda text: f"<p>{_inline(text)}</p>",
    table=html_table,
    chart=lambda chart: f"<figure>{render(chart)}</figure>",
    code=lambda name, text: f"<details><summary>{escape(name)}</summary><pre>{escape(text)}</pre></details>",
    page=lambda title, body: (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>\n"
        f"{body}\n</body></html>\n"
    ),
)
MARKDOWN = Emitter(
    title=lambda title: f"# {title}\n\n_Charts are in the HTML version of this report (`--format html`)._\n",
    heading=lambda title: f"## {title}\n",
    paragraph=lambda text: f"{text}\n",
    table=md_table,
    chart=lambda chart: None,
    code=lambda name, text: f"<details><summary>{name}</summary>\n\n```json\n{text}\n```\n</details>\n",
    page=lambda title, body: body,
)


def to_html(title: str, parts: list[Section]) -> str:
    return walk(title, parts, HTML)


def to_markdown(title: str, parts: list[Section]) -> str:
    return walk(title, parts, MARKDOWN)
