"""Every people-facing view (`orchestrator.views.VIEWS`: runs, curves, depth, geometry, interactions,
decode, tasks) as Parquet, for pandas, Polars or DuckDB.

`DIR/<view>.parquet` holds the view's rows (`SELECT *`, those of the selected grids), rewritten only when
they changed; the curves, which grow, are a directory of parts, `DIR/curves/part-NNNNN.parquet`, each
export adding one part with only the new points, all parts with one schema (the columns' SQL types):
`pd.read_parquet("DIR/curves")`, `pl.read_parquet("DIR/curves/*.parquet")`,
`duckdb.sql("SELECT * FROM 'DIR/curves/*.parquet'")`.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import sqlalchemy as sa

from looplab.lab.export import source
from looplab.lab.export.manifest import Manifest
from looplab.orchestrator.schema import Job, Metric
from looplab.orchestrator.views import VIEW_NAMES

CURVES = "curves"


def _digest(df: pd.DataFrame) -> str:
    h = hashlib.sha256(repr(list(df.columns)).encode())
    h.update(pd.util.hash_pandas_object(df, index=False).to_numpy().tobytes())
    return h.hexdigest()


def _arrow_type(column: sa.Column) -> pa.DataType:
    if isinstance(column.type, sa.Boolean):
        return pa.bool_()
    if isinstance(column.type, sa.Integer):
        return pa.int64()
    if isinstance(column.type, sa.Float | sa.Numeric):
        return pa.float64()
    return pa.string()


def curves_schema(columns: list[str]) -> pa.Schema:
    """The curves view's columns with the types of the table columns they show (metrics, then jobs)."""
    known = {c.name: c for c in Job.__table__.columns} | {c.name: c for c in Metric.__table__.columns}
    return pa.schema([(c, _arrow_type(known[c]) if c in known else pa.string()) for c in columns])


def _write(table: pa.Table, path: Path) -> None:
    """Atomically: a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, tmp)
    tmp.replace(path)


def export(url: str, out: Path, job_ids: list[int] | None, manifest: Manifest) -> dict[str, int]:
    """Write what changed since the last export to `out`; returns rows written per view."""
    written: dict[str, int] = {}
    for name in VIEW_NAMES:
        if name == CURVES:
            continue
        df = source.view(url, name, job_ids)
        digest = _digest(df)
        if manifest.views.get(name) != digest:
            _write(pa.Table.from_pandas(df, preserve_index=False), out / f"{name}.parquet")
            manifest.views[name] = digest
            written[name] = len(df)
    parts, latest = [], source.latest_steps(url, job_ids)
    for job_id, steps in sorted(latest.items()):
        entry = manifest.job(job_id)
        if source.has_new(steps, entry.keys):
            new = source.new_points(url, job_id, entry.keys, table=CURVES)
            entry.keys.update({k: int(s) for k, s in new.groupby("key")["step"].max().items()})
            parts.append(new)
    parts = [p for p in parts if not p.empty]
    if parts:
        df = pd.concat(parts, ignore_index=True)
        _write(
            pa.Table.from_pandas(df, schema=curves_schema(list(df.columns)), preserve_index=False),
            out / CURVES / f"part-{manifest.parts:05d}.parquet",
        )
        manifest.parts += 1
        written[CURVES] = len(df)
    manifest.save()
    return written


def how_to_read(out: Path) -> str | None:
    return None  # the module's docstring: pandas, Polars or DuckDB read the files directly
