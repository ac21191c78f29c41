"""Generic row generation for any schema: fill every table of a reflected database with rows.

Used by the data-survives-upgrade harness, which must work for revisions written after this file:
so nothing here names a table. Rows are derived from each column's type; foreign keys take values
from rows already inserted in the parent table (tables are filled parents first).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Boolean, Connection, Float, Integer, MetaData, Numeric, String, Table, select

ROWS_PER_TABLE = 3


def _value(table: Table, col, i: int, fk_rows: dict[str, list[dict]]) -> Any:
    if col.foreign_keys:
        fk = next(iter(col.foreign_keys))
        parents = fk_rows[fk.column.table.name]
        # the k-th foreign key column of a table is shifted by k, so (job_id, depends_on) pairs differ
        k = [c.name for c in table.columns if c.foreign_keys].index(col.name)
        return parents[(i + k) % len(parents)][fk.column.name]
    t = col.type
    pos = list(table.columns).index(col)
    if isinstance(t, Boolean):
        return i % 2 == 0
    if isinstance(t, Integer):
        return i + 1 if col.primary_key else 1000 * (pos + 1) + i
    if isinstance(t, Float | Numeric):
        return i + pos / 8  # exactly representable: compared with ==
    if isinstance(t, String):
        s = f"{col.name}-{i}"
        return s[: t.length] if t.length else s
    return f"{col.name}-{i}"


def fill(conn: Connection, metadata: MetaData, skip: set[str]) -> dict[str, list[dict]]:
    """Insert ROWS_PER_TABLE rows into every table of `metadata` (reflected), parents first."""
    inserted: dict[str, list[dict]] = {}
    for table in metadata.sorted_tables:
        if table.name in skip:
            continue
        rows = [{c.name: _value(table, c, i, inserted) for c in table.columns} for i in range(ROWS_PER_TABLE)]
        conn.execute(table.insert(), rows)
        inserted[table.name] = rows
    return inserted


def read(conn: Connection, table: Table, columns: list[str]) -> list[dict]:
    """The rows of `table`, only `columns`, in primary-key order."""
    cols = [table.c[c] for c in columns]
    order = list(table.primary_key.columns) or cols
    return [dict(r._mapping) for r in conn.execute(select(*cols).order_by(*order))]
