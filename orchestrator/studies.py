"""Grids for whole studies: one call that writes the sweep a study needs.

`iso_depth_grid` is the iso-depth scaling study (recurrence r x width x FLOP budget x seed): every
member of the iso-depth family (`model.presets.iso_depth`: 2 prelude + 16/r shared layers run r times
+ 2 coda, effective depth 20) at every width, trained on every FLOP budget. The budgets are given in
FLOPs (`budget.flops`); the queue turns each into the whole-step token count it buys for that
member's own FLOPs per token (`model.counts.tokens_for_flops`), so runs of one budget spend equal compute
whatever their r and width. The variants are one zip group (n_recurrent, loops, injection, width and
heads vary together), each with a readable label (`iso_depth r=4 d=64`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from model import fields
from model.errors import ConfigError
from model.presets import ISO_DEPTH_INJECTIONS, iso_depth_overrides
from orchestrator.grid import FOLLOW_UPS, Grid

ISO_DEPTH_RECIPE = "iso_depth"
# Spec keys the helper sets itself; a caller's `train` may not give them.
_SET_BY_HELPER = ("recipe", "size", "seed", "tokens", "time_s", "flops", "budget", "label", "data")


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
    taken = sorted(set(train) & set(_SET_BY_HELPER))
    if taken:
        raise ConfigError(
            f"{where}: {taken[0]}: set by the helper (from r, widths, flops, seeds, size, data); "
            "give it through those arguments"
        )
    follow_ups = list(then)
    for kind in follow_ups:
        fields.choice(f"{where}: then", kind, FOLLOW_UPS)

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
