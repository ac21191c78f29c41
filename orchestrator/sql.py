"""`looplab sql`: read-only SQL on the results database, printed as a table, CSV or JSON lines.

Two lines of defence keep the database unchanged:
1. `check_readonly(sql)` refuses, before the database is opened, anything but one SELECT / WITH /
   EXPLAIN / read-only PRAGMA statement. It strips comments, string literals and quoted identifiers
   first, so `WITH x AS (...) DELETE ...` or a write hidden after a comment is still seen, and a
   keyword inside a string ('DROP me') is not mistaken for one.
2. The query runs on `readonly_engine()`: SQLite `mode=ro` and `PRAGMA query_only=ON`, so even a
   statement the check missed cannot write.
"""

from __future__ import annotations

import csv
import json
import math
import re
import sys
from typing import Any

from orchestrator.db import readonly_engine
from orchestrator.errors import DatabaseError

ALLOWED_FIRST = ("SELECT", "WITH", "EXPLAIN", "PRAGMA")
# Words that only appear in statements that write or change the connection's state.
WRITE_WORDS = (
    "INSERT", "UPDATE", "DELETE", "REPLACE", "UPSERT", "MERGE", "DROP", "CREATE", "ALTER", "ATTACH",
    "DETACH", "VACUUM", "REINDEX", "ANALYZE", "BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE",
)  # fmt: skip
# PRAGMAs that only read. Anything else (an assignment, a call with an argument that sets a value,
# wal_checkpoint, optimize, incremental_vacuum, ...) is refused.
READ_PRAGMAS = {
    "table_info", "table_xinfo", "table_list", "index_list", "index_info", "index_xinfo",
    "foreign_key_list", "foreign_key_check", "integrity_check", "quick_check", "database_list",
    "collation_list", "function_list", "module_list", "pragma_list", "compile_options",
    "user_version", "schema_version", "application_id", "data_version", "encoding", "journal_mode",
    "foreign_keys", "page_count", "page_size", "freelist_count", "busy_timeout", "query_only",
    "auto_vacuum", "synchronous", "cache_size", "max_page_count",
}  # fmt: skip
# Read PRAGMAs whose argument names an object to inspect rather than a value to set.
READ_PRAGMAS_WITH_ARG = {
    "table_info", "table_xinfo", "index_list", "index_info", "index_xinfo", "foreign_key_list",
    "foreign_key_check", "integrity_check", "quick_check", "table_list",
}  # fmt: skip
MAX_CELL = 40  # characters shown per cell in the table format


class WriteRefused(DatabaseError):
    """A statement that could write was given to a read-only path."""

    def __init__(self, what: str):
        self.what = what
        super().__init__(f"only read-only statements are accepted (SELECT, WITH, EXPLAIN); refused: {what}")


def strip_sql(sql: str) -> str:
    """`sql` with comments removed and every string literal / quoted identifier blanked.

    What is left is keywords, bare identifiers, numbers and punctuation: safe to scan for words.
    """
    out: list[str] = []
    i, n = 0, len(sql)
    closers = {"'": "'", '"': '"', "`": "`", "[": "]"}
    while i < n:
        c = sql[i]
        if sql.startswith("--", i):
            j = sql.find("\n", i)
            i = n if j < 0 else j
            out.append(" ")
        elif sql.startswith("/*", i):
            j = sql.find("*/", i + 2)
            i = n if j < 0 else j + 2
            out.append(" ")
        elif c in closers:
            close = closers[c]
            j = i + 1
            while j < n:
                if sql[j] == close:
                    if close != "]" and j + 1 < n and sql[j + 1] == close:  # doubled quote = escaped
                        j += 2
                        continue
                    break
                j += 1
            out.append(" '' " if c == "'" else ' "_" ')
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def check_readonly(sql: str) -> None:
    """Raise WriteRefused unless `sql` is a single read-only statement."""
    text = strip_sql(sql).strip()
    statements = [s for s in text.split(";") if s.strip()]
    if not statements:
        raise WriteRefused("an empty statement")
    if len(statements) > 1:
        raise WriteRefused("multiple statements")
    body = statements[0].strip()
    words = re.findall(r"[A-Za-z_][A-Za-z0-9_$]*", body)
    first = words[0].upper() if words else body[:20]
    if first not in ALLOWED_FIRST:
        raise WriteRefused(first)
    pragma = re.search(r"\bPRAGMA\b", body, re.I)
    if pragma:  # also behind EXPLAIN
        _check_pragma(body[pragma.start() :])
    for m in re.finditer(r"[A-Za-z_][A-Za-z0-9_$]*", body):
        word = m.group(0).upper()
        if word not in WRITE_WORDS:
            continue
        if word == "REPLACE" and re.match(r"\s*\(", body[m.end() :]):
            continue  # replace(x, a, b) is a string function
        raise WriteRefused(word)


def _check_pragma(body: str) -> None:
    m = re.fullmatch(r"PRAGMA\s+(?:[A-Za-z_]\w*\s*\.\s*)?([A-Za-z_]\w*)\s*(.*)", body, re.I | re.S)
    if not m:
        raise WriteRefused("PRAGMA")
    name, rest = m.group(1).lower(), m.group(2).strip()
    if rest.startswith("="):
        raise WriteRefused(f"PRAGMA {name} = ... (an assignment)")
    if name not in READ_PRAGMAS:
        raise WriteRefused(f"PRAGMA {name}")
    if rest and not (rest.startswith("(") and name in READ_PRAGMAS_WITH_ARG):
        raise WriteRefused(f"PRAGMA {name}(...) (sets a value)")


def fetch(url: str | None, sql: str) -> tuple[list[str], list[tuple]]:
    """Column names and rows of a read-only query (checked first, then run on a read-only engine)."""
    from sqlalchemy.exc import DBAPIError

    check_readonly(sql)
    eng = readonly_engine(url)
    try:
        with eng.connect() as conn:
            # exec_driver_sql: the text goes to the driver as is (no `:name` bind parsing).
            result = conn.exec_driver_sql(sql.strip().rstrip(";"))
            if not result.returns_rows:
                return [], []
            return list(result.keys()), [tuple(r) for r in result.fetchall()]
    except DBAPIError as e:
        raise DatabaseError(f"{e.orig}") from None


def query(url: str | None, sql: str):
    """A read-only query as a pandas DataFrame. Raises WriteRefused for a statement that could write."""
    import pandas as pd

    columns, rows = fetch(url, sql)
    return pd.DataFrame.from_records(rows, columns=columns)


# ---------------------------------------------------------------- output


def _cell(v: Any) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, bytes):
        return f"<{len(v)} bytes>"
    s = str(v).replace("\n", "\\n")
    return s if len(s) <= MAX_CELL else s[: MAX_CELL - 1] + "…"


def format_table(columns: list[str], rows: list[tuple]) -> str:
    """Aligned columns (numbers right-aligned), wide cells truncated, and a row count."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    numeric = [
        all(isinstance(row[i], int | float) or row[i] is None for row in rows) for i in range(len(columns))
    ]

    def line(values: list[str]) -> str:
        parts = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)]
        return "  ".join(parts).rstrip()

    out = [line(columns), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in cells]
    out.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(out)


def _json_value(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None  # JSON has no NaN/Infinity
    if isinstance(v, bytes):
        return v.hex()
    return v


def cli_sql(args) -> int:
    """`looplab sql "SELECT ..." [--csv | --json]`."""
    try:
        columns, rows = fetch(args.db, args.query)
    except WriteRefused as e:
        print(f"looplab sql: {e}", file=sys.stderr)
        return 2
    if args.csv:
        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerow(columns)
        w.writerows(rows)
    elif args.json:
        for row in rows:
            print(json.dumps({c: _json_value(v) for c, v in zip(columns, row)}))
    else:
        print(format_table(columns, rows))
    return 0
