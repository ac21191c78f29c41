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
kind (its module; its name as people read it; what it follows and is about; whether it runs alone or
may span several workers; which spec keys select its model; the result tables it writes; the views
that show them; how the planner prices it), and every side reads it: this module runs the kind from
its module, the orchestrator, the dashboard and the lab (through `orchestrator.jobkinds`) read the
rest, and none of them names a kind to decide what to do with it. Imports point one way (lab ->
orchestrator -> workers), so the one place all can read is here; a `Kind` is plain data, so declaring
one imports nothing of the kind's module or of its cost model (which may import torch).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal, Protocol

from looplab.model.errors import ConfigError
from looplab.workers.identity import identity as _identity
from looplab.workers.reporter import JobInterrupted, Reporter

__all__ = [
    "ARCHITECTURE",
    "CHECKPOINT",
    "KINDS",
    "CostModel",
    "Pricing",
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


class Pricing(StrEnum):
    """How the planner (lab/planner/estimates.py) turns a job's cost into seconds, and so what the
    kind's `cost` function takes and returns (its `Spec` is the validated spec of the job):

    TRAINING: `cost(spec) -> workers.train.cost.TrainCost`: steps at the throughput its finished runs
      measured (their `train_results`), else at the calibrated FLOP rates, plus evaluations, checkpoints
      and start-up; its micro-batch and disk are planned too. Its jobs are what checkpoint follow-ups
      are priced on.
    FORWARD: `cost(spec) -> workers.cost.ForwardCost`: forward passes of the model its own spec names.
    ON_CHECKPOINT: `cost(spec, trained: TrainCost) -> ForwardCost | None`: forward passes of the model
      of the TRAINING job it follows (its `about` is CHECKPOINT); None when its cost cannot be known
      before it runs.
    Both forward kinds: finished jobs of the kind and variant scaled by the ratio of FLOPs, else the FLOP
    model."""

    TRAINING = "training"
    FORWARD = "forward"
    ON_CHECKPOINT = "on_checkpoint"


@dataclass(frozen=True)
class CostModel:
    """How the planner prices a job of a kind. `module`: a module with the kind's `Spec` and its
    `cost` function (see Pricing for its signature), imported only when a job is priced, so the
    planner imports no model code (nor torch) for a queue whose jobs carry stored estimates.
    `per_device`: its finished jobs are compared only with those on the device type the plan runs on
    (a decode benchmark's timings are results of its device). A kind without a cost model is priced at
    the median wall time of its finished jobs."""

    module: str
    pricing: Pricing
    per_device: bool = False

    def load(self) -> Any:
        """The cost model's module (its `Spec` and `cost`)."""
        return importlib.import_module(self.module)


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
    architecture trained here). `title`: its name as a person reads it (the plan's GPU-hours per
    kind); the kind's own name when empty. `gang`: one job may span several workers started at once
    (`resources: {"workers": N}`: data-parallel training on Ray Train, workers/train/distributed.py).
    `cost`: how the planner prices it (CostModel; None: by its finished jobs' wall time).
    `trains`: its jobs train a model from a corpus: its grids get a data-preparation job and a planned
    micro-batch, its budgets (tokens, seconds, FLOPs) and iso-time pairs are matched across jobs, and
    its rows are the runs the exports read."""

    module: str  # the worker module: a frozen `Spec` and `run(spec, reporter, artifact_dir)`
    follows: str | tuple[str, ...] | None = None
    about: Literal["checkpoint", "architecture"] | None = None
    exclusive: bool = False
    arch_keys: tuple[str, ...] = ()
    tables: tuple[str, ...] = ()
    views: tuple[str, ...] = ()
    inherits: tuple[str, ...] = ()  # spec keys a follow-up takes from the followed job's spec unless given
    identity_keys: tuple[str, ...] = ()
    title: str = ""
    gang: bool = False
    cost: CostModel | None = None
    trains: bool = False

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
        if self.pricing == Pricing.ON_CHECKPOINT and self.about != CHECKPOINT:
            raise ConfigError(
                f"kind {self.module}: cost: pricing {Pricing.ON_CHECKPOINT} prices a job on the checkpoint "
                f"it follows: give it about {CHECKPOINT!r} (got {self.about!r})"
            )

    @property
    def pricing(self) -> Pricing | None:
        """How the planner prices it (None: by its finished jobs' wall time)."""
        return None if self.cost is None else self.cost.pricing


KINDS: dict[str, Kind] = {
    "train": Kind(
        "looplab.workers.train.job",
        arch_keys=MODEL_KEYS,
        tables=("train_results",),
        views=("runs", "curves"),
        title="training",
        gang=True,
        trains=True,
        cost=CostModel("looplab.workers.train.cost", Pricing.TRAINING),
    ),
    "import": Kind(
        "looplab.workers.importer", arch_keys=MODEL_KEYS, identity_keys=("source", "revision"), title="import"
    ),
    "depth_sweep": Kind(
        "looplab.workers.evaluate.depth_sweep",
        follows=MODEL_SOURCES,
        about=CHECKPOINT,
        tables=("depth_evals", "round_deltas", "round_interactions"),
        views=("depth", "geometry", "interactions"),
        inherits=("batch_size",),
        title="depth sweep",
        cost=CostModel("looplab.workers.evaluate.depth_sweep", Pricing.ON_CHECKPOINT),
    ),
    "decode_bench": Kind(
        "looplab.workers.evaluate.decode_bench",
        follows=MODEL_SOURCES,
        about=ARCHITECTURE,
        exclusive=True,
        arch_keys=MODEL_KEYS,
        tables=("decode_benches",),
        views=("decode",),
        title="decode benchmark",
        cost=CostModel("looplab.workers.evaluate.decode_bench", Pricing.FORWARD, per_device=True),
    ),
    "eval": Kind(
        "looplab.workers.evaluate.eval",
        follows=MODEL_SOURCES,
        about=CHECKPOINT,
        tables=("task_scores",),
        views=("tasks", "task_categories"),
        title="task evaluation",
        cost=CostModel("looplab.workers.evaluate.eval", Pricing.ON_CHECKPOINT),
    ),
    "adaptive": Kind(
        "looplab.workers.adaptive.job",
        follows=MODEL_SOURCES,
        about=CHECKPOINT,
        exclusive=True,
        tables=("adaptive_evals", "adaptive_exit_rounds", "adaptive_task_scores", "adaptive_decodes"),
        views=("adaptive", "exit_rounds", "adaptive_tasks", "adaptive_decode"),
        title="adaptive exits",
    ),
    # made by the grid for the train jobs that share a corpus and tokenizer (orchestrator/grid.py)
    "prepare": Kind("looplab.workers.data.prepare", title="data preparation"),
}


class JobRegistry(Protocol):
    """What the orchestrator needs of a set of job kinds; this module is one. A registry may also have
    a `KINDS` of `Kind` declarations (see orchestrator.jobkinds for what one without gets)."""

    def validate(self, kind: str, spec: dict[str, Any]) -> dict[str, Any]: ...

    def run(
        self, kind: str, spec: dict[str, Any], reporter: Reporter, artifact_dir: str | Path
    ) -> dict[str, Any]: ...

    # optional: `identity(kind, spec) -> dict`, what defines a job (its hash); without it, the whole spec
    # optional: `refuse_follow(kind, spec, followed)`, a follow-up refused against the job it follows
    # optional: `refuse_alone(kind, spec)`, a job of a grid's own kind refused on its own spec


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


def refuse_follow(kind: str, spec: dict[str, Any], followed: dict[str, Any]) -> None:
    """At submission, a follow-up's canonical spec against the job it follows (`followed`: its "kind",
    "spec", and for a model of another family its "family" and "capabilities", else None; see
    orchestrator.grid `_refuse_follow`), through its module's `refuse_follow(spec, followed)` when it
    has one (ConfigError naming the field): e.g. the adaptive job's `gate` rule needs an exit gate."""
    refuse = _hook(kind, "refuse_follow")
    if refuse is not None:
        refuse(spec, followed)


def refuse_alone(kind: str, spec: dict[str, Any]) -> None:
    """At submission, the canonical spec of a job of a grid's own kind (following no job; orchestrator.grid
    `_refuse_alone`), through its module's `refuse_alone(spec)` when it has one (ConfigError naming the
    field): e.g. a decode bench of a family that cannot take its longest context."""
    refuse = _hook(kind, "refuse_alone")
    if refuse is not None:
        refuse(spec)


def _hook(kind: str, name: str) -> Any:
    """The optional submission hook `name` of `kind`'s module (None: it has none, or the kind is not ours)."""
    return getattr(_module(kind), name, None) if kind in KINDS else None


def run(kind: str, spec: dict[str, Any], reporter: Reporter, artifact_dir: str | Path) -> dict[str, Any]:
    mod = _module(kind)
    return mod.run(mod.Spec.from_dict(spec), reporter, Path(artifact_dir))
