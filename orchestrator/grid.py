"""Grids: what a user submits, expanded into validated job plans before anything is written.

A `Grid` is a base config plus a sweep (the cartesian product of lists) of one job kind, with
follow-up jobs attached to every training job (`then=["depth_sweep", "decode_bench"]`). `expand()`
turns a list of grids into `Plan`s: one per job, each with its canonical spec (every default filled
in by the workers' own `validate`), its dependencies and its config hash. Any bad value anywhere
raises ConfigError naming the grid and the field, so a bad grid is refused whole.

Why hashes: a job is identified by sha256(canonical JSON of kind, spec, dependency hashes). The same
grid submitted twice gives the same hashes, so the queue adds nothing (idempotent submission), and a
decode benchmark (random weights, architecture only) is shared by every seed of an architecture.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from model import fields
from model.errors import ConfigError

if TYPE_CHECKING:
    from workers.jobs import JobRegistry

FOLLOW_UPS = ("depth_sweep", "decode_bench")
# Grid-level keys that select the model of a train job; a decode bench keeps only these.
ARCH_KEYS = ("recipe", "size", "model")
_BUDGET_KEYS = ("tokens", "time_s", "match_time_of")
# Placeholder values used only to run the workers' validation on specs that are completed later.
_PENDING_CKPT = "<artifact dir of the train job>"
_PENDING_TIME_S = 1.0


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def sha256(obj: Any) -> str:
    return hashlib.sha256(canonical_json(obj).encode()).hexdigest()


@dataclass
class Grid:
    """A sweep of one job kind. `base` and `sweep` use the job spec's keys (for train: recipe, size,
    seed, tokens, time_s, model, lr, data, ...) plus `budget` (tokens as a number, or
    {"tokens": N} | {"time_s": s} | {"match_time_of": <job id or {"recipe": .., "seed": ..}>}).
    `follow` overrides the follow-up specs; `resources` is {"num_gpus": .., "num_cpus": ..} for the
    grid's own jobs, or a mapping kind -> resources (e.g. {"depth_sweep": {"num_gpus": 0.5}})."""

    name: str
    job: str = "train"
    base: dict[str, Any] = field(default_factory=dict)
    sweep: dict[str, list[Any]] = field(default_factory=dict)
    then: list[str] = field(default_factory=list)
    follow: dict[str, dict[str, Any]] = field(default_factory=dict)
    priority: int = 0
    max_attempts: int = 3
    resources: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "job": self.job, "base": self.base, "sweep": self.sweep,
            "then": list(self.then), "follow": self.follow, "priority": self.priority,
            "max_attempts": self.max_attempts, "resources": self.resources,
        }  # fmt: skip

    def spec_hash(self) -> str:
        return sha256(self.to_dict())

    def configs(self) -> list[dict[str, Any]]:
        """The expanded configs (base + one point of the sweep), in sweep order."""
        for key, values in self.sweep.items():
            if not isinstance(values, list | tuple):
                raise ConfigError(f"grid {self.name!r}: sweep.{key}: expected a list, got {values!r}")
            if not values:
                raise ConfigError(f"grid {self.name!r}: sweep.{key}: empty list (give at least one value)")
            if key in self.base:
                raise ConfigError(f"grid {self.name!r}: {key}: given in both base and sweep")
        keys = list(self.sweep)
        return [{**self.base, **dict(zip(keys, combo))} for combo in itertools.product(*self.sweep.values())]


@dataclass
class Plan:
    """One job to insert: canonical spec, dependencies (indexes into the plan list, or existing job
    ids), and its config hash."""

    kind: str
    spec: dict[str, Any]
    grid_index: int
    priority: int
    max_attempts: int
    resources: dict[str, Any] | None = None
    deps: list[int] = field(default_factory=list)  # indexes of other plans
    dep_ids: list[int] = field(default_factory=list)  # existing jobs (match_time_of by id)
    budget: dict[str, Any] | None = None
    dep_hashes: list[str] = field(default_factory=list)
    config_hash: str = ""


RESOURCE_KEYS = ("num_cpus", "num_gpus")


def _kind_resources(grid: Grid, kind: str) -> dict[str, Any] | None:
    res = grid.resources
    if not res:
        return None
    if any(k in res for k in (grid.job, *FOLLOW_UPS)):  # per-kind mapping
        res, where = res.get(kind), f"resources.{kind}"
    else:
        res, where = (res if kind == grid.job else None), "resources"
    res = fields.mapping(f"grid {grid.name!r}: {where}", res, "a dict like {'num_gpus': 1, 'num_cpus': 1}")
    for k, v in res.items():
        if k not in RESOURCE_KEYS:
            raise ConfigError(
                f"grid {grid.name!r}: {where}.{k}: unknown; accepted: {', '.join(RESOURCE_KEYS)}"
            )
        fields.number(f"grid {grid.name!r}: {where}.{k}", v, lo=0)
    return res or None


def _train_spec(name: str, cfg: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Translate grid-level keys into a train spec; returns (spec, budget-as-submitted or None)."""
    cfg = dict(cfg)
    budget = cfg.pop("budget", None)
    if budget is None:
        return cfg, None
    both = [k for k in ("tokens", "time_s") if cfg.get(k) is not None]
    if both:
        raise ConfigError(f"grid {name!r}: budget: given together with {both[0]}; give one of them")
    if isinstance(budget, bool) or not isinstance(budget, int | float | dict):
        raise ConfigError(
            f"grid {name!r}: budget: {budget!r} is not a number of tokens nor a dict with one of {_BUDGET_KEYS}"
        )
    if not isinstance(budget, dict):
        budget = {"tokens": budget}
    if len(budget) != 1 or next(iter(budget)) not in _BUDGET_KEYS:
        raise ConfigError(f"grid {name!r}: budget: {budget!r}: give exactly one of {', '.join(_BUDGET_KEYS)}")
    (key, value), = budget.items()  # fmt: skip
    if key != "match_time_of":
        value = fields.number(f"grid {name!r}: budget.{key}", value, lo=0, lo_open=True)
        cfg[key] = int(value) if key == "tokens" else value
        return cfg, {key: cfg[key]}
    return cfg, {"match_time_of": value}


def _validate(kinds: JobRegistry, grid_name: str, kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    try:
        return kinds.validate(kind, spec)
    except ConfigError as e:
        raise ConfigError(f"grid {grid_name!r}: {e}") from None
    except (TypeError, ValueError) as e:
        raise ConfigError(f"grid {grid_name!r}: {kind}: {e}") from None


def _match(refs: list[tuple[int, dict[str, Any]]], ref: dict[str, Any]) -> list[int]:
    return [i for i, spec in refs if all(spec.get(k) == v for k, v in ref.items())]


def _checked(grid: Grid) -> Grid:
    """`grid` with its own fields checked (a wrong type names its field, rather than crash later)."""
    where = f"grid {grid.name!r}"
    for attr, what in (("base", "a dict of spec keys"), ("sweep", "a dict of key -> list of values"),
                       ("follow", "a dict kind -> spec")):  # fmt: skip
        if not isinstance(getattr(grid, attr), dict):
            raise ConfigError(f"{where}: {attr}: expected {what}, got {getattr(grid, attr)!r}")
    if not isinstance(grid.then, list | tuple):
        raise ConfigError(f"{where}: then: expected a list of {', '.join(FOLLOW_UPS)}, got {grid.then!r}")
    for follow in grid.then:
        fields.choice(f"{where}: then", follow, FOLLOW_UPS)
    for k in grid.follow:
        if k not in grid.then:
            raise ConfigError(f"{where}: follow.{k}: not in then={list(grid.then)}")
    if grid.then and grid.job != "train":
        raise ConfigError(f"{where}: then: follow-ups attach to train jobs, not {grid.job!r}")
    if grid.resources is not None:
        fields.mapping(f"{where}: resources", grid.resources, "a dict like {'num_gpus': 1, 'num_cpus': 1}")
    return dataclasses.replace(
        grid,
        priority=fields.integer(f"{where}: priority", grid.priority),
        max_attempts=fields.integer(f"{where}: max_attempts", grid.max_attempts, lo=1),
    )


def expand(grids: list[Grid], kinds: JobRegistry) -> list[Plan]:
    """Validate every grid and expand them into plans. Raises ConfigError before anything is written."""
    plans: list[Plan] = []
    trains: list[tuple[int, dict[str, Any]]] = []  # (plan index, canonical train spec)
    pending_match: list[tuple[int, Any, str]] = []
    for gi, grid in enumerate(grids):
        if not isinstance(grid, Grid):
            raise ConfigError(f"submit: expected Grid objects, got {type(grid).__name__}")
        grid = _checked(grid)
        for cfg in grid.configs():
            budget = None
            if grid.job == "train":
                spec, budget = _train_spec(grid.name, cfg)
                if budget and "match_time_of" in budget:  # validated with a stand-in time budget
                    spec = _validate(kinds, grid.name, "train", {**spec, "time_s": _PENDING_TIME_S})
                    spec["time_s"] = None
                else:
                    spec = _validate(kinds, grid.name, "train", spec)
            else:
                spec = _validate(kinds, grid.name, grid.job, cfg)
            plan = Plan(grid.job, spec, gi, grid.priority, grid.max_attempts, _kind_resources(grid, grid.job),
                        budget=budget)  # fmt: skip
            plans.append(plan)
            idx = len(plans) - 1
            if budget and "match_time_of" in budget:
                pending_match.append((idx, budget["match_time_of"], grid.name))
            if grid.job != "train":
                continue
            trains.append((idx, spec))
            for follow in grid.then:
                over = dict(grid.follow.get(follow, {}))
                if follow == "depth_sweep":
                    if "checkpoint" in over:
                        raise ConfigError(
                            f"grid {grid.name!r}: follow.depth_sweep.checkpoint: set by the queue"
                        )
                    fs = _validate(kinds, grid.name, follow, {**over, "checkpoint": _PENDING_CKPT})
                    fs.pop("checkpoint", None)
                    deps = [idx]
                else:
                    arch = {k: spec[k] for k in ARCH_KEYS if k in spec}
                    fs = _validate(kinds, grid.name, follow, {**arch, **over})
                    deps = []  # architecture only: shared across seeds, needs no trained weights
                plans.append(Plan(follow, fs, gi, grid.priority, grid.max_attempts,
                                  _kind_resources(grid, follow), deps=deps))  # fmt: skip
    for idx, ref, name in pending_match:
        if isinstance(ref, bool) or not isinstance(ref, int | dict):
            raise ConfigError(f"grid {name!r}: budget.match_time_of: {ref!r} is neither a job id nor a dict")
        if isinstance(ref, int):
            plans[idx].dep_ids.append(ref)
            continue
        hits = [i for i in _match(trains, ref) if i != idx]
        if len(hits) != 1:
            raise ConfigError(
                f"grid {name!r}: budget.match_time_of: {ref!r} matches {len(hits)} train jobs "
                "of this submission (need exactly one)"
            )
        plans[idx].deps.append(hits[0])
    return plans


def assign_hashes(plans: list[Plan], dep_id_hash: dict[int, str]) -> None:
    """Fill each plan's config hash, dependencies first (a dep's hash is part of its dependents')."""
    done: set[int] = set()

    def visit(i: int, stack: tuple[int, ...] = ()) -> str:
        if i in stack:
            raise ConfigError("budget.match_time_of: circular reference between jobs")
        p = plans[i]
        if i not in done:
            p.dep_hashes = sorted(
                [visit(d, (*stack, i)) for d in p.deps] + [dep_id_hash[j] for j in p.dep_ids]
            )
            # a derived budget is identified by its reference's hash (in deps), not by how it was named
            derived = bool(p.budget and "match_time_of" in p.budget)
            p.config_hash = sha256(
                {"kind": p.kind, "spec": p.spec, "deps": p.dep_hashes, "match_time": derived}
            )
            done.add(i)
        return p.config_hash

    for i in range(len(plans)):
        visit(i)
