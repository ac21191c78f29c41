"""What a family's module offers beyond the required forward, discovered by name and signature
(`Capabilities`); each missing capability has a fallback the jobs use and record."""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from looplab.families.looped.model import LoopedLM


def _optional(fallback: str) -> Any:
    """A capability's field: absent by default; `fallback` is what looplab does without it."""
    return field(default=False, metadata={"fallback": fallback})


@dataclass(frozen=True)
class Capabilities:
    """Which optional parts of the contract a module has, each with what looplab does without it (see
    the package docstring)."""

    sample_loops: bool = _optional("the grid's fixed loops")
    row_key: bool = _optional("split-dependent if the forward is random: resume only on the same split")
    round_states: bool = _optional("no state measures in a depth sweep")
    readout: bool = _optional("exits emulated from separate forwards")
    exit_gate: bool = _optional("no learned exit: the gate exit rule is refused")
    training_loss: bool = _optional("cross-entropy of the forward's logits")
    kv_cache: bool = _optional("decoding times full recompute")
    kv_exits: bool = _optional("exits only with the KV function of per_round")
    flops_per_token: bool = _optional("measured once with FlopCounterMode")
    param_groups: bool = _optional("AdamW on every parameter")
    param_split: bool = _optional("left empty")
    validate_config: bool = _optional("the factory's own exception")

    def fallbacks(self) -> dict[str, str]:
        """What looplab does instead of each missing capability: recorded with a run's results."""
        return {f.name: f.metadata["fallback"] for f in dataclasses.fields(self) if not getattr(self, f.name)}


# LoopedLM has every capability: known without looking, so its path does no extra work; the exit gate
# only when its config has one (`looped_capabilities`).
LOOPED_CAPABILITIES = Capabilities(*(True,) * len(dataclasses.fields(Capabilities)))


def looped_capabilities(module: LoopedLM) -> Capabilities:
    """A `LoopedLM`'s capabilities: all of them, the exit gate only when it was built with one."""
    if module.gate is not None:
        return LOOPED_CAPABILITIES
    return dataclasses.replace(LOOPED_CAPABILITIES, exit_gate=False)


def _names(fn: Any, name: str) -> bool:
    """Whether callable `fn` names the parameter `name` (a **kwargs catch-all does not count: a key the
    forward silently drops would make a random family look row-keyed)."""
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def capabilities(module: nn.Module, factory: Any = None) -> Capabilities:
    """The optional capabilities `module` (built by `factory`) has, found by name and signature."""
    if isinstance(module, LoopedLM):
        return looped_capabilities(module)
    held = getattr(module, "caps", None)
    if isinstance(
        held, Capabilities
    ):  # a family's module as the jobs hold it (FamilyLM): what it was built with
        return held
    has = lambda name: callable(getattr(module, name, None))  # noqa: E731
    fwd = module.forward
    return Capabilities(
        sample_loops=has("sample_loops"),
        row_key=_names(fwd, "row_key"),
        round_states=has("round_states") and _names(module.round_states, "skip_round"),
        readout=all(has(n) for n in ("readout", "run_rounds", "rope")),
        exit_gate=has("exit_gate"),
        training_loss=has("training_loss"),
        kv_cache=all(has(n) for n in ("setup_cache", "prefill", "decode_step")),
        kv_exits=all(has(n) for n in ("kv_strategies", "step_context", "setup_cache", "run_rounds")),
        flops_per_token=has("flops_per_token"),
        param_groups=has("param_groups"),
        param_split=has("param_split"),
        validate_config=callable(getattr(factory, "validate_config", None)),
    )


def own_kv_strategies(module: nn.Module) -> tuple[str, ...]:
    """A family's own KV strategy names (the contract's `kv_strategies()`, the first the cache as
    trained) when it can run exits through them (`step_context`); () otherwise, looplab's `LoopedLM`
    included (its strategies are `model.exit_names.KVStrategy`, run by `model.exits` itself)."""
    inner = getattr(module, "inner", module)  # a FamilyLM holds the family's module
    if not all(callable(getattr(inner, n, None)) for n in ("kv_strategies", "step_context")):
        return ()
    return tuple(str(n) for n in inner.kv_strategies())


def logits_of(out: Any) -> Any:
    """The logits of a forward's result: the tensor itself, or its `.logits`."""
    return getattr(out, "logits", out)
