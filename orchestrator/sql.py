"""`looplab sql`: read-only SQL on the results database, printed as a table, CSV or JSON lines.

Two lines of defence keep the database unchanged, on SQLite and on PostgreSQL alike:
1. `check_readonly(sql)` refuses, before the database is opened, anything but one SELECT / WITH /
   EXPLAIN / read-only PRAGMA statement. It strips comments, string literals and quoted identifiers
   first, so `WITH x AS (...) DELETE ...` or a write hidden after a comment is still seen, and a
   keyword inside a string ('DROP me') is not mistaken for one. Functions with side effects
   (PostgreSQL's set_config, pg_terminate_backend, nextval, ...) are refused by name.
2. The query runs on `readonly_engine()` in a read-only transaction: SQLite `mode=ro` and
   `PRAGMA query_only=ON`; PostgreSQL a session with `default_transaction_read_only=on` and, per query,
   `SET TRANSACTION READ ONLY`. So even a statement the check missed cannot write. (A third line, for
   tools other than looplab: `looplab db grant-reader ROLE`, a role that holds SELECT only.)

Every query also has a deadline (`timeout_s`, default DEFAULT_TIMEOUT_S): PostgreSQL's
`statement_timeout`, and on SQLite a progress handler that interrupts the statement once the deadline
has passed. A runaway query (a recursive CTE without end) stops with QueryTimeout, which names the limit.
"""

from __future__ import annotations

import csv
import json
import math
import re
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from looplab.model.fields import number
from looplab.orchestrator.db import readonly_engine
from looplab.orchestrator.errors import DatabaseError

DEFAULT_TIMEOUT_S = 10.0
# SQLite: the progress handler runs every this many virtual-machine instructions (about a millisecond)
SQLITE_PROGRESS_STEPS = 10_000
PG_QUERY_CANCELED = "57014"  # SQLSTATE of a statement stopped by statement_timeout

ALLOWED_FIRST = ("SELECT", "WITH", "EXPLAIN", "PRAGMA")
# Words that only appear in statements that write or change the connection's state.
WRITE_WORDS = (
    "INSERT",
    "UPDATE",
    "DELETE",
    "REPLACE",
    "UPSERT",
    "MERGE",
    "DROP",
    "CREATE",
    "ALTER",
    "ATTACH",
    "DETACH",
    "VACUUM",
    "REINDEX",
    "ANALYZE",
    "BEGIN",
    "COMMIT",
    "ROLLBACK",
    "SAVEPOINT",
    "RELEASE",
    "INTO",
    "TRUNCATE",
    "GRANT",
    "REVOKE",
    "COPY",
    "LOCK",
    "REFRESH",
    "CLUSTER",
    "NOTIFY",
    "LISTEN",
)
# Functions that change state although called from a SELECT (PostgreSQL; SQLite has none of these).
# A read-only transaction refuses some (nextval), not all (set_config, pg_terminate_backend).
WRITE_FUNCTIONS = (
    "set_config",
    "nextval",
    "setval",
    "pg_terminate_backend",
    "pg_cancel_backend",
    "pg_reload_conf",
    "pg_rotate_logfile",
    "pg_switch_wal",
    "pg_notify",
    "pg_create_restore_point",
    "lo_import",
    "lo_export",
    "lo_unlink",
    "lo_create",
    "lo_put",
    "lo_from_bytea",
    "dblink_exec",
    "pg_file_write",
    "load_extension",
    "pg_drop_replication_slot",
    "pg_create_physical_replication_slot",
    "pg_create_logical_replication_slot",
)
WRITE_FUNCTION_PREFIXES = ("pg_advisory",)  # session/transaction locks held past the query
# Read PRAGMAs whose argument names an object to inspect rather than a value to set.
READ_PRAGMAS_WITH_ARG = {
    "table_info",
    "table_xinfo",
    "table_list",
    "index_list",
    "index_info",
    "index_xinfo",
    "foreign_key_list",
    "foreign_key_check",
    "integrity_check",
    "quick_check",
}
# PRAGMAs that only read: those above, and these (without an argument, or with none that sets a value).
# Anything else (an assignment, a call with an argument that sets a value, wal_checkpoint, optimize,
# incremental_vacuum, ...) is refused.
READ_PRAGMAS = READ_PRAGMAS_WITH_ARG | {
    "database_list",
    "collation_list",
    "function_list",
    "module_list",
    "pragma_list",
    "compile_options",
    "user_version",
    "schema_version",
    "application_id",
    "data_version",
    "encoding",
    "journal_mode",
    "foreign_keys",
    "page_count",
    "page_size",
    "freelist_count",
    "busy_timeout",
    "query_only",
    "auto_vacuum",
    "synchronous",
    "cache_size",
    "max_page_count",
}
DOLLAR_QUOTE = re.compile(r"\$(?:[A-Za-z_][A-Za-z0-9_]*)?\$")  # PostgreSQL: $$ or $tag$
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
        elif c == "$" and (dollar := DOLLAR_QUOTE.match(sql, i)) and not _in_word(sql, i):
            # PostgreSQL dollar quoting: $$ ... $$ or $tag$ ... $tag$ is a string literal
            j = sql.find(dollar.group(0), dollar.end())
            i = n if j < 0 else j + len(dollar.group(0))
            out.append(" '' ")
        elif c in closers:
            close = closers[c]
            # PostgreSQL E'...' strings: a backslash escapes the next character (E'it\'s')
            backslash = c == "'" and i > 0 and sql[i - 1] in "eE" and not _in_word(sql, i - 1)
            j = i + 1
            while j < n:
                if backslash and sql[j] == "\\":
                    j += 2
                    continue
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


def _in_word(sql: str, i: int) -> bool:
    """Whether position `i` continues an identifier (PostgreSQL names may contain `$`)."""
    return i > 0 and (sql[i - 1].isalnum() or sql[i - 1] in "_$")


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
        if word == "ANALYZE" and re.fullmatch(r"\s*EXPLAIN\s*(\([^)]*)?", body[: m.start()], re.I):
            continue  # PostgreSQL's EXPLAIN ANALYZE runs the statement that follows: checked on its own
        raise WriteRefused(word)
    called = [m.group(1) for m in re.finditer(r"([A-Za-z_][A-Za-z0-9_$]*)\s*\(", body)]
    # a quoted name is blanked above, yet "set_config"(...) is the same call (and could switch the
    # dashboard's session to another person's role): scanned in the text itself, literals and all
    called += [m.group(1).replace('""', '"') for m in re.finditer(r'"((?:[^"]|"")+)"\s*\(', sql)]
    for name in map(str.lower, called):
        if name in WRITE_FUNCTIONS or name.startswith(WRITE_FUNCTION_PREFIXES):
            raise WriteRefused(f"{name}() (a function that changes state)")


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


class QueryTimeout(DatabaseError):
    """A query ran past its statement timeout and was stopped (the database is unchanged)."""

    def __init__(self, timeout_s: float):
        self.timeout_s = timeout_s
        super().__init__(
            f"query stopped: it ran longer than the statement timeout of {timeout_s:g} s "
            "(raise it with `looplab sql --timeout SECONDS` or the SQL page's timeout setting)"
        )


def check_timeout(timeout_s: Any, name: str = "timeout") -> float:
    """A statement timeout in seconds: a number > 0 (ConfigError naming `name` otherwise)."""
    return number(name, timeout_s, lo=0.0, lo_open=True)


def run_readonly(
    url: str | None, sql: str, timeout_s: float = DEFAULT_TIMEOUT_S, limit: int | None = None
) -> tuple[list[str], list[tuple], bool]:
    """(column names, rows, whether rows were cut off at `limit`) of one read-only query: checked by
    `check_readonly` first, then run in a read-only transaction that is stopped after `timeout_s`.

    Raises WriteRefused (nothing was run), QueryTimeout, or DatabaseError (the database's message)."""
    from sqlalchemy.exc import DBAPIError

    check_readonly(sql)
    timeout_s = check_timeout(timeout_s)
    eng = readonly_engine(url)
    try:
        with eng.connect() as conn, _deadline(conn, timeout_s) as timed_out:
            try:
                # exec_driver_sql: the text goes to the driver as is (no `:name` bind parsing).
                result = conn.exec_driver_sql(sql.strip().rstrip(";"))
                if not result.returns_rows:
                    return [], [], False
                rows = result.fetchall() if limit is None else result.fetchmany(limit + 1)
                columns = list(result.keys())
            except DBAPIError as e:
                if timed_out(e.orig):
                    raise QueryTimeout(timeout_s) from None
                raise
    except DBAPIError as e:
        raise DatabaseError(f"{e.orig}".strip()) from None
    truncated = limit is not None and len(rows) > limit
    return columns, [tuple(r) for r in rows[:limit]], truncated


@contextmanager
def _deadline(conn, timeout_s: float) -> Iterator[Callable[[BaseException], bool]]:
    """Make the connection's next statements read-only and stop them after `timeout_s`; yields a test
    that tells whether a driver error is that stop."""
    if conn.dialect.name == "postgresql":
        # The session already starts read-only (readonly_engine); this makes it hold whatever a previous
        # query of this pooled connection may have changed. Both settings end with the transaction.
        conn.exec_driver_sql("SET TRANSACTION READ ONLY")
        conn.exec_driver_sql(f"SET LOCAL statement_timeout = {max(1, round(timeout_s * 1000))}")
        yield lambda error: getattr(error, "sqlstate", None) == PG_QUERY_CANCELED
        return
    if conn.dialect.name != "sqlite":
        yield lambda error: False  # another backend: read-only engine only, no deadline
        return
    raw = conn.connection.dbapi_connection
    deadline = time.monotonic() + timeout_s
    stopped = []

    def past_deadline() -> int:  # non-zero: SQLite interrupts the statement ("interrupted")
        if time.monotonic() > deadline:
            stopped.append(True)
            return 1
        return 0

    raw.set_progress_handler(past_deadline, SQLITE_PROGRESS_STEPS)
    try:
        yield lambda error: bool(stopped) and "interrupted" in str(error)
    finally:
        raw.set_progress_handler(None, SQLITE_PROGRESS_STEPS)


def fetch(url: str | None, sql: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> tuple[list[str], list[tuple]]:
    """Column names and rows of a read-only query (checked first, then run on a read-only engine in a
    read-only transaction, stopped with QueryTimeout after `timeout_s` seconds)."""
    columns, rows, _ = run_readonly(url, sql, timeout_s)
    return columns, rows


def query(url: str | None, sql: str, timeout_s: float = DEFAULT_TIMEOUT_S):
    """A read-only query as a pandas DataFrame. Raises WriteRefused for a statement that could write,
    QueryTimeout when it runs past `timeout_s`."""
    import pandas as pd

    columns, rows = fetch(url, sql, timeout_s)
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
    """`looplab sql "SELECT ..." [--csv | --json] [--timeout SECONDS]`."""
    timeout_s = DEFAULT_TIMEOUT_S if getattr(args, "timeout", None) is None else args.timeout
    timeout_s = check_timeout(timeout_s, "--timeout")
    try:
        columns, rows = fetch(args.db, args.query, timeout_s)
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
