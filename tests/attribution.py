"""Which figures a text attributes to a study, and whether each is one the study printed.

A figure is attributed to a study where it sits in a table column headed "the study" (or "the note", "the
study's ..."), or in the words right after "the study's", "the note's", "the report's", "the seed's",
"the study says", "the note says" (up to the end of the clause). Each such figure must be printed in one
of the seed files (`../shared/seeds/`), as printed or in a unit we convert to (1.44 亿 = 144 M, 8650 万 =
86.5 M, 10 亿 = 1 B, rounded as people write it), or be marked "derived" (or "computed") in the same
cell or clause. Line references ("line 34", "lines 46-57", "L7") are not figures.

Used by tests/test_misattribution.py; pure text in, violations out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

NUMBER = re.compile(r"(?<![A-Za-z0-9_.^])[+\-−]?(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(?![A-Za-z0-9_])")
LINE_REFS = re.compile(r"\b(?:lines?|L)\s?\d+(?:\s?[-–]\s?\d+)?(?:\s?(?:and|,)\s?\d+)*", re.IGNORECASE)
PHRASE = re.compile(
    r"\b(?:the (?:[\w-]+ )?(?:study|note|report|seed|summary|article)(?:'s| says| prints| gives)|(?:study|note)'s)\s",
    re.IGNORECASE,
)
CLAUSE_END = re.compile(r"[;:()\n|]|\.(?:\s|$)|, (?:ours|we|our|this|these|its own)")
HEADER = re.compile(r"the study|the note|study's|note's", re.IGNORECASE)
MARK = re.compile(r"derived|computed|from its table", re.IGNORECASE)
UNITS = {"亿": 1e8, "万": 1e4}


def _value(match: re.Match) -> float:
    return float(match.group(1).replace(",", "") + (match.group(2) or ""))


def seed_numbers(texts: Iterable[str]) -> tuple[set[float], set[float]]:
    """(every number the seeds print, their 亿/万 amounts in M and B as docs write them: 1.44 亿 → 144,
    0.144; 8650 万 → 86.5, 86, 87)."""
    plain: set[float] = set()
    scaled: set[float] = set()
    for text in texts:
        for m in NUMBER.finditer(text):
            v = _value(m)
            plain.add(round(v, 9))
            unit = text[m.end() : m.end() + 2].strip()[:1]
            if unit in UNITS:
                for x in (v * UNITS[unit] / 1e6, v * UNITS[unit] / 1e9):
                    scaled |= {round(x, 9), float(int(x)), float(round(x)), round(x, 1)}
    return plain, scaled


def _figures(text: str) -> list[tuple[str, bool]]:
    """(figure, whether a unit M or B follows it) for each number of `text` that is not a line reference."""
    text = LINE_REFS.sub(" ", text)
    return [
        (m.group(0), text[m.end() : m.end() + 2].strip()[:1] in ("M", "B")) for m in NUMBER.finditer(text)
    ]


def _paragraphs(lines: list[str]) -> list[tuple[int, str]]:
    """(first line number, the text joined) of each run of prose lines (a sentence may wrap)."""
    out: list[tuple[int, str]] = []
    start, block = 0, []
    for i, line in enumerate([*lines, ""], 1):
        if line.strip() and not line.lstrip().startswith("|"):
            start, block = (start or i), [*block, line.strip()]
            continue
        if block:
            out.append((start, " ".join(block)))
        start, block = 0, []
        if line.lstrip().startswith("|"):
            out.append((i, line))
    return out


def _after_phrases(text: str) -> list[tuple[tuple[str, bool], str]]:
    """The figures in the clause after each attribution phrase of `text`, unless marked derived."""
    out = []
    for m in PHRASE.finditer(text):
        rest = text[m.end() :]
        end = CLAUSE_END.search(rest)
        clause = rest[: end.start()] if end else rest
        if not MARK.search(rest[: (end.end() + 40) if end else None]):
            out += [(f, clause) for f in _figures(clause)]
    return out


# "band 0.075 to 0.125" beside a study's figure is the band our rule judges it with (the figure's own
# spread, else ±25 %: analysis/claims.py), not a figure the study printed
BAND = re.compile(r"\bband\s+[-−+\d.,%\s]+(?:to|–|-)\s*[-−+\d.,%]+")


def _table_cells(lines: list[str]) -> list[tuple[int, tuple[str, bool], str]]:
    """The figures in the cells of table columns headed "the study" (or the note's), unless marked."""
    out: list = []
    columns: list[int] = []
    for i, line in enumerate(lines, 1):
        cells = (
            [c.strip() for c in line.strip().strip("|").split("|")] if line.lstrip().startswith("|") else []
        )
        rule = lines[i].replace("|", "").strip() if i < len(lines) else ""
        if cells and rule and set(rule) <= set("-: "):
            columns = [k for k, c in enumerate(cells) if HEADER.search(c)]  # a header row
            continue
        columns = columns if cells else []
        out += [
            (i, f, cells[k])
            for k in columns
            if k < len(cells) and not MARK.search(cells[k])
            for f in _figures(BAND.sub("", cells[k]))
        ]
    return out


def attributed(text: str) -> list[tuple[int, tuple[str, bool], str]]:
    """(line number, (the figure as written, whether M or B follows), its context) for each figure `text`
    attributes to a study without a "derived" mark."""
    lines = text.splitlines()
    out = _table_cells(lines)
    for start, paragraph in _paragraphs(lines):
        out += [(start, f, clause) for f, clause in _after_phrases(paragraph)]
    return out


def misattributed(text: str, printed: tuple[set[float], set[float]]) -> list[tuple[int, str, str]]:
    """(line, figure, context) of each attributed figure of `text` the seeds do not print (`printed`:
    `seed_numbers`; a figure with M or B after it is looked up among the converted amounts)."""
    plain, scaled = printed
    bad = []
    for i, (figure, sized), context in attributed(text):
        if any(figure in band for band in BAND.findall(context)):  # our rule's band, not the study's figure
            continue
        m = NUMBER.search(figure)
        if m and round(_value(m), 9) not in (scaled if sized else plain):
            bad.append((i, figure, context))
    return bad


def unprinted_in_statement(statement: str, printed: tuple[set[float], set[float]]) -> list[str]:
    """The figures of a claim's statement (every one of them is the study's, in every clause, not only
    the first) that the seeds do not print, except in a clause marked derived."""
    plain, scaled = printed
    bad = []
    for clause in re.split(r"[;()]", statement):
        if MARK.search(clause):
            continue
        for figure, sized in _figures(clause):
            m = NUMBER.search(figure)
            if m and round(_value(m), 9) not in (scaled if sized else plain):
                bad.append(figure)
    return bad
