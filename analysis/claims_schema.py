"""The claims registry as data: one TOML file per study in `analysis/claims_data/`, each claim a
`[[claim]]` table, checked against `SCHEMA` when the registry is imported and turned into the records of
`analysis/claims_base.py`. A file that breaks the schema stops the import with a message naming the
file, the claim and the field, and what is accepted.

A claim's fields (see `claims_base.Claim`): id (the study's key, a dot, a name), lines [first, last] of
the seed file, where (the section), statement (our own words, never the seed's sentence), kind, side,
unit (the enums' values), scale {size, tokens, seeds, device, note, lines} (each as printed; lines:
the seed's [first, last] lines that print the size and tokens, required with either), metric {frame,
column, series [[name, variant]], at, note} (frame "" where looplab does not measure it yet), terms,
points [[series, x, text]] or [[series, x, text, seed]] (the figures as printed), or the name of a
value table several claims read (a top-level `[tables]` entry of the file), stated [text] (the
study's own summary of the figure, one text or two for a range), stated_sign, across_models,
higher_better, line, quotes [text], contradiction, own_evidence, no_band (why no honest band of the
figure's size exists).

Pure Python (tomllib): the dashboard and the CLI read it cheaply.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from looplab.analysis.claims_base import (
    Claim,
    Comparison,
    Metric,
    Point,
    Quote,
    Scale,
    Side,
    Unit,
    parse_number,
)
from looplab.model.errors import ConfigError

DATA_DIR = Path(__file__).resolve().parent / "claims_data"
REQUIRED = {"id": str, "lines": list, "where": str, "statement": str, "kind": str, "side": str, "unit": str}
OPTIONAL = {
    "scale": dict,
    "metric": dict,
    "terms": list,
    "points": (list, str),
    "stated": list,
    "stated_sign": int,
    "across_models": bool,
    "higher_better": bool,
    "line": float,
    "quotes": list,
    "contradiction": str,
    "own_evidence": str,
    "no_band": str,
}
SCHEMA = {**REQUIRED, **OPTIONAL}
SCALE_KEYS = {"size", "tokens", "seeds", "device", "note", "lines"}
METRIC_KEYS = {"frame", "column", "series", "at", "note"}
# how many operands each kind's terms hold (pairwise kinds: any number of pairs, or one key)
TERM_COUNTS = {
    Comparison.SHARE: 4,
    Comparison.LOCATION: 3,
    Comparison.TREND: 2,
    Comparison.EXPONENT: 3,
    Comparison.RANK: 3,
}


def _tuples(value):
    """TOML arrays as the tuples the records hold (terms and keys are compared as tuples)."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def _enum(enum, text: str, where: str):
    try:
        return enum(text)
    except ValueError:
        accepted = ", ".join(repr(str(e)) for e in enum)
        raise ConfigError(f"{where}: {text!r} is not accepted; accepted: {accepted}") from None


def _check_fields(raw: dict, where: str) -> None:
    """Every required field present with its type, no field the schema does not know."""
    for key in REQUIRED:
        if key not in raw:
            raise ConfigError(f"{where}: field {key!r} is missing (required: {', '.join(REQUIRED)})")
    for key, value in raw.items():
        if key not in SCHEMA:
            raise ConfigError(f"{where}: field {key!r} is not in the schema; accepted: {', '.join(SCHEMA)}")
        want = SCHEMA[key]
        ok = isinstance(value, want) or (
            want is float and isinstance(value, int) and not isinstance(value, bool)
        )
        if not ok or (want is int and isinstance(value, bool)):
            raise ConfigError(f"{where}: field {key!r} must be {want.__name__}, got {value!r}")
    _check_lines(raw["lines"], where, "lines")


def _check_lines(lines: list, where: str, field: str) -> None:
    if len(lines) != 2 or not all(isinstance(n, int) and n >= 1 for n in lines) or lines[0] > lines[1]:
        raise ConfigError(f"{where}: field {field!r} must be [first, last] line numbers, got {lines!r}")


def _quote(text, where: str) -> Quote:
    if not isinstance(text, str):
        raise ConfigError(f'{where}: {text!r} must be a number as printed, in quotes (e.g. "0.016", "94%")')
    try:
        parse_number(text)
    except ValueError as e:
        raise ConfigError(f"{where}: {e}") from None
    return Quote(text)


def _points(raw: list | str, tables: dict, where: str) -> tuple[Point, ...]:
    """A claim's points: a list of [series, x, text(, seed)], or the name of a value table of the file."""
    if isinstance(raw, str):
        if raw not in tables:
            accepted = ", ".join(tables) or "none in this file"
            raise ConfigError(f"{where}: field 'points': no value table {raw!r}; tables: {accepted}")
        raw = tables[raw]
    out = []
    for p in raw:
        if not isinstance(p, list) or len(p) not in (3, 4):
            raise ConfigError(
                f"{where}: field 'points': {p!r} must be [series, x, text] or [series, x, text, seed]"
            )
        seed = p[3] if len(p) == 4 else None
        out.append(Point(p[0], p[1], _quote(p[2], f"{where}: field 'points'"), seed))
    return tuple(out)


def _sub(raw: dict, key: str, accepted: set[str], where: str) -> dict:
    table = raw.get(key, {})
    unknown = set(table) - accepted
    if unknown:
        raise ConfigError(
            f"{where}: field {key!r} has {sorted(unknown)}; accepted: {', '.join(sorted(accepted))}"
        )
    return table


def _scale(raw: dict, where: str) -> Scale:
    """A claim's scale; `lines` ([first, last] of the seed) is required where it prints a size or tokens."""
    lines = raw.get("lines", [])
    if lines:
        _check_lines(lines, where, "scale.lines")
    scale = Scale(**{**raw, "seeds": tuple(raw.get("seeds", ())), "lines": tuple(lines)})
    if (scale.size or scale.tokens) and not lines:
        raise ConfigError(
            f"{where}: field 'scale.lines' is missing: the seed's lines that print {scale.size or scale.tokens!r}"
        )
    return scale


def claim_of(raw: dict, study: str, prefix: str, where: str, tables: dict | None = None) -> Claim:
    """One `[[claim]]` table checked against the schema and made a record (`where` names the file, ids
    start with `prefix` and a dot)."""
    where = f"{where}: claim {raw.get('id', '?')!r}"
    _check_fields(raw, where)
    if not raw["id"].startswith(f"{prefix}."):
        raise ConfigError(f"{where}: field 'id' must start with {prefix + '.'!r}")
    kind = _enum(Comparison, raw["kind"], f"{where}: field 'kind'")
    terms = _tuples(raw.get("terms", []))
    if kind in TERM_COUNTS and len(terms) != TERM_COUNTS[kind]:
        raise ConfigError(f"{where}: field 'terms' of a {kind} claim holds {TERM_COUNTS[kind]} operands")
    if kind == Comparison.EXPONENT and terms[2] == "":  # TOML has no None: "" is "no base"
        terms = (*terms[:2], None)
    scale = _sub(raw, "scale", SCALE_KEYS, where)
    metric = _sub(raw, "metric", METRIC_KEYS, where)
    return Claim(
        raw["id"],
        study,
        raw["where"],
        tuple(raw["lines"]),
        raw["statement"],
        kind,
        _enum(Side, raw["side"], f"{where}: field 'side'"),
        _enum(Unit, raw["unit"], f"{where}: field 'unit'"),
        _scale(scale, where),
        Metric(**{"frame": "", "column": "", **metric, "series": _tuples(metric.get("series", []))}),
        terms=terms,
        points=_points(raw.get("points", []), tables or {}, where),
        stated=tuple(_quote(t, f"{where}: field 'stated'") for t in raw.get("stated", [])),
        stated_sign=raw.get("stated_sign", 1),
        across_models=raw.get("across_models", True),
        higher_better=raw.get("higher_better", False),
        line=float(raw["line"]) if "line" in raw else None,
        quotes=tuple(_quote(t, f"{where}: field 'quotes'") for t in raw.get("quotes", [])),
        contradiction=raw.get("contradiction", ""),
        own_evidence=raw.get("own_evidence", ""),
        no_band=raw.get("no_band", ""),
    )


def load(name: str, study: str, prefix: str, folder: Path = DATA_DIR) -> tuple[Claim, ...]:
    """The claims of `folder/name.toml` for `study` (ids `prefix.NAME`), each checked against the
    schema; ids unique within the file."""
    path = folder / f"{name}.toml"
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path.name}: not valid TOML ({e})") from None
    unknown = set(data) - {"claim", "tables"}
    if unknown:
        raise ConfigError(f"{path.name}: top-level {sorted(unknown)}; accepted: [[claim]] and [tables]")
    tables = data.get("tables", {})
    claims = tuple(claim_of(raw, study, prefix, path.name, tables) for raw in data.get("claim", []))
    ids = [c.id for c in claims]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"{path.name}: claim ids repeat: {sorted({i for i in ids if ids.count(i) > 1})}")
    return claims
