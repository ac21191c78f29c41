"""Grids: what a user submits, expanded into validated job plans before anything is written.

A `Grid` is a base config plus a sweep (the cartesian product of lists, with keys that may be dotted
paths into `model`, `data` and `budget`, and zip groups whose lists vary together) of one job kind,
with follow-up jobs attached to every job of the kind they follow (`then=["depth_sweep", "decode_bench",
"eval"]` on a train grid; what a kind follows and is about is its declaration, orchestrator.jobkinds).
`expand()` turns a list of grids into `JobPlan`s: one per job, each with its canonical spec (every
default filled in by the workers' own `validate`), its dependencies, its config hash and the variant
label the user gave (if any). Any bad value anywhere raises ConfigError naming the grid and the field
(the dotted path for a nested one), so a bad grid is refused whole.

Why hashes: a job is identified by sha256(canonical JSON of kind, spec, dependency hashes). The same
grid submitted twice gives the same hashes, so the queue adds nothing (idempotent submission), and a
decode benchmark (random weights, architecture only) is shared by every seed of an architecture.

Preparations: the train jobs of a submission that share a corpus and tokenizer wait for one `prepare`
job (workers/data/prepare.py) sized for the largest of them, unless their data is the built-in offline
corpus prepared whole (a second's work, done inline by each job as before). A train job *waits* for its
preparation (`JobPlan.waits`: a stored dependency, so it starts once the shards exist) but is not
defined by it: the wait is left out of its hash, since what it reads is the first `data.max_tokens`
tokens of any preparation that covers it (workers/data/shards.py), whichever of its siblings sized it.
Resubmitting a grid gives the same prepare job (same size, same hash); a larger grid later gets a new,
larger one; a train job already in the database keeps the dependencies it had (and one stored before
prepare jobs existed has none: it prepares inline when it starts).
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from looplab.model import fields
from looplab.model.errors import ConfigError
from looplab.orchestrator import jobkinds, pairing
from looplab.orchestrator.canonical import canonical_json, sha256
from looplab.orchestrator.health import check_grid_health
from looplab.orchestrator.jobkinds import CHECKPOINT, TRAIN, Kind
from looplab.orchestrator.pairing import MATCH_TIME
from looplab.orchestrator.retention import DEFAULT_RETENTION, RETENTIONS
from looplab.orchestrator.same_run import refuse_same_runs
from looplab.orchestrator.variants import LABEL_MAX

if TYPE_CHECKING:
    from looplab.workers.jobs import JobRegistry

# The follow-ups of a train grid's jobs (`then`) among the built-in kinds (lab.studies checks
# a helper's `then` against them).
FOLLOW_UPS = jobkinds.follow_ups(TRAIN)
_BUDGET_KEYS = ("tokens", "time_s", "flops", MATCH_TIME)
# Spec keys a budget sets; a grid gives at most one of them (directly or through `budget`).
BUDGET_SPEC_KEYS = ("tokens", "time_s", "flops")
# Top-level keys a dotted sweep path may go into.
NESTED = ("model", "data", "budget")
ZIP = "zip"
# A grid key that names the variant for people; it is not part of the job spec (see `_pop_label`).
LABEL = "label"
# The job kind that tokenizes a corpus for the train jobs that read it (see the module docstring).
PREPARE = "prepare"
# What a prepare job asks of its node unless the grid's resources say otherwise ({"prepare": {...}}).
PREPARE_RESOURCES = {"num_cpus": 1, "num_gpus": 0}
# Placeholder values used only to run the workers' validation on specs that are completed later.
_PENDING_CKPT = "<artifact dir of the train job>"
_PENDING_TIME_S = 1.0


@dataclass
class Grid:
    """A sweep of one job kind. `base` and `sweep` use the job spec's keys (for train: recipe, size,
    seed, tokens, time_s, model, lr, data, ...) plus `budget` (tokens as a number, or
    {"tokens": N} | {"time_s": s} | {"flops": F} | {"match_time_of": <job id or {"recipe": .., "seed": ..}>})
    and `label` (a name for the variant, shown instead of the generated one; not part of the spec).

    Sweep keys may be dotted paths one level into `model`, `data` or `budget`:
    `sweep={"model.loops": [2, 4, 8], "budget.flops": [1e15, 3e15]}`. The sweep is the cartesian
    product of its entries, in the order given. The entry `"zip"` is a zip group, a dict of keys whose
    lists all have the same length and vary together (or a list of such dicts, several groups):
    `sweep={"zip": {"model.n_recurrent": [16, 8, 4], "model.loops": [1, 2, 4]}, "seed": [0, 1]}` is
    3 x 2 = 6 configs. A key (or path) may be given once only: not in base and sweep, not in the
    sweep and a zip group; a whole `model` dict and one of its paths count as the same key.

    `follow` overrides the follow-up specs; `resources` is {"num_gpus": .., "num_cpus": ..} for the
    grid's own jobs, or a mapping kind -> resources (e.g. {"depth_sweep": {"num_gpus": 0.5}});
    `"exclusive": false` lets a decode bench or an iso-time train job share its node (they run alone
    by default: their timings are results; see orchestrator.jobkinds.job_resources); `"preemptible":
    true` lets a job of priority at least 10 higher stop it at its next step boundary (it checkpoints and
    resumes later, exactly: orchestrator/admission.py). `retention`: what
    a job's artifact dir keeps once it succeeded, "final" (the final weights: its resume state is
    deleted) or "all" (orchestrator/retention.py); it says how the runs are kept, not what they are, so
    it is no part of a job's identity. `health`: the health rules' settings for the grid's jobs, over the
    global ones (orchestrator/health.py `HealthSettings`: e.g. {"stall_s": 600, "retry_non_finite": true});
    how a run is watched, not what it is, so no part of a job's identity either."""

    name: str
    job: str = TRAIN
    base: dict[str, Any] = field(default_factory=dict)
    sweep: dict[str, list[Any]] = field(default_factory=dict)
    then: list[str] = field(default_factory=list)
    follow: dict[str, dict[str, Any]] = field(default_factory=dict)
    priority: int = 0
    max_attempts: int = 3
    resources: dict[str, Any] | None = None
    retention: str = DEFAULT_RETENTION
    health: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        # `retention` only when not the default: a grid submitted before it existed keeps its hash
        extra = {} if self.retention == DEFAULT_RETENTION else {"retention": self.retention}
        if self.health is not None:  # as retention: only when given
            extra["health"] = self.health
        return {
            "name": self.name,
            "job": self.job,
            "base": self.base,
            "sweep": self.sweep,
            "then": list(self.then),
            "follow": self.follow,
            "priority": self.priority,
            "max_attempts": self.max_attempts,
            "resources": self.resources,
            **extra,
        }

    def spec_hash(self) -> str:
        return sha256(self.to_dict())

    def configs(self) -> list[dict[str, Any]]:
        """The expanded configs (base + one point of the sweep), in sweep order; dotted paths are
        set inside their dict (`{"model.loops": 8}` -> `{"model": {..., "loops": 8}}`)."""
        axes = _sweep_axes(self)
        points = []
        for combo in itertools.product(*(range(length) for _, length in axes)):
            cfg = copy.deepcopy(self.base)
            for (group, _), i in zip(axes, combo):
                for path, values in group.items():
                    _set_path(cfg, path, copy.deepcopy(values[i]))
            points.append(cfg)
        return points


def _sweep_axes(grid: Grid) -> list[tuple[dict[str, list[Any]], int]]:
    """The sweep as a list of axes (a plain key is an axis of one path, a zip group one of several),
    each with its length; every path checked, and no path given twice."""
    where = f"grid {grid.name!r}"
    axes: list[tuple[dict[str, list[Any]], int]] = []
    owner: dict[str, str] = {path: "base" for path in _base_paths(grid.base)}
    for key, values in grid.sweep.items():
        if key == ZIP:
            groups = values if isinstance(values, list | tuple) else [values]
            for n, group in enumerate(groups):
                name = f"sweep.{ZIP}" if len(groups) == 1 else f"sweep.{ZIP}[{n}]"
                if not isinstance(group, dict) or not group:
                    raise ConfigError(
                        f"{where}: {name}: expected a non-empty dict of key -> list of values "
                        f"(or a list of such dicts), got {group!r}"
                    )
                for path, vals in group.items():
                    _check_axis(where, f"{name}.{path}", path, vals)
                    _claim(where, owner, path, name)
                lengths = {path: len(vals) for path, vals in group.items()}
                if len(set(lengths.values())) > 1:
                    given = ", ".join(f"{path}: {length}" for path, length in lengths.items())
                    raise ConfigError(
                        f"{where}: {name}: lists of different lengths ({given}); every list of a zip "
                        "group must have the same length"
                    )
                axes.append((dict(group), next(iter(lengths.values()))))
            continue
        _check_axis(where, f"sweep.{key}", key, values)
        _claim(where, owner, key, "sweep")
        axes.append(({key: values}, len(values)))
    return axes


def _base_paths(base: dict[str, Any]) -> list[str]:
    """The paths `base` sets: one per key, or one per entry of a nested dict (`model.loops`)."""
    paths = []
    for key, value in base.items():
        if key in NESTED and isinstance(value, dict):
            paths += [f"{key}.{inner}" for inner in value]
        else:
            paths.append(key)
    return paths


def _claim(where: str, owner: dict[str, str], path: str, by: str) -> None:
    """Record that `by` sets `path`; refuse a path set twice (equal, or one inside the other)."""
    for other, other_by in owner.items():
        if other == path or other.startswith(path + ".") or path.startswith(other + "."):
            same = path if other == path else " and ".join(sorted((other, path), key=len))
            both = f"both {other_by} and {by}" if other_by != by else f"{by} twice"
            raise ConfigError(f"{where}: {same}: given in {both}; give each key once")
    owner[path] = by


def _check_axis(where: str, name: str, path: str, values: Any) -> None:
    """One sweep entry: a known path and a non-empty list of values."""
    _check_path(where, name, path)
    if not isinstance(values, list | tuple):
        raise ConfigError(f"{where}: {name}: expected a list, got {values!r}")
    if not values:
        raise ConfigError(f"{where}: {name}: empty list (give at least one value)")


def _check_path(where: str, name: str, path: str) -> None:
    """A dotted path goes one level into `model`, `data` or `budget`, to a key that exists there."""
    if not isinstance(path, str) or not path:
        raise ConfigError(f"{where}: {name}: a sweep key must be a non-empty string, got {path!r}")
    if "." not in path:
        return
    head, _, rest = path.partition(".")
    if head not in NESTED:
        raise ConfigError(
            f"{where}: {name}: {head!r} is not a dict a sweep can go into; dotted paths go into "
            f"{', '.join(NESTED)}"
        )
    key, dot, _ = rest.partition(".")
    if dot:
        raise ConfigError(
            f"{where}: {name}: {head}.{key} is not a dict (a path goes one level into {head}; "
            "give the whole value)"
        )
    accepted = _nested_keys(head)
    if key not in accepted:
        hint = fields.did_you_mean(key, accepted)
        raise ConfigError(f"{where}: {name}: unknown key {key!r}{hint}; accepted: {', '.join(accepted)}")


def _nested_keys(head: str) -> tuple[str, ...]:
    if head == "budget":
        return _BUDGET_KEYS
    if head == "model":
        from looplab.model.config import ModelConfig

        return tuple(sorted(f.name for f in dataclasses.fields(ModelConfig)))
    from looplab.workers.data.shards import DataSpec

    return tuple(f.name for f in dataclasses.fields(DataSpec))


def _set_path(cfg: dict[str, Any], path: str, value: Any) -> None:
    head, dot, key = path.partition(".")
    if not dot:
        cfg[head] = value
        return
    inner = cfg.get(head)
    cfg[head] = {**(inner if isinstance(inner, dict) else {}), key: value}


def _pop_label(where: str, cfg: dict[str, Any]) -> str | None:
    """Take the variant label out of a config. It names a variant for people and does not change what
    runs, so it is not part of the spec and not of the config hash: the same spec submitted under two
    labels is one job (the label given first stays)."""
    label = cfg.pop(LABEL, None)
    if label is None:
        return None
    if not isinstance(label, str) or not label.strip() or len(label) > LABEL_MAX:
        raise ConfigError(
            f"{where}: {LABEL}: expected a non-empty string of at most {LABEL_MAX} characters, got {label!r}"
        )
    return label.strip()


@dataclass
class JobPlan:
    """One job to insert: its kind and that kind's declaration, canonical spec, dependencies (indexes
    into the plan list, or existing job ids), and its config hash."""

    kind: str
    declared: Kind  # the kind's declaration in the registry the grid was expanded with
    spec: dict[str, Any]
    grid_index: int
    priority: int
    max_attempts: int
    resources: dict[str, Any] | None = None
    deps: list[int] = field(default_factory=list)  # indexes of other plans
    waits: list[int] = field(default_factory=list)  # indexes of plans it waits for, not part of its hash
    dep_ids: list[int] = field(default_factory=list)  # existing jobs (a match-time reference by id)
    budget: dict[str, Any] | None = None
    dep_hashes: list[str] = field(default_factory=list)
    config_hash: str = ""
    label: str | None = None  # the variant label the user gave (grid key `label`), else None
    retention: str = DEFAULT_RETENTION  # the grid's (orchestrator/retention.py)
    # a model of another family (model/contract/): its n_params and flops_per_token from the check
    family_facts: dict[str, Any] | None = None


def trained_plan(plans: list[JobPlan], i: int) -> JobPlan | None:
    """The plan whose model checkpoint plan i is about (a depth sweep's or an eval's train or import plan:
    the job it follows, its first dependency), else None."""
    plan = plans[i]
    about, follows = plan.declared.about, plan.declared.follows
    if about == CHECKPOINT and plan.deps and plans[plan.deps[0]].kind in follows:
        return plans[plan.deps[0]]
    return None


RESOURCE_KEYS = ("num_cpus", "num_gpus", "workers", "exclusive", "preemptible")


def _kind_resources(
    grid: Grid, kind: str, follow_ups: tuple[str, ...], kinds: JobRegistry
) -> dict[str, Any] | None:
    res = grid.resources
    if not res:
        return None
    if any(k in res for k in (grid.job, *follow_ups)):  # per-kind mapping
        res, where = res.get(kind), f"resources.{kind}"
    else:
        res, where = (res if kind == grid.job else None), "resources"
    res = fields.mapping(f"grid {grid.name!r}: {where}", res, "a dict like {'num_gpus': 1, 'num_cpus': 1}")
    for k, v in res.items():
        if k not in RESOURCE_KEYS:
            raise ConfigError(
                f"grid {grid.name!r}: {where}.{k}: unknown; accepted: {', '.join(RESOURCE_KEYS)}"
            )
        if k in ("exclusive", "preemptible"):  # the node to itself; may be stopped for an urgent job
            fields.boolean(f"grid {grid.name!r}: {where}.{k}", v)
        elif k == "workers":  # bundles of num_cpus/num_gpus started all at once (orchestrator/admission.py)
            fields.integer(f"grid {grid.name!r}: {where}.{k}", v, lo=1)
            # one run, data-parallel on Ray Train (workers/train/distributed.py), for the kinds declared so
            jobkinds.check_workers(f"grid {grid.name!r}: {where}.{k}", kind, v, kinds)
        else:
            fields.number(f"grid {grid.name!r}: {where}.{k}", v, lo=0)
    return res or None


def _train_spec(name: str, cfg: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Translate grid-level keys into a train spec; returns (spec, budget-as-submitted or None)."""
    cfg = dict(cfg)
    budget = cfg.pop("budget", None)
    if budget is None:
        return cfg, None
    both = [k for k in BUDGET_SPEC_KEYS if cfg.get(k) is not None]
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
    ((key, value),) = budget.items()
    if key != MATCH_TIME:
        value = fields.number(f"grid {name!r}: budget.{key}", value, lo=0, lo_open=True)
        cfg[key] = int(value) if key == "tokens" else float(value) if key == "flops" else value
        return cfg, {key: cfg[key]}
    return cfg, {MATCH_TIME: value}


def _validate(kinds: JobRegistry, grid_name: str, kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    try:
        return kinds.validate(kind, spec)
    except ConfigError as e:
        raise ConfigError(f"grid {grid_name!r}: {e}") from None
    except (TypeError, ValueError) as e:
        raise ConfigError(f"grid {grid_name!r}: {kind}: {e}") from None


def _checked(grid: Grid, kinds: JobRegistry) -> Grid:
    """`grid` with its own fields checked (a wrong type names its field, rather than crash later);
    `then` against the follow-ups the registry `kinds` declares."""
    where = f"grid {grid.name!r}"
    for attr, what in (
        ("base", "a dict of spec keys"),
        ("sweep", "a dict of key -> list of values"),
        ("follow", "a dict kind -> spec"),
    ):
        if not isinstance(getattr(grid, attr), dict):
            raise ConfigError(f"{where}: {attr}: expected {what}, got {getattr(grid, attr)!r}")
    follow_ups = jobkinds.follow_ups(None, kinds)
    if not isinstance(grid.then, list | tuple):
        raise ConfigError(f"{where}: then: expected a list of {', '.join(follow_ups)}, got {grid.then!r}")
    for follow in grid.then:
        fields.choice(f"{where}: then", follow, follow_ups)
    for k in grid.follow:
        if k not in grid.then:
            raise ConfigError(f"{where}: follow.{k}: not in then={list(grid.then)}")
    for follow in grid.then:
        follows = jobkinds.declared(follow, kinds).follows
        if grid.job not in follows:
            raise ConfigError(
                f"{where}: then: {follow} attaches to {' or '.join(follows)} jobs, not {grid.job!r}"
            )
    if grid.resources is not None:
        fields.mapping(f"{where}: resources", grid.resources, "a dict like {'num_gpus': 1, 'num_cpus': 1}")
    return dataclasses.replace(
        grid,
        priority=fields.integer(f"{where}: priority", grid.priority),
        max_attempts=fields.integer(f"{where}: max_attempts", grid.max_attempts, lo=1),
        retention=fields.choice(f"{where}: retention", grid.retention, RETENTIONS),
        health=check_grid_health(where, grid.health),
    )


def expand(grids: list[Grid], kinds: JobRegistry) -> list[JobPlan]:
    """Validate every grid and expand them into plans. Raises ConfigError before anything is written,
    naming every grid that is refused (one line each), not only the first."""
    plans: list[JobPlan] = []
    trains: list[tuple[int, dict[str, Any]]] = []  # (plan index, canonical train spec)
    pending_match: list[tuple[int, str]] = []  # (plan index, grid name) of match-time budgets
    # the kinds a grid's `resources` may name: its follow-ups and its preparation
    follow_ups = (*jobkinds.follow_ups(None, kinds), PREPARE)
    families: dict[str, Any] = {}  # the conformance reports of the submission's families, by config
    refused: list[str] = []
    for gi, grid in enumerate(grids):
        if not isinstance(grid, Grid):
            raise ConfigError(f"submit: expected Grid objects, got {type(grid).__name__}")
        try:
            _grid_plans(gi, grid, kinds, follow_ups, families, plans, trains, pending_match)
        except ConfigError as e:
            refused.append(str(e))
    if len(refused) == 1:
        raise ConfigError(refused[0])
    if refused:
        raise ConfigError(f"{len(refused)} of {len(grids)} grids refused:\n  " + "\n  ".join(refused))
    pairing.link(plans, trains, pending_match)
    _add_preparations(plans, grids, kinds, follow_ups)
    return plans


def _grid_plans(
    gi: int,
    grid: Grid,
    kinds: JobRegistry,
    follow_ups: tuple[str, ...],
    families: dict[str, Any],
    plans: list[JobPlan],
    trains: list[tuple[int, dict[str, Any]]],
    pending_match: list[tuple[int, str]],
) -> None:
    """The plans of grid number `gi`, appended to `plans` (its train specs to `trains`, its match-time
    budgets to `pending_match`); ConfigError naming the grid for the first bad value in it."""
    grid = _checked(grid, kinds)
    declared = jobkinds.declared(grid.job, kinds)
    points: list[tuple[dict[str, Any], Any]] = []  # each point's spec and match-time budget
    for cfg in grid.configs():
        label = _pop_label(f"grid {grid.name!r}", cfg)
        budget, facts = None, None
        if declared.trains:
            spec, budget = _train_spec(grid.name, cfg)
            if pairing.is_match_time(budget):  # validated with a stand-in time budget
                spec = _validate(kinds, grid.name, grid.job, {**spec, "time_s": _PENDING_TIME_S})
                spec["time_s"] = None
            else:
                spec = _validate(kinds, grid.name, grid.job, spec)
            facts = _check_family(grid.name, spec, families)
        else:
            spec = _validate(kinds, grid.name, grid.job, cfg)
        _refuse_alone(kinds, grid.name, grid.job, spec)
        points.append((spec, budget if pairing.is_match_time(budget) else None))
        plan = JobPlan(
            grid.job,
            declared,
            spec,
            gi,
            grid.priority,
            grid.max_attempts,
            _kind_resources(grid, grid.job, follow_ups, kinds),
            budget=budget,
            label=label,
            retention=grid.retention,
            family_facts=facts,
        )
        workers = (plan.resources or {}).get("workers", 1)
        batch = spec.get("batch_size") if declared.trains else None
        if isinstance(batch, int) and workers > 1 and batch % workers:  # each rank an equal share
            raise ConfigError(
                f"grid {grid.name!r}: resources.workers: {workers} workers cannot share "
                f"batch_size {batch} evenly; accepted: a divisor of the batch"
            )
        plans.append(plan)
        idx = len(plans) - 1
        if pairing.is_match_time(budget):
            pending_match.append((idx, grid.name))
        if declared.trains:
            trains.append((idx, spec))
        for follow in grid.then:
            plans.append(_follow_up(kinds, grid, follow, idx, spec, gi, label, follow_ups))
            plans[-1].family_facts = facts
            _refuse_follow(kinds, grid.name, plans[-1], grid.job, spec, facts)
    refuse_same_runs(grid.name, grid.job, _sweep_axes(grid), points, kinds)


def _check_family(grid_name: str, spec: dict[str, Any], reports: dict[str, Any]) -> dict[str, Any] | None:
    """Refuse a train spec whose model family breaks the contract (model/contract/ `check_family`: a
    short CPU forward at the smallest shapes), before anything is stored. looplab's own family is not
    checked (its spec names none); each family and config is checked once per submission."""
    family = spec.get("family")
    if family is None:
        return None
    from looplab.model.contract import check_family, family_settings
    from looplab.workers.train.spec import Spec

    probe = spec if spec.get("time_s") or spec.get("tokens") or spec.get("flops") else {**spec, "time_s": 1.0}
    shape = Spec.from_dict(probe).run_shape()  # what the planner prices and the trainer builds, too
    config = family_settings(shape, spec.get("family_config"))
    key = canonical_json([family, config])
    if key not in reports:
        try:
            report = check_family(family, config, loops=shape.loops)
        except ConfigError as e:
            raise ConfigError(f"grid {grid_name!r}: {e}") from None
        # what the variant columns say of this model (model/counts.py's figures are LoopedLM's), and
        # what its follow-ups may ask of it (`_refuse_follow`)
        reports[key] = {
            "n_params": report.n_params,
            "flops_per_token": report.flops_per_token,
            "family": report.family,
            "capabilities": dataclasses.asdict(report.capabilities),
            "kv_strategies": list(report.kv_strategies),
        }
    return reports[key]


def _refuse_follow(
    kinds: JobRegistry,
    grid_name: str,
    plan: JobPlan,
    followed_kind: str,
    followed_spec: dict[str, Any],
    facts: dict[str, Any] | None,
) -> None:
    """A follow-up its kind cannot run on the job it follows is refused before anything is stored: the
    one hook of a kind at submission, the registry's optional `refuse_follow(kind, spec, followed)`
    (workers/jobs.py: the kind's module's `refuse_follow`), raising ConfigError naming the field.
    `followed`: the followed job's kind and canonical spec, and for a model of another family its name
    and discovered capabilities (`_check_family`; None for looplab's own). The adaptive job refuses
    there the `gate` rule on a model without an exit gate and what its exits cannot do on a family."""
    refuse = getattr(kinds, "refuse_follow", None)
    if refuse is None:
        return
    followed = {
        "kind": followed_kind,
        "spec": followed_spec,
        "family": facts["family"] if facts else None,
        "capabilities": facts["capabilities"] if facts else None,
        "kv_strategies": facts.get("kv_strategies", []) if facts else [],
    }
    try:
        refuse(plan.kind, plan.spec, followed)
    except ConfigError as e:
        raise ConfigError(f"grid {grid_name!r}: follow.{plan.kind}.{e}") from None


def _refuse_alone(kinds: JobRegistry, grid_name: str, kind: str, spec: dict[str, Any]) -> None:
    """A job of the grid's own kind that its kind cannot run is refused before anything is stored, as a
    follow-up is (`_refuse_follow`): the registry's optional `refuse_alone(kind, spec)` (workers/jobs.py),
    raising ConfigError naming the field. A decode bench of a family refuses there a context it cannot take."""
    refuse = getattr(kinds, "refuse_alone", None)
    if refuse is not None:
        try:
            refuse(kind, spec)
        except ConfigError as e:
            raise ConfigError(f"grid {grid_name!r}: {e}") from None


def needs_preparation(data: dict[str, Any]) -> bool:
    """Whether a train job of canonical data spec `data` waits for a prepare job: any corpus but the
    built-in offline one, and the offline one when only part of it is wanted."""
    return data.get("corpus", "offline") != "offline" or data.get("max_tokens") is not None


def _add_preparations(
    plans: list[JobPlan], grids: list[Grid], kinds: JobRegistry, follow_ups: tuple[str, ...]
) -> None:
    """Append one prepare plan per (corpus, tokenizer) the train plans need prepared, sized for the
    largest of them (the whole corpus if one reads all of it); each of them waits for it. It runs at
    their highest priority, with the first grid's `resources["prepare"]` (default PREPARE_RESOURCES)."""
    groups: dict[str, list[int]] = {}  # the canonical data spec without max_tokens -> train plans
    for i, plan in enumerate(plans):
        data = plan.spec.get("data") if plan.declared.trains else None
        if isinstance(data, dict) and needs_preparation(data):
            shared = {k: v for k, v in data.items() if k != "max_tokens"}
            if shared.get("tokenizer") != "bpe":
                shared.pop("vocab_size", None)  # no other tokenizer reads it
            groups.setdefault(canonical_json(shared), []).append(i)
    for shared, members in groups.items():
        sizes = [plans[i].spec["data"].get("max_tokens") for i in members]
        first = plans[members[0]]
        grid = grids[first.grid_index]
        spec = _validate(
            kinds,
            grid.name,
            PREPARE,
            {**json.loads(shared), "max_tokens": None if None in sizes else max(sizes)},
        )
        resources = {**PREPARE_RESOURCES, **(_kind_resources(grid, PREPARE, follow_ups, kinds) or {})}
        plans.append(
            JobPlan(
                PREPARE,
                jobkinds.declared(PREPARE, kinds),
                spec,
                first.grid_index,
                max(plans[i].priority for i in members),
                max(plans[i].max_attempts for i in members),
                resources,
            )
        )
        for i in members:
            plans[i].waits.append(len(plans) - 1)


def _follow_up(
    kinds: JobRegistry,
    grid: Grid,
    follow: str,
    idx: int,
    spec: dict[str, Any],
    gi: int,
    label: str | None,
    follow_ups: tuple[str, ...],
) -> JobPlan:
    """The plan of follow-up kind `follow` of plan `idx` (canonical spec `spec`), by what it is about:
    the checkpoint (it depends on the plan; the queue sets its checkpoint at launch) or the
    architecture (the plan's model keys, no dependency: shared across seeds, needs no trained weights)."""
    declared = jobkinds.declared(follow, kinds)
    over = dict(grid.follow.get(follow, {}))
    over = {**{k: spec[k] for k in declared.inherits if k in spec and k not in over}, **over}
    if declared.about == CHECKPOINT:
        if "checkpoint" in over:
            raise ConfigError(f"grid {grid.name!r}: follow.{follow}.checkpoint: set by the queue")
        fs = _validate(kinds, grid.name, follow, {**over, "checkpoint": _PENDING_CKPT})
        fs.pop("checkpoint", None)
        deps = [idx]
    else:
        arch = {k: spec[k] for k in declared.arch_keys if k in spec}
        if "model" in declared.arch_keys:  # a model of another family is its family and config too
            from looplab.workers.model_fields import FAMILY_KEYS, SHAPE_KEYS

            # and, when its spec states its own shape (no recipe), its loop count and context
            shaped = FAMILY_KEYS + SHAPE_KEYS if "loops" in spec else FAMILY_KEYS
            arch.update({k: spec[k] for k in shaped if k in spec})
        if spec.get("seq_len") is not None and isinstance(arch.get("model"), dict):
            # the trained model's seq_len is part of its architecture (and of its variant)
            arch["model"] = {**arch["model"], "seq_len": spec["seq_len"]}
        fs = _validate(kinds, grid.name, follow, {**arch, **over})
        deps = []
    return JobPlan(
        follow,
        declared,
        fs,
        gi,
        grid.priority,
        grid.max_attempts,
        _kind_resources(grid, follow, follow_ups, kinds),
        deps=deps,
        label=label,
        retention=grid.retention,
    )


def assign_hashes(
    plans: list[JobPlan], dep_id_hash: dict[int, str], kinds: JobRegistry | None = None
) -> None:
    """Fill each plan's config hash, dependencies first (a dep's hash is part of its dependents'). The
    hash is of what defines the job (`jobkinds.identity`: the spec without its execution fields), so
    the same grid with another micro-batch size, device or cadence is the same job."""
    done: set[int] = set()

    def visit(i: int, stack: tuple[int, ...] = ()) -> str:
        if i in stack:
            raise ConfigError(f"budget.{MATCH_TIME}: circular reference between jobs")
        p = plans[i]
        if i not in done:
            p.dep_hashes = sorted(
                [visit(d, (*stack, i)) for d in p.deps] + [dep_id_hash[j] for j in p.dep_ids]
            )
            # a derived budget is identified by its reference's hash (in deps), not by how it was named
            derived = pairing.is_match_time(p.budget)
            p.config_hash = sha256(
                {
                    "kind": p.kind,
                    "spec": jobkinds.identity(p.kind, p.spec, kinds),
                    "deps": p.dep_hashes,
                    "match_time": derived,
                }
            )
            done.add(i)
        return p.config_hash

    for i in range(len(plans)):
        visit(i)
