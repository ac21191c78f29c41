"""Grids for whole studies: one call that writes the sweep a study needs.

`iso_depth_grid` is the iso-depth scaling study (recurrence r x width x FLOP budget x seed): every
member of the iso-depth family (`model.presets.iso_depth`: 2 prelude + 16/r shared layers run r times
+ 2 coda, effective depth 20) at every width, trained on every FLOP budget. The budgets are given in
FLOPs (`budget.flops`); the queue turns each into the whole-step token count it buys for that
member's own FLOPs per token (`model.counts.tokens_for_flops`), so runs of one budget spend equal compute
whatever their r and width. The variants are one zip group (n_recurrent, loops, injection, width and
heads vary together), each with a readable label (`iso_depth r=4 d=64`).

`loop_design_grid` is the loop-design study: layouts of one effective depth (BaseLoop 2x4 and 4x2,
NonLoop 8: `model.presets.loop_layout_overrides`) trained on the same tokens, so at (almost) the same
training compute, plus the injection, history and timestep variants on one of them
(`base_loop 2x4 · injection=scalar`). Each run gets a depth sweep to `sweep_factor` x its trained loop
count with the loop geometry, and interaction matrices at the trained and twice the trained count. The
follow-up is one spec per grid, so the variants are split into one grid per trained loop count.

`adaptive_grid` is the adaptive-compute study: recipes (parcae, fixed4, lean) and loop-design variants
trained on the same tokens, each followed by a depth sweep (the fixed-depth reference curve) and an
adaptive job (exit rules x thresholds x KV strategies, workers/adaptive/job.py) on the same validation
tokens, so the page Adaptive can put every rule's frontier against the fixed depth.

`families_grid` is the model-families study: looplab's own model (parcae), the Huginn-style family
(families/huginn) and the example universal transformer (examples/) trained on the same tokens x seeds,
each with a depth sweep (iso-data), and every family after the first given the training time of the
first's run of the same seed (iso-time, `budget.match_time_of`): the same comparisons the Compare page
makes between recipes, made between families through the model contract.

`learned_exits_grid` is the learned-exit study: recipes trained with an exit gate under each objective
(entropy, geometric, act: `model.exit_gate`) at each of its coefficients, plus without a gate, each
followed by a depth sweep and an adaptive job whose rules are the post-hoc ones and, for the gated
models, the `gate` rule at its thresholds: learned and post-hoc rules on one frontier.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from looplab.model import fields
from looplab.model.errors import ConfigError
from looplab.model.names import BUILTIN_FAMILY
from looplab.model.presets import (
    ISO_DEPTH_INJECTIONS,
    ISO_DEPTH_RECIPE,
    LOOP_LAYOUTS,
    RECIPES,
    iso_depth_overrides,
    loop_layout_overrides,
)
from looplab.orchestrator.grid import FOLLOW_UPS, Grid
from looplab.orchestrator.variants import LABEL_SEPARATOR

# Spec keys the helper sets itself; a caller's `train` may not give them.
_SET_BY_HELPER = ("recipe", "size", "seed", "tokens", "time_s", "flops", "budget", "label", "data")


def _check_train_and_then(where: str, train: dict[str, Any], then: Any, helper_args: str) -> list[str]:
    """The follow-up kinds of a study helper, checked; refuses train keys the helper sets itself."""
    taken = sorted(set(train) & set(_SET_BY_HELPER))
    if taken:
        raise ConfigError(
            f"{where}: {taken[0]}: set by the helper (from {helper_args}); give it through those arguments"
        )
    follow_ups = list(then)
    for kind in follow_ups:
        fields.choice(f"{where}: then", kind, FOLLOW_UPS)
    return follow_ups


def iso_depth_label(r: int, width: int) -> str:
    """The variant label of member r at width `width`, as the dashboard shows it."""
    return f"{ISO_DEPTH_RECIPE} r={r} d={width}"


def iso_depth_grid(
    r: Sequence[int] = (1, 2, 4, 8),
    widths: Sequence[int] = (64,),
    flops: Sequence[float] = (1e13,),
    seeds: Sequence[int] = (0,),
    name: str = "iso-depth",
    data: dict[str, Any] | None = None,
    *,
    size: str = "tiny",
    injection: str = "diagonal",
    head_dim: int | None = None,
    then: Sequence[str] = ("depth_sweep",),
    follow: dict[str, dict[str, Any]] | None = None,
    priority: int = 0,
    **train: Any,
) -> list[Grid]:
    """The iso-depth study as grids (one today): |r| x |widths| variants x |flops| budgets x |seeds|.

    `r`: recurrences, each dividing 16; `widths`: d_model values, each a multiple of `head_dim` (default:
    the size's); `flops`: training-FLOP budgets; `injection`: the looped members' ("diagonal" or
    "none"; r = 1 has none). `data` is the train spec's data dict; `train` any other train spec key
    (batch_size, seq_len, eval_every, lr, a `model` dict of further overrides, ...). Each run evaluates
    at its own loop count r during training (`eval_loops=[r]`, unless `train` gives eval_loops); the
    follow-ups in `then` (default: a depth sweep) are attached to every run."""
    where = f"iso_depth_grid {name!r}"
    # sorted, without repeats: the variants and runs come out in a fixed order
    recurrences = fields.int_list(f"{where}: r", r, lo=1)
    width_list = fields.int_list(f"{where}: widths", widths, lo=1)
    seed_list = fields.int_list(f"{where}: seeds", seeds, lo=0)
    if not isinstance(flops, list | tuple) or not flops:
        raise ConfigError(f"{where}: flops: expected a non-empty list of FLOP budgets, got {flops!r}")
    budgets = sorted({float(fields.number(f"{where}: flops", f, lo=0, lo_open=True)) for f in flops})
    fields.choice(f"{where}: injection", injection, ISO_DEPTH_INJECTIONS)
    follow_ups = _check_train_and_then(where, train, then, "r, widths, flops, seeds, size, data")

    variants: dict[str, list[Any]] = {}
    for recurrence in recurrences:
        for width in width_list:
            try:
                member = iso_depth_overrides(recurrence, width, injection, size, head_dim)
            except ConfigError as e:
                raise ConfigError(f"{where}: {e}") from None
            for key, value in member.items():
                variants.setdefault(f"model.{key}", []).append(value)
            variants.setdefault("label", []).append(iso_depth_label(recurrence, width))
            if "eval_loops" not in train:
                variants.setdefault("eval_loops", []).append([recurrence])

    base: dict[str, Any] = {"recipe": ISO_DEPTH_RECIPE, "size": size, **train}
    if data is not None:
        base["data"] = data
    sweep: dict[str, Any] = {"zip": variants, "budget.flops": budgets, "seed": seed_list}
    return [Grid(name, base=base, sweep=sweep, then=follow_ups, follow=dict(follow or {}), priority=priority)]


# The loop-design study's layouts: (layout, shared layers, loops), effective depth 8 each.
LOOP_DESIGN_LAYOUTS = (("base_loop", 2, 4), ("base_loop", 4, 2), ("non_loop", 8, 1))
LOOP_DESIGN_INJECTIONS = ("scalar", "channel", "dense", "diagonal")
LOOP_DESIGN_TIMESTEPS = ("loop_gate", "branch_gate", "adaln")
# model keys every loop-design variant sets (one zip group: each key has a value for every variant)
_DESIGN_DEFAULTS = {"history": 0, "timestep": "none"}
# depth-sweep keys the helper sets from each grid's trained loop count
_SWEEP_SET_BY_HELPER = ("loops", "checkpoint")


def loop_design_label(
    layout: str, shared: int, loops: int, prelude: int = 2, coda: int = 2, **changes: Any
) -> str:
    """`base_loop 2x4`, `non_loop 8`, `core_loop 2+2x4+2`, then each change: `base_loop 2x4 · history=1`."""
    if layout == "non_loop":
        shape = f"{shared}"
    elif layout == "core_loop":
        shape = f"{prelude}+{shared}x{loops}+{coda}"
    else:
        shape = f"{shared}x{loops}"
    return LABEL_SEPARATOR.join([f"{layout} {shape}", *(f"{key}={value}" for key, value in changes.items())])


def loop_design_grid(
    layouts: Sequence[Sequence[Any]] = LOOP_DESIGN_LAYOUTS,
    injections: Sequence[str] = LOOP_DESIGN_INJECTIONS,
    histories: Sequence[int] = (1,),
    timesteps: Sequence[str] = LOOP_DESIGN_TIMESTEPS,
    tokens: int = 8 * 64 * 100,
    seeds: Sequence[int] = (0,),
    name: str = "loop-design",
    data: dict[str, Any] | None = None,
    *,
    size: str = "tiny",
    variants_on: int = 0,
    sweep_factor: int = 3,
    then: Sequence[str] = ("depth_sweep",),
    follow: dict[str, dict[str, Any]] | None = None,
    priority: int = 0,
    **train: Any,
) -> list[Grid]:
    """The loop-design study as grids, one per trained loop count: every layout of `layouts`
    ((layout, shared, loops) triples), and on `layouts[variants_on]` one variant per injection of
    `injections`, history window of `histories` and timestep kind of `timesteps` (a value equal to the
    layout's own is left out), x `seeds`, all trained on `tokens` tokens.

    Each run evaluates at its trained loop count (`eval_loops`, unless `train` gives it). With
    "depth_sweep" in `then`, the sweep runs loops 1..`sweep_factor` x trained loops and measures the
    interaction matrix at max(2, trained) and 2 x trained loops; `follow["depth_sweep"]` gives its other
    keys (eval_tokens, batch_size, interaction_tokens, ...; an `interaction_loops` of its own wins).
    `data` is the train spec's data dict; `train` any other train spec key (batch_size, seq_len, lr, ...)."""
    where = f"loop_design_grid {name!r}"
    shapes = _checked_layouts(where, layouts)
    on = fields.integer(f"{where}: variants_on", variants_on, lo=0, hi=len(shapes) - 1)
    windows = _checked_changes(where, injections, histories, timesteps)
    budget = fields.integer(f"{where}: tokens", tokens, lo=1)
    seed_list = fields.int_list(f"{where}: seeds", seeds, lo=0)
    factor = fields.integer(f"{where}: sweep_factor", sweep_factor, lo=1)
    follow_ups = _check_train_and_then(where, train, then, "layouts, tokens, seeds, size, data")
    follow = {kind: dict(spec) for kind, spec in (follow or {}).items()}
    sweep_spec = follow.get("depth_sweep", {})
    taken = sorted(set(sweep_spec) & set(_SWEEP_SET_BY_HELPER))
    if taken:
        raise ConfigError(f"{where}: follow.depth_sweep.{taken[0]}: set by the helper (from sweep_factor)")

    groups = _design_variants(where, shapes, on, size, injections, windows, timesteps)
    grids = []
    for loops in sorted(groups, reverse=True):  # the deepest first: the longest runs start early
        base_spec: dict[str, Any] = {"size": size, "tokens": budget, **train}
        if data is not None:
            base_spec["data"] = data
        grid_follow = dict(follow)
        if "depth_sweep" in follow_ups:
            grid_follow["depth_sweep"] = _design_sweep(sweep_spec, loops, factor)
        grids.append(
            Grid(
                f"{name}-{loops}loops" if len(groups) > 1 else name,
                base=base_spec,
                sweep={"zip": _design_zip(groups[loops], loops, train), "seed": seed_list},
                then=follow_ups,
                follow=grid_follow,
                priority=priority,
            )
        )
    return grids


# one loop-design variant: (layout, its model overrides, its label)
_DesignVariant = tuple[str, dict[str, Any], str]


def _checked_layouts(where: str, layouts: Any) -> list[tuple[Any, ...]]:
    """`layouts` as (layout, shared, loops) tuples, each layout a known one."""
    if not isinstance(layouts, list | tuple) or not layouts:
        raise ConfigError(
            f"{where}: layouts: expected a non-empty list of (layout, shared, loops), got {layouts!r}"
        )
    shapes = []
    for entry in layouts:
        if not isinstance(entry, list | tuple) or len(entry) != 3:
            raise ConfigError(f"{where}: layouts: expected (layout, shared, loops) triples, got {entry!r}")
        fields.choice(f"{where}: layouts", entry[0], LOOP_LAYOUTS)
        shapes.append(tuple(entry))
    return shapes


def _checked_changes(
    where: str, injections: Sequence[str], histories: Sequence[int], timesteps: Sequence[str]
) -> list[int]:
    """Checks the injection and timestep kinds; returns the history windows, checked."""
    from looplab.model.config import INJECTIONS, TIMESTEPS

    for kind in injections:
        fields.choice(f"{where}: injections", kind, INJECTIONS)
    for kind in timesteps:
        fields.choice(f"{where}: timesteps", kind, TIMESTEPS)
    return [fields.integer(f"{where}: histories", w, lo=0) for w in histories]


def _design_variants(
    where: str,
    shapes: list[tuple[Any, ...]],
    on: int,
    size: str,
    injections: Sequence[str],
    windows: list[int],
    timesteps: Sequence[str],
) -> dict[int, list[_DesignVariant]]:
    """Every variant of the study, grouped by trained loop count: each layout as it is, and on
    `shapes[on]` one variant per injection, history window and timestep kind (one equal to the layout's
    own is the layout itself, left out)."""
    groups: dict[int, list[_DesignVariant]] = {}
    for index, (layout, shared, loops) in enumerate(shapes):
        try:
            base = {**loop_layout_overrides(layout, shared, loops, size), **_DESIGN_DEFAULTS}
        except ConfigError as e:
            raise ConfigError(f"{where}: layouts: {e}") from None
        changes: list[dict[str, Any]] = [{}]
        if index == on:
            changes += [{"injection": kind} for kind in injections]
            changes += [{"history": w} for w in windows]
            changes += [{"timestep": kind} for kind in timesteps]
        for change in changes:
            if change and all(base[key] == value for key, value in change.items()):
                continue  # the layout itself
            label = loop_design_label(layout, shared, loops, **change)
            groups.setdefault(base["loops"], []).append((layout, {**base, **change}, label))
    return groups


def _design_zip(members: list[_DesignVariant], loops: int, train: dict[str, Any]) -> dict[str, list[Any]]:
    """The zip group of one grid: recipe, label and every model key per variant; each evaluated at its
    trained loop count unless `train` gives `eval_loops`."""
    variants: dict[str, list[Any]] = {"recipe": [m[0] for m in members], "label": [m[2] for m in members]}
    for key in members[0][1]:
        variants[f"model.{key}"] = [m[1][key] for m in members]
    if "eval_loops" not in train:
        variants["eval_loops"] = [[loops]] * len(members)
    return variants


def _design_sweep(sweep_spec: dict[str, Any], loops: int, factor: int) -> dict[str, Any]:
    """The depth sweep after a run trained at `loops`: loops 1..factor x loops, interaction matrices at
    max(2, loops) and 2 x loops (up to the most the geometry measures) unless the caller's `sweep_spec`
    gives its own; its other keys as given."""
    from looplab.model.geometry import MAX_INTERACTION_LOOPS

    inter = sorted({max(2, loops), 2 * loops} & set(range(2, MAX_INTERACTION_LOOPS + 1)))
    return {"interaction_loops": inter, **sweep_spec, "loops": list(range(1, factor * loops + 1))}


# The adaptive-compute study's models: recipes, and loop-design variants (`loop_design_grid` arguments).
ADAPTIVE_RECIPES = ("parcae", "fixed4", "lean")
ADAPTIVE_DESIGNS = {
    "layouts": [("base_loop", 2, 4)],
    "injections": [],
    "histories": [],
    "timesteps": ["loop_gate"],
}
# depth-sweep and adaptive keys the helper sets once for both (so threshold 0 reproduces the sweep)
_SHARED_EVAL = ("eval_tokens", "batch_size", "h0_seed")


def adaptive_grid(
    recipes: Sequence[str] = ADAPTIVE_RECIPES,
    designs: dict[str, Any] | None = None,
    tokens: int = 16 * 64 * 1000,
    seeds: Sequence[int] = (0,),
    name: str = "adaptive",
    data: dict[str, Any] | None = None,
    *,
    size: str = "tiny",
    sweep_loops: Sequence[int] = (1, 2, 3, 4, 6, 8),
    sweep_tokens: int = 4096,
    sweep_batch: int = 8,
    adaptive: dict[str, Any] | None = None,
    design_sweep_factor: int = 2,
    priority: int = 0,
    **train: Any,
) -> list[Grid]:
    """The adaptive-compute study as grids: the `recipes` and the loop-design variants of `designs`
    (`loop_design_grid`'s layouts / injections / histories / timesteps; default BaseLoop 2x4 and
    BaseLoop 2x4 with loop gating), x `seeds`, trained on `tokens` tokens; each run followed by a depth
    sweep (the fixed-depth reference, no interaction matrices: the recipes' at `sweep_loops`, the
    designs' at 1..`design_sweep_factor` x their trained loops, as `loop_design_grid` does) and an adaptive job
    (workers/adaptive/job.py; `adaptive` gives its other keys: rules, kv_strategies, tasks, decode_*). Both
    evaluate the same `sweep_tokens` validation tokens in batches of `sweep_batch`, so an adaptive cell
    at threshold 0 reproduces the sweep's loss at its max_rounds. `train`: any other train spec key."""
    where = f"adaptive_grid {name!r}"
    for recipe in recipes:
        fields.choice(f"{where}: recipes", recipe, RECIPES)
    adaptive_spec = dict(adaptive or {})
    taken = sorted(set(adaptive_spec) & {*_SHARED_EVAL, "checkpoint"})
    if taken:
        raise ConfigError(f"{where}: adaptive.{taken[0]}: set by the helper (from sweep_tokens, sweep_batch)")
    shared = {
        "eval_tokens": fields.integer(f"{where}: sweep_tokens", sweep_tokens, lo=1),
        "batch_size": fields.integer(f"{where}: sweep_batch", sweep_batch, lo=1),
    }
    sweep = {
        "loops": fields.int_list(f"{where}: sweep_loops", list(sweep_loops), lo=1),
        "interaction_loops": [],
        **shared,
    }
    follow = {"depth_sweep": sweep, "adaptive": {**adaptive_spec, **shared}}
    then = ["depth_sweep", "adaptive"]
    base: dict[str, Any] = {"size": size, "tokens": fields.integer(f"{where}: tokens", tokens, lo=1), **train}
    if data is not None:
        base["data"] = data
    grids = []
    if recipes:
        grids.append(
            Grid(
                f"{name}-recipes",
                base=base,
                sweep={"recipe": list(recipes), "seed": list(seeds)},
                then=then,
                follow=follow,
                priority=priority,
            )
        )
    design = {**ADAPTIVE_DESIGNS, **(designs or {})}
    if design["layouts"]:
        design_sweep = {k: v for k, v in sweep.items() if k != "loops"}  # loop_design_grid sets the loops
        grids += loop_design_grid(
            **design,
            tokens=tokens,
            seeds=seeds,
            name=f"{name}-designs",
            data=data,
            size=size,
            sweep_factor=design_sweep_factor,
            then=then,
            follow={"depth_sweep": design_sweep, "adaptive": follow["adaptive"]},
            priority=priority,
            **train,
        )
    return grids


# The families study's models: (label, family, its family_config, recipe, model overrides). The recipe
# and model give a family's run its context and its fixed loop count (model/contract/); the first is
# the reference of the iso-time runs.
FAMILIES_STUDY = (
    ("parcae", BUILTIN_FAMILY, {}, "parcae", {}),
    (
        "huginn",
        "families.huginn:factory",
        {"d_model": 64, "n_heads": 4, "mlp": 128, "mean_recurrence": 4, "backprop_depth": 2},
        "fixed4",
        {"loops": 4},
    ),
    (
        "universal transformer",
        "examples.universal_transformer:factory",
        {"d_model": 64, "n_heads": 4},
        "fixed4",
        {"loops": 4},
    ),
    # the Ouro-style looped stack trained with its entropy-regularised exit objective (families/ouro)
    (
        "ouro",
        "families.ouro:factory",
        {"d_model": 64, "n_heads": 4, "mlp": 128, "n_layers": 2},
        "fixed4",
        {"loops": 4},
    ),
    # Mixture-of-Recursions, expert-choice router (families/mor): routers for the sweep's 8 recursions
    (
        "mor",
        "families.mor:factory",
        {"d_model": 64, "n_heads": 4, "mlp": 128, "max_recursions": 8},
        "fixed4",
        {"loops": 4},
    ),
)


def reference_flops(base: dict[str, Any], reference: Sequence[Any]) -> float:
    """The training FLOPs the run of `reference` ((label, family, family_config, recipe, model)) spends on
    `base`'s token budget: its FLOPs per token (its own family's count) x the tokens of its whole steps,
    as its run records them (`train_flops`)."""
    from looplab.workers.train.cost import cost
    from looplab.workers.train.spec import Spec

    _, family, family_config, recipe, model = reference
    spec = {**base, "recipe": recipe, "model": dict(model), "seed": 0}
    if family != BUILTIN_FAMILY:
        spec.update(family=family, family_config=dict(family_config))
    priced = cost(Spec.from_dict(spec))
    return float(priced.flops_per_token * priced.steps * priced.tokens_per_step)


def families_grid(
    families: Sequence[Sequence[Any]] = FAMILIES_STUDY,
    tokens: int = 8 * 64 * 200,
    seeds: Sequence[int] = (0, 1),
    name: str = "families",
    data: dict[str, Any] | None = None,
    *,
    size: str = "tiny",
    sweep_loops: Sequence[int] = (1, 2, 4, 8),
    iso_time: bool = True,
    iso_flops: bool = False,
    follow: dict[str, dict[str, Any]] | None = None,
    priority: int = 0,
    **train: Any,
) -> list[Grid]:
    """The families study as grids: every model of `families` ((label, family, family_config, recipe,
    model overrides)) x `seeds` on `tokens` tokens, each followed by a depth sweep at `sweep_loops`
    (`follow["depth_sweep"]` gives its other keys); with `iso_time`, one grid per seed in which every
    family but the first trains for the time the first's run of that seed took (priority + 1, so it
    starts as soon as its reference is done); with `iso_flops`, one grid in which every family but the
    first trains on the training FLOPs the first's run spends on `tokens` (each family's FLOPs counted by
    its own model: a cheaper family trains more tokens; `reference_flops`). `train`: any other train spec
    key."""
    where = f"families_grid {name!r}"
    if not isinstance(families, list | tuple) or not families or any(len(f) != 5 for f in families):
        raise ConfigError(
            f"{where}: families: expected (label, family, family_config, recipe, model) tuples; got {families!r}"
        )
    for entry in families:
        fields.choice(f"{where}: families recipe", entry[3], RECIPES)
    budget = fields.integer(f"{where}: tokens", tokens, lo=1)
    seed_list = fields.int_list(f"{where}: seeds", seeds, lo=0)
    loops = fields.int_list(f"{where}: sweep_loops", list(sweep_loops), lo=1)
    _check_train_and_then(where, train, (), "families, tokens, seeds, size, data")
    base: dict[str, Any] = {"size": size, **train, **({"data": data} if data is not None else {})}
    keys = ("label", "family", "family_config", "recipe", "model")
    zipped = lambda members: {key: [m[i] for m in members] for i, key in enumerate(keys)}  # noqa: E731
    sweep_spec = {**(follow or {}).get("depth_sweep", {}), "loops": loops}
    grids = [
        Grid(
            name,
            base={**base, "tokens": budget},
            sweep={"zip": zipped(families), "seed": seed_list},
            then=["depth_sweep"],
            follow={"depth_sweep": sweep_spec},
            priority=priority,
        )
    ]
    reference = {
        "recipe": families[0][3],
        **({"family": families[0][1]} if families[0][1] != BUILTIN_FAMILY else {}),
    }
    if iso_flops and len(families) > 1:
        spent = reference_flops({**base, "tokens": budget}, families[0])
        grids.append(
            Grid(
                f"{name}-isoflops",
                base={**base, "flops": spent},
                sweep={"zip": zipped(families[1:]), "seed": seed_list},
                priority=priority,
            )
        )
    for seed in seed_list if iso_time and len(families) > 1 else []:
        timed = {"seed": seed, "budget": {"match_time_of": {**reference, "seed": seed}}}
        grids.append(
            Grid(
                f"{name}-isotime-{seed}",
                base={**base, **timed},
                sweep={"zip": zipped(families[1:])},
                priority=priority + 1,
            )
        )
    return grids


LEARNED_EXIT_RECIPES = ("lean", "base_loop")
LEARNED_EXIT_OBJECTIVES = {"entropy": [0.01, 0.05], "geometric": [0.01, 0.05], "act": [0.001, 0.01]}
GATE_THRESHOLDS = (0.3, 0.5, 0.7, 0.9, 1.0)


def learned_exits_grid(
    recipes: Sequence[str] = LEARNED_EXIT_RECIPES,
    objectives: dict[str, Sequence[float]] | None = None,
    tokens: int = 16 * 64 * 1000,
    seeds: Sequence[int] = (0, 1),
    name: str = "learned-exits",
    data: dict[str, Any] | None = None,
    *,
    gate_thresholds: Sequence[float] = GATE_THRESHOLDS,
    adaptive: dict[str, Any] | None = None,
    **study: Any,
) -> list[Grid]:
    """The learned-exit study as grids: `recipes` (fixed loop counts) trained without a gate and with
    each objective of `objectives` ({objective: [coefficients]}, default `LEARNED_EXIT_OBJECTIVES`) at
    each coefficient, x `seeds`; each run followed by a depth sweep and an adaptive job as
    `adaptive_grid` makes them (`study`: its other arguments and train keys), the gated runs' adaptive
    jobs with the `gate` rule at `gate_thresholds` beside `adaptive`'s rules. One grid per variant."""
    where = f"learned_exits_grid {name!r}"
    objectives = fields.mapping(
        f"{where}: objectives", LEARNED_EXIT_OBJECTIVES if objectives is None else objectives
    )
    spec = dict(adaptive or {})
    posthoc = dict(
        spec.pop("rules", None) or {"state": [0.05], "kl": [0.01], "entropy": [0.02], "argmax": [2]}
    )
    variants: list[tuple[str, dict[str, Any]]] = [("none", {})]
    for objective, coefs in objectives.items():
        if not isinstance(coefs, list | tuple) or not coefs:
            raise ConfigError(f"{where}: objectives.{objective}: expected a non-empty list of coefficients")
        variants += [(f"{objective}-{c:g}", {"exit_gate": objective, "gate_coef": c}) for c in coefs]
    grids = []
    for label, model in variants:
        rules = {**posthoc, **({"gate": list(gate_thresholds)} if model else {})}
        grids += adaptive_grid(
            recipes,
            {"layouts": []},
            tokens,
            seeds,
            f"{name}-{label}",
            data,
            adaptive={**spec, "rules": rules},
            model=model,
            **study,
        )
    return grids
