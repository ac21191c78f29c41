"""Reading a test queue's database with plain SQL: the queue tests check the rows it wrote."""

from __future__ import annotations

import sqlalchemy as sa

from looplab import Queue


def rows(q: Queue, sql: str, **params) -> list:
    """Every row `sql` (with `:name` parameters) returns from the database of `q`."""
    with q.eng.connect() as conn:
        return conn.execute(sa.text(sql), params).all()
