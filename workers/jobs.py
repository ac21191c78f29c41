"""The job kinds, by name: each declared once, in `KINDS`, and how to validate and run a spec of one.

    validate(kind, spec) -> dict     the canonical spec (defaults filled in); ConfigError naming
                                     the field on bad input, before any work starts
    run(kind, spec, reporter, artifact_dir) -> dict    the job's summary

Each kind is a module with a frozen `Spec` dataclass (`Spec.from_dict(d)` rejects unknown keys,
`spec.to_dict()` is canonical) and `run(spec, reporter, artifact_dir)`. This module is the
orchestrator's `JobRegistry` (tests pass fakes with the same two functions and, for kinds of their
own, a `KINDS` of their own); besides it, the orchestrator imports only the Reporter's events
(workers.reporter).

Why the declarations live here: a `Kind` says everything the rest of the system needs to know about a
kind (its module; what it follows and is about; whether it runs alone; which spec keys select its
model; the result tables it writes; the views that show them), and both sides read it: this module
runs the kind from its module, the orchestrator and the dashboard (through `orchestrator.jobkinds`)
read the rest. Imports point one way (orchestrator -> workers), so the one place both can read is
here; a `Kind` is plain data, so declaring one imports nothing of the kind's module.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from model.errors import ConfigError
from workers.identity import identity as _identity
from workers.reporter import JobInterrupted, Reporter

__all__ = [
    "ARCHITECTURE",
    "CHECKPOINT",
    "KINDS",
    "MODEL_SOURCES",
    "JobInterrupted",
    "JobRegistry",
    "Kind",
    "identity",
    "run",
    "validate",
]

# What a follow-up is about (`Kind.about`).
CHECKPOINT = "checkpoint"  # the trained weights of the job it follows: it depends on that job
ARCHITECTURE = "architecture"  # only the model the followed job trains: random weights, shared by seeds
ABOUT = (CHECKPOINT, ARCHITECTURE)
# Spec keys that select a model (recipe x size presets, with `model` overrides).
MODEL_KEYS = ("recipe", "size", "model")
# The kinds whose jobs yield a model that follow-ups are about: a trained one, or one imported from a
# published checkpoint (an import is a run without training).
MODEL_SOURCES = ("train", "import")


@dataclass(frozen=True)
class Kind:
    """One job kind's declaration.

    `follows`: the kind (or kinds: a tuple) whose grid it attaches to (`Grid(job=follows, then=[this
    kind])`; stored as a tuple), with `about` what of that job it is about: CHECKPOINT (depends on the followed job; the queue sets its
    spec's `checkpoint` to that job's artifact dir at launch; its rows are labelled with that job's
    model) or ARCHITECTURE (gets the followed job's `arch_keys` and no dependency: one job per
    architecture, shared across seeds). `exclusive`: it runs with the node to itself unless its grid
    says otherwise (its timings are results). `arch_keys`: the spec keys that select its model (a kind
    without them names no model of its own). `tables`: the result tables it writes
    (`Reporter.result`), by name (orchestrator/schema.py maps names to ORM tables); `views`: the SQL
    views (orchestrator/views.py) that show them. `inherits`: the spec keys a follow-up takes from
    the spec of the job it follows when its grid does not set them (a depth sweep evaluates in the
    train job's batches, so its loss at the trained depth is the run's validation loss).
    `identity_keys`: spec keys that, besides the model, say which variant a job is (an import: its
    source and revision, so a published model never shares a variant with a run of the same
    architecture trained here)."""

    module: str  # the worker module: a frozen `Spec` and `run(spec, reporter, artifact_dir)`
    follows: str | tuple[str, ...] | None = None
    about: Literal["checkpoint", "architecture"] | None = None
    exclusive: bool = False
    arch_keys: tuple[str, ...] = ()
    tables: tuple[str, ...] = ()
    views: tuple[str, ...] = ()
    inherits: tuple[str, ...] = ()  # spec keys a follow-up takes from the followed job's spec unless given
    identity_keys: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.follows, str):
            object.__setattr__(self, "follows", (self.follows,))
        if (self.follows is None) != (self.about is None):
            raise ConfigError(f"kind {self.module}: follows and about: give both or neither")
        if self.about is not None and self.about not in ABOUT:
            raise ConfigError(
                f"kind {self.module}: about: unknown {self.about!r}; accepted: {', '.join(ABOUT)}"
            )
        if self.about == ARCHITECTURE and not self.arch_keys:
            raise ConfigError(
                f"kind {self.module}: arch_keys: an architecture follow-up needs the keys of its model"
            )


KINDS: dict[str, Kind] = {
    "train": Kind("workers.train", arch_keys=MODEL_KEYS, tables=("train_results",), views=("runs", "curves")),
    "import": Kind("workers.importer", arch_keys=MODEL_KEYS, identity_keys=("source", "revision")),
    "depth_sweep": Kind(
        "workers.depth_sweep",
        follows=MODEL_SOURCES,
        about=CHECKPOINT,
        tables=("depth_evals", "round_deltas", "round_interactions"),
        views=("depth", "geometry", "interactions"),
        inherits=("batch_size",),
    ),
    "decode_bench": Kind(
        "workers.decode_bench",
        follows=MODEL_SOURCES,
        about=ARCHITECTURE,
        exclusive=True,
        arch_keys=MODEL_KEYS,
        tables=("decode_benches",),
        views=("decode",),
    ),
    "eval": Kind(
        "workers.eval", follows=MODEL_SOURCES, about=CHECKPOINT, tables=("task_scores",), views=("tasks",)
    ),
    "adaptive": Kind(
        "workers.adaptive",
        follows=MODEL_SOURCES,
        about=CHECKPOINT,
        exclusive=True,
        tables=("adaptive_evals", "adaptive_exit_rounds", "adaptive_task_scores", "adaptive_decodes"),
        views=("adaptive", "exit_rounds", "adaptive_tasks", "adaptive_decode"),
    ),
    # made by the grid for the train jobs that share a corpus and tokenizer (orchestrator/grid.py)
    "prepare": Kind("workers.prepare"),
}


class JobRegistry(Protocol):
    """What the orchestrator needs of a set of job kinds; this module is one. A registry may also have
    a `KINDS` of `Kind` declarations (see orchestrator.jobkinds for what one without gets)."""

    def validate(self, kind: str, spec: dict[str, Any]) -> dict[str, Any]: ...

    def run(
        self, kind: str, spec: dict[str, Any], reporter: Reporter, artifact_dir: str | Path
    ) -> dict[str, Any]: ...

    # optional: `identity(kind, spec) -> dict`, what defines a job (its hash); without it, the whole spec


def _module(kind: str):
    if kind not in KINDS:
        raise ConfigError(f"job: unknown kind {kind!r}; accepted: {', '.join(KINDS)}")
    return importlib.import_module(KINDS[kind].module)


def validate(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    return _module(kind).Spec.from_dict(spec).to_dict()


def identity(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    """What defines a job of `kind` (workers/identity.py): its canonical spec without the execution
    fields of the kind's Spec; the whole spec for a kind this registry does not know."""
    if kind not in KINDS:
        return dict(spec)
    return _identity(_module(kind).Spec, spec)


def run(kind: str, spec: dict[str, Any], reporter: Reporter, artifact_dir: str | Path) -> dict[str, Any]:
    mod = _module(kind)
    return mod.run(mod.Spec.from_dict(spec), reporter, Path(artifact_dir))
