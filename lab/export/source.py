"""What an export reads, through the read-only engine (`orchestrator.frames.engine`: SQLite `mode=ro`):
the selected training runs with their resolved configuration, their metric points newer than what a
target already holds, their depth sweeps, and any view's rows for the selected grids.

A run's parameters are its *resolved* configuration: the stored spec read through the train job's own
`Spec` (every default filled in) and the resolved `ModelConfig` (`model.*`), flattened to dotted keys,
plus the variant and architecture columns stored with the job (`variant.*`). A spec that no longer
reads (a test double's, an old one) is exported as stored.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from typing import Any

import pandas as pd
import sqlalchemy as sa
from sqlalchemy import text

from looplab.orchestrator import frames, jobkinds
from looplab.orchestrator.states import JobStatus
from looplab.orchestrator.variants import ARCH_COLUMNS

RESULT_COLUMNS = (
    "final_val_loss",
    "final_val_bpb",
    "final_train_loss",
    "best_loops",
    "best_loop_val_loss",
    "tokens",
    "steps",
    "train_seconds",
    "tokens_per_s",
    "train_flops",
    "mfu",
)
VARIANT_PARAMS = ("variant_id", "variant_label", "loop_sampler", "loops", *ARCH_COLUMNS)
DEPTH_KEY = "depth/val_loss"  # a depth sweep's loss, exported as a curve with step = inference loops


@dataclass
class Run:
    """One training job as a run of another tool."""

    job_id: int
    grid: str
    recipe: str | None
    size: str | None
    seed: int | None
    status: str
    variant_id: str | None
    variant_label: str | None
    started_at: float | None
    finished_at: float | None
    config: dict[str, Any]  # the resolved configuration, nested (W&B's config)
    params: dict[str, str]  # the same flattened to dotted keys, with the variant columns (MLflow's params)
    variant: dict[str, Any]  # the variant and architecture columns stored with the job
    results: dict[str, float]  # the runs view's results, once the run succeeded

    @property
    def name(self) -> str:
        seed = "?" if self.seed is None else self.seed
        return f"{self.variant_label or self.recipe} · seed {seed} · #{self.job_id}"

    @property
    def finished(self) -> bool:
        return JobStatus(self.status).finished

    @property
    def started(self) -> bool:
        return self.started_at is not None or self.status != JobStatus.QUEUED


def selected_job_ids(url: str, grids: list[str] | None, where: str = "export") -> list[int] | None:
    """The ids of every job of `grids` (names or ids; ConfigError naming an unknown one), None for all."""
    if not grids:
        return None
    picked = frames.grid_rows(url, grids, where)
    with frames.engine(url).connect() as conn:
        rows = conn.execute(
            text("SELECT id FROM jobs WHERE grid_id IN :g").bindparams(sa.bindparam("g", expanding=True)),
            {"g": [int(i) for i in picked["id"]]},
        ).all()
    return [r[0] for r in rows]


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"model": {"loops": 8}} -> {"model.loops": 8}; lists stay values."""
    out: dict[str, Any] = {}
    for key, value in d.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


def resolved_config(stored: dict[str, Any]) -> dict[str, Any]:
    """The train spec with every default (`workers.train.spec.Spec`) and its resolved model config, as
    plain JSON values."""
    from looplab.workers.train.spec import Spec

    try:
        spec = Spec.from_dict(stored)
        resolved = {**spec.to_dict(), "model": dataclasses.asdict(spec.resolved_model_config())}
    except Exception:  # a spec this code no longer reads is exported as it was stored
        return dict(stored)
    return json.loads(json.dumps(resolved, default=str))


def _param_value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _native(value: Any) -> Any:
    """A numpy scalar as the Python value it holds (an integral float column value as an int)."""
    value = value.item() if hasattr(value, "item") else value
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _present(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def runs(url: str, job_ids: list[int] | None) -> list[Run]:
    """The training runs among `job_ids` (None: all), in id order, with their configuration and results."""
    ids = "" if job_ids is None else "AND v.job_id IN :ids"
    stmt = text(f"""
        SELECT v.*, j.config, j.started_at FROM runs v JOIN jobs j ON j.id = v.job_id
        WHERE j.kind IN :trainers {ids} ORDER BY v.job_id""")
    stmt = stmt.bindparams(sa.bindparam("trainers", expanding=True))
    params: dict[str, Any] = {"trainers": list(jobkinds.trainers())}
    if job_ids is not None:
        stmt = stmt.bindparams(sa.bindparam("ids", expanding=True))
        params["ids"] = [int(i) for i in job_ids] or [-1]
    with frames.engine(url).connect() as conn:
        df = pd.read_sql(stmt, conn, params=params)
    out = []
    for r in df.to_dict("records"):
        config = resolved_config(json.loads(r["config"]))
        flat = {k: _param_value(v) for k, v in flatten(config).items()}
        variant = {c: _native(r[c]) for c in VARIANT_PARAMS if _present(r.get(c))}
        flat.update({f"variant.{c}": _param_value(v) for c, v in variant.items()})
        done = r["status"] == JobStatus.SUCCEEDED
        results = {c: float(r[c]) for c in RESULT_COLUMNS if done and _present(r.get(c))}
        seed = r["seed"]
        out.append(
            Run(
                int(r["job_id"]),
                r["grid"] or "",
                r["recipe"],
                r["size"],
                None if not _present(seed) else int(seed),
                r["status"],
                r["variant_id"],
                r["variant_label"],
                r["started_at"] if _present(r["started_at"]) else None,
                r["finished_at"] if _present(r["finished_at"]) else None,
                config,
                flat,
                variant,
                results,
            )
        )
    return out


def new_points(url: str, job_id: int, exported: dict[str, int], table: str = "metrics") -> pd.DataFrame:
    """The job's metric points newer than `exported` (key -> the last step a target holds), by key and
    step: (key, step, tokens, wall_s, value) of `metrics`, or every column of the `curves` view. A key's
    points are reported in step order (a resumed attempt reports the same points again after its
    checkpoint), so "newer" is "a larger step"."""
    low = min(exported.values(), default=-1)
    columns = "*" if table == "curves" else "key, step, tokens, wall_s, value"
    with frames.engine(url).connect() as conn:
        df = pd.read_sql(
            text(f'SELECT {columns} FROM "{table}" WHERE job_id = :j AND step > :low ORDER BY key, step'),
            conn,
            params={"j": int(job_id), "low": int(low)},
        )
    if df.empty or not exported:
        return df
    floor = df["key"].map(exported).fillna(-1)
    return df[df["step"] > floor].reset_index(drop=True)


def latest_steps(url: str, job_ids: list[int] | None) -> dict[int, dict[str, int]]:
    """Per job, the last step of each metric key (`latest_metrics`: one row per job and key, cheap), so an
    export reads the points only of jobs that have new ones."""
    where = "" if job_ids is None else "WHERE job_id IN :ids"
    stmt = text(f"SELECT job_id, key, step FROM latest_metrics {where}")
    params = {}
    if job_ids is not None:
        stmt, params = stmt.bindparams(sa.bindparam("ids", expanding=True)), {"ids": list(job_ids) or [-1]}
    out: dict[int, dict[str, int]] = {}
    with frames.engine(url).connect() as conn:
        for job_id, key, step in conn.execute(stmt, params):
            out.setdefault(int(job_id), {})[key] = int(step)
    return out


def has_new(latest: dict[str, int], exported: dict[str, int]) -> bool:
    return any(step > exported.get(key, -1) for key, step in latest.items())


def depth_points(url: str, job_ids: list[int]) -> dict[int, pd.DataFrame]:
    """Per train job, its depth sweeps' loss per inference loop count as curve points (key
    DEPTH_KEY, step = loops; two sweeps of one run at one count: their mean)."""
    depth = frames.depth(url)
    depth = depth[depth["train_job_id"].isin(job_ids)].dropna(subset=["val_loss"])
    per = depth.groupby(["train_job_id", "loops"], as_index=False)["val_loss"].mean()
    per = per.rename(columns={"loops": "step", "val_loss": "value"}).assign(
        key=DEPTH_KEY, tokens=None, wall_s=None
    )
    cols = ["key", "step", "tokens", "wall_s", "value"]
    return {int(j): part[cols].reset_index(drop=True) for j, part in per.groupby("train_job_id")}


def view(url: str, name: str, job_ids: list[int] | None) -> pd.DataFrame:
    """A view's rows (every column, as `SELECT *` gives them), those about `job_ids` when given: a row is
    about each job its `*job_id` columns name (a depth row: its sweep job and the train job it measured)."""
    with frames.engine(url).connect() as conn:
        if job_ids is None:
            return pd.read_sql(text(f'SELECT * FROM "{name}"'), conn)
        columns = list(conn.execute(text(f'SELECT * FROM "{name}" WHERE 1 = 0')).keys())
        about = " OR ".join(f'"{c}" IN :ids' for c in columns if c.endswith("job_id"))
        stmt = text(f'SELECT * FROM "{name}" WHERE {about}').bindparams(sa.bindparam("ids", expanding=True))
        return pd.read_sql(stmt, conn, params={"ids": list(job_ids) or [-1]})
