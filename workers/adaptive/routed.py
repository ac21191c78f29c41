"""The adaptive job's `router` cell: a family whose module routes each token through its own number
of recursions (`token_depths(idx, loops) -> (B, T)`, 1..loops; Mixture-of-Recursions' routers,
families/mor) puts that routing on the Adaptive page's frontier beside the exit rules.

Its cell, `router | per_round`, is the family's own forward at max_rounds R (the model as trained: its
loss is the fixed cell's) with each token's exit round its recursion count, so `mean_rounds` is the
mean recursions per token the router spent and the cost columns (`workers.adaptive.family.family_cost`)
charge a token of depth d the family's forward FLOPs at d. The exit-round histograms count the same
depths. Threshold: none (the router has no knob at evaluation). The exit rules (post hoc, emulated from
separate forwards for a family without the readout at any round) run beside it as for any family.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

from looplab.model.exit_names import ROUTER


@dataclass(frozen=True)
class RouterRule:
    """The router as a cell's rule (`rule`, `threshold` and `label` as `model.exits.ExitRule` has them)."""

    rule: str = ROUTER
    threshold: None = None
    label: str = ROUTER
    routed: bool = True


def routes(model) -> bool:
    """Whether the module (a `FamilyLM` or the family's own) reports each token's recursion count."""
    return callable(getattr(getattr(model, "inner", model), "token_depths", None))


def router_rules(model, spec) -> list[RouterRule]:
    """The router cell's rule when the model routes and the spec asks for per_round (its parallel
    forward); else none."""
    from looplab.model.exit_names import KVStrategy

    return [RouterRule()] if routes(model) and KVStrategy.PER_ROUND in spec.kv_strategies else []


def routed_exits(model, idx, loops: int):
    """The forward at `loops` of a routed family as an exit forward: `.logits` (B, T, V) and
    `.exit_round` (B, T), each token's recursion count (checked: 1..loops)."""
    import torch

    depths = getattr(model, "inner", model).token_depths(idx, loops)
    if depths.shape != idx.shape or int(depths.min()) < 1 or int(depths.max()) > loops:
        raise RuntimeError(
            f"token_depths: expected (B, T) counts in 1..{loops} for idx {tuple(idx.shape)}; got shape "
            f"{tuple(depths.shape)}, range {int(depths.min())}..{int(depths.max())}"
        )
    with torch.no_grad():
        logits = model(idx, loops=loops).logits
    return SimpleNamespace(logits=logits, exit_round=depths)
