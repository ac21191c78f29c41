"""Study reports: `looplab report GRID... -o study.html` (or `--format md`), a page a research note can be
built from: what was run (grids as submitted, code version), the runs, the lean-recipe study's findings
when the runs are that study, iso-data / iso-FLOP / iso-time with intervals and verdicts, depth curves,
loop geometry, decode, the scaling-law fit, task scores and throughput.

- content.py: every number, read by `orchestrator.frames` and computed by the dashboard pages' own
  `analysis` functions with their defaults (so the report and the pages agree);
- sections.py: the sections in reading order and how a value is shown;
- svg.py: line charts as inline SVG (the HTML needs nothing from the network);
- render.py: the HTML page and the Markdown text.
"""

from __future__ import annotations

from pathlib import Path

from looplab.lab.report.content import StudyData, study_data
from looplab.lab.report.render import to_html, to_markdown
from looplab.lab.report.sections import sections

FORMATS = ("html", "md")

__all__ = ["FORMATS", "StudyData", "cli_report", "report_text", "study_data", "write_report"]


def report_text(url: str, grids: list[str], fmt: str = "html") -> str:
    """The report on `grids` (names or ids) of the database at `url`, as HTML or Markdown text."""
    from looplab.model import fields

    fmt = fields.choice("--format", fmt, FORMATS)
    data = study_data(url, grids)
    title = f"looplab study report: {', '.join(data.grids['name'])}"
    parts = sections(data)
    return to_html(title, parts) if fmt == "html" else to_markdown(title, parts)


def write_report(url: str, grids: list[str], path: str | Path, fmt: str = "html") -> Path:
    """Write the report to `path` (atomically: a reader never sees half a page); returns the path."""
    path = Path(path)
    text = report_text(url, grids, fmt)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return path


def cli_report(args) -> int:
    """`looplab report GRID... [-o FILE] [--format html|md]`; without -o the text goes to stdout."""
    from looplab.orchestrator.db import resolve_url

    url = resolve_url(args.db)
    fmt = args.format or ("md" if args.output and str(args.output).endswith(".md") else "html")
    if not args.output:
        print(report_text(url, args.grids, fmt), end="")
        return 0
    print(f"report: {write_report(url, args.grids, args.output, fmt).absolute()}")
    return 0
