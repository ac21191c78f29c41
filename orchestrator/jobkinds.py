"""The orchestrator's reader of the job-kind declarations (`workers.jobs.KINDS`, one `Kind` per kind).

The declarations live in workers/jobs.py, next to the code that runs each kind, because both sides
read them and imports point one way (orchestrator -> workers). This module is where the orchestrator
and the dashboard ask about a kind: which registry is in use, a kind's declaration in it, and the
relations derived from the declarations (the follow-ups of a kind, which kind writes a table, which
kinds may span several workers, which are priced how), and what a job of a kind asks of its node
(`job_resources`). The grid, the queue, the task runner, the variants, the views, the schema's result
tables, the dashboard and the lab's planner read kinds only through here, so a new kind is its worker
module plus one `Kind` entry.

A registry (`workers.jobs`, or a test double / plugin named by $LOOPLAB_JOB_KINDS) may declare its
kinds in a `KINDS` of its own; a kind it does not declare gets the built-in declaration of that name
(a double stands in for the real kind), else `PLAIN`: a kind that follows nothing, runs beside
others, names no model and writes no result table.
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from looplab.model.errors import ConfigError
from looplab.workers.jobs import ARCHITECTURE, CHECKPOINT, KINDS, MODEL_SOURCES, CostModel, Kind, Pricing

if TYPE_CHECKING:
    from looplab.workers.jobs import JobRegistry

__all__ = [
    "ARCHITECTURE",
    "CHECKPOINT",
    "MODEL_SOURCES",
    "PLAIN",
    "TRAIN",
    "CostModel",
    "Kind",
    "Pricing",
    "declared",
    "follow_ups",
    "gangs",
    "priced",
    "registry",
    "title",
    "trainers",
    "trains",
]

# The kind a grid runs unless it names one (`Grid(job=...)`). What a kind does is asked of its
# declaration (`trains`, `gang`, `cost`), never of its name. The built-in follow-ups attach to it and to
# an import (MODEL_SOURCES: the kinds whose jobs yield a model, the rows the views call runs).
TRAIN = "train"
PLAIN = Kind(module="")
REGISTRY_ENV = "LOOPLAB_JOB_KINDS"


def registry() -> JobRegistry:
    """The job registry in use: workers.jobs, or a module named by $LOOPLAB_JOB_KINDS (test/plugin hook)."""
    return importlib.import_module(os.environ.get(REGISTRY_ENV, "looplab.workers.jobs"))


def _declarations(kinds: JobRegistry | None) -> Mapping[str, Kind]:
    own = getattr(registry() if kinds is None else kinds, "KINDS", None)
    return own if isinstance(own, Mapping) else {}


def declared(kind: str, kinds: JobRegistry | None = None) -> Kind:
    """The declaration of `kind` in registry `kinds` (default: `registry()`): its own, else the
    built-in one of that name, else PLAIN."""
    decl = _declarations(kinds).get(kind)
    if isinstance(decl, Kind):
        return decl
    return KINDS.get(kind, PLAIN)


def identity(kind: str, spec: dict, kinds: JobRegistry | None = None) -> dict:
    """What defines a job of `kind` (its config hash is computed from this): the registry's
    `identity(kind, spec)` when it has one (workers.jobs: the spec without its execution fields, see
    workers/identity.py), else the whole spec."""
    fn = getattr(registry() if kinds is None else kinds, "identity", None)
    return dict(spec) if fn is None else fn(kind, spec)


def names(kinds: JobRegistry | None = None) -> list[str]:
    """Every declared kind of the registry: its own, then the built-in ones it does not redeclare."""
    own = [k for k, v in _declarations(kinds).items() if isinstance(v, Kind)]
    return own + [k for k in KINDS if k not in own]


def follow_ups(of: str | None = None, kinds: JobRegistry | None = None) -> tuple[str, ...]:
    """The kinds that follow kind `of` (any kind when None), in declaration order."""
    return tuple(
        k for k in names(kinds) if (f := declared(k, kinds).follows) is not None and (of is None or of in f)
    )


def gangs(kinds: JobRegistry | None = None) -> tuple[str, ...]:
    """The kinds of registry `kinds` one job of which may span several workers (`Kind.gang`)."""
    return tuple(k for k in names(kinds) if declared(k, kinds).gang)


def check_workers(where: str, kind: str, workers: int, kinds: JobRegistry | None = None) -> None:
    """Refuse `workers` > 1 for a kind whose declaration says one job of it runs in one process
    (`Kind.gang` false), naming the field `where` and the kinds that may span several workers. The grid
    asks at submission and the task runner again at launch, for jobs stored before a kind changed."""
    if workers <= 1 or declared(kind, kinds).gang:
        return
    accepted = ", ".join(gangs(kinds))
    which = f"only {accepted} jobs run" if accepted else "no kind runs"
    raise ConfigError(f"{where}: {workers}: {which} on several workers, not {kind}; accepted: 1")


def trains(kind: str, kinds: JobRegistry | None = None) -> bool:
    """Whether jobs of `kind` train a model (`Kind.trains`)."""
    return declared(kind, kinds).trains


def trainers(kinds: JobRegistry | None = None) -> tuple[str, ...]:
    """The kinds of registry `kinds` whose jobs train a model (`Kind.trains`)."""
    return tuple(k for k in names(kinds) if declared(k, kinds).trains)


def priced(pricing: Pricing, kinds: JobRegistry | None = None) -> tuple[str, ...]:
    """The kinds of registry `kinds` that the planner prices by `pricing` (their `Kind.cost`)."""
    return tuple(k for k in names(kinds) if declared(k, kinds).pricing == pricing)


def title(kind: str, kinds: JobRegistry | None = None) -> str:
    """`kind` as a person reads it: its declared title, else its name."""
    return declared(kind, kinds).title or kind


def writer_of(table: str) -> str:
    """The built-in kind that writes result table `table` (KeyError when none declares it)."""
    for name, kind in KINDS.items():
        if table in kind.tables:
            return name
    raise KeyError(f"no job kind declares result table {table!r}")


def result_tables() -> tuple[str, ...]:
    """Every result table the built-in kinds declare, in declaration order."""
    return tuple(dict.fromkeys(t for kind in KINDS.values() for t in kind.tables))


def view_names() -> tuple[str, ...]:
    """Every view the built-in kinds declare, in declaration order."""
    return tuple(dict.fromkeys(v for kind in KINDS.values() for v in kind.views))


def job_resources(
    kind: str,
    resources: str | dict[str, Any] | None,
    has_gpu: bool,
    exclusive_default: bool = False,
    kinds: JobRegistry | None = None,
) -> dict[str, Any]:
    """What a job asks of its node: num_cpus (default 1), num_gpus (default 1 on a node with GPUs,
    else 0), each for every one of its `workers` (default 1; all started at once), exclusive
    (default: its kind is declared `exclusive` in registry `kinds`, default registry(): its
    timings are results; or `exclusive_default`), and preemptible when the grid allows it. The scheduler and the planner read resources only
    through this."""
    res = json.loads(resources) if isinstance(resources, str) else dict(resources or {})
    exclusive = bool(res.get("exclusive", declared(kind, kinds).exclusive or exclusive_default))
    workers = int(res.get("workers", 1))
    # preemptible (orchestrator/admission.py): only when asked, so the dicts of other jobs are as before
    extra = {"preemptible": True} if res.get("preemptible") else {}
    if "num_cpus" not in res and "num_gpus" not in res:  # no device asked for: one CPU, a GPU if any
        return {
            "num_cpus": 1.0,
            "num_gpus": 1.0 if has_gpu else 0.0,
            "workers": workers,
            "exclusive": exclusive,
            **extra,
        }
    return {
        "num_cpus": float(res.get("num_cpus", 1)),
        "num_gpus": float(res.get("num_gpus", 0)),
        "workers": workers,
        "exclusive": exclusive,
        **extra,
    }
