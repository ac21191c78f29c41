"""The conformance check (`check_family`): a short CPU forward at the smallest shapes that refuses a
family which does not import, whose factory fails, whose forward ignores its loop count or returns
logits of the wrong shape; large configurations are checked at the factory's `check_config`."""

from __future__ import annotations

import copy
import inspect
import json
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from looplab.model.contract.capabilities import (
    Capabilities,
    _names,
    capabilities,
    logits_of,
    own_kv_strategies,
)
from looplab.model.contract.flops import measure_flops_per_token
from looplab.model.contract.resolution import Family, FamilyError, instantiate, resolve_family

# The smallest shapes of the conformance forward: two rows (a batch), four positions.
CHECK_BATCH, CHECK_LEN = 2, 4


# Above this many parameters (counted on the meta device) a family with `check_config` is checked at
# its small configuration: 50 M fp32 parameters are 200 MB, twice with the check's randomised copy.
CHECK_MAX_PARAMS = 50_000_000


def meta_module(family: Family, config: dict[str, Any]) -> nn.Module:
    """factory(config) on the meta device: every parameter a shape without storage."""
    with torch.device("meta"):
        return instantiate(family, config)


def n_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def large_module(family: Family, config: dict[str, Any]) -> nn.Module | None:
    """The meta module of `config` when the conformance check should run at the family's
    `check_config` instead (model/family_pricing.py says why), else None."""
    small = getattr(family.factory, "check_config", None)
    if small is None:
        return None
    module = meta_module(family, config)
    if n_params(module) <= CHECK_MAX_PARAMS or not capabilities(module, family.factory).flops_per_token:
        return None
    return module


def check_config(family: Family, config: dict[str, Any]) -> dict[str, Any]:
    """The family's small configuration of the same code for `config` (its `factory.check_config`)."""
    try:
        small = dict(family.factory.check_config(dict(config)))
    except Exception as e:
        raise FamilyError(
            f"family {family.name!r}: factory.check_config raised {type(e).__name__}: {e}"
        ) from None
    if small.get("vocab_size") != config.get("vocab_size"):
        raise FamilyError(
            f"family {family.name!r}: factory.check_config changed vocab_size "
            f"{config.get('vocab_size')!r} -> {small.get('vocab_size')!r}; expected the same vocabulary"
        )
    return small


@dataclass(frozen=True)
class FamilyReport:
    """What `check_family` found: the family, its capabilities and the fallbacks looplab will use, and
    whether its forward draws randomness it cannot key per row (`split_dependent`)."""

    family: str
    package: str | None
    version: str | None
    capabilities: Capabilities
    split_dependent: bool
    vocab_size: int
    n_params: int = 0
    flops_per_token: float | None = None  # training FLOPs per token at the asked loops, when asked
    flops_measured: bool = False
    kv_strategies: tuple[str, ...] = ()  # the family's own, with kv_exits (the first: as trained)
    checked_config: dict[str, Any] | None = None  # where the forward was checked, if not the config's

    def fallbacks(self) -> dict[str, str]:
        return self.capabilities.fallbacks()


def randomise_(module: nn.Module, seed: int = 0) -> nn.Module:
    """Every parameter drawn afresh (in place) at a scale that keeps activations of order 1: matrices
    normal with std 1/sqrt(fan-in), everything else 1 + normal(0, 0.1) so norms and gates stay on."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            if p.ndim >= 2:
                p.copy_(torch.randn(p.shape, generator=g) * p.shape[-1] ** -0.5)
            else:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
    return module


def _forward_logits(family: str, module: nn.Module, idx: Tensor, loops: int, vocab: int) -> Tensor:
    """The checked logits of `module(idx, loops=loops)`: (B, T, vocab) and floating, else FamilyError."""
    try:
        out = module(idx, loops=loops)
    except Exception as e:
        raise FamilyError(
            f"family {family!r}: forward(idx, loops={loops}) raised {type(e).__name__}: {e}; expected "
            "logits (B, T, V) for token ids idx (B, T) and an int loop count"
        ) from None
    logits = logits_of(out)
    B, T = idx.shape
    if not isinstance(logits, Tensor) or tuple(logits.shape) != (B, T, vocab):
        got = tuple(logits.shape) if isinstance(logits, Tensor) else type(logits).__name__
        raise FamilyError(
            f"family {family!r}: forward returned logits {got}; expected a tensor of shape (B, T, V) = "
            f"{(B, T, vocab)} (or an object with .logits)"
        )
    if not logits.dtype.is_floating_point:
        raise FamilyError(
            f"family {family!r}: forward returned logits of dtype {logits.dtype}; expected float"
        )
    return logits


def split_dependent(module: nn.Module, caps: Capabilities, vocab: int) -> bool:
    """Whether `module`'s training forward draws randomness it cannot key per row (see `_split_dependent`),
    probed at the smallest shapes on the module's device."""
    device = next(module.parameters()).device
    idx = torch.randint(0, vocab, (CHECK_BATCH, CHECK_LEN), generator=torch.Generator().manual_seed(0))
    return _split_dependent(module, caps, idx.to(device))


def _split_dependent(module: nn.Module, caps: Capabilities, idx: Tensor) -> bool:
    """Whether a training forward draws from the global generator without a per-row key: two forwards
    in train mode under different global seeds give different logits."""
    if caps.row_key:
        return False
    was = module.training
    module.train()
    outs = []
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        for seed in (1, 2):
            torch.manual_seed(seed)
            outs.append(logits_of(module(idx, loops=1)).float())
    module.train(was)
    return not torch.equal(outs[0], outs[1])


def check_family(family: str | None, config: dict[str, Any], loops: int | None = None) -> FamilyReport:
    """The conformance check: build the family from `config` (which must hold `vocab_size`) and run it
    on the CPU at the smallest shapes, refusing it with FamilyError (naming the family and what was
    expected) when it breaks the contract. Returns what it found; with `loops`, also the training FLOPs
    per token at that loop count and `config["seq_len"]` (the family's own, else measured)."""
    fam = resolve_family(family)
    vocab = config.get("vocab_size")
    if isinstance(vocab, bool) or not isinstance(vocab, int) or vocab < 2:
        raise FamilyError(f"family {fam.name!r}: config vocab_size: expected an int >= 2; got {vocab!r}")
    large = large_module(fam, config)  # a published size: values checked at the family's check_config
    checked = None if large is None else check_config(fam, config)
    module = instantiate(fam, config if checked is None else checked).cpu()
    if not _names(module.forward, "loops"):
        raise FamilyError(
            f"family {fam.name!r}: forward{inspect.signature(module.forward)} takes no `loops`; expected "
            "forward(idx, loops=n) with an int loop count"
        )
    caps = capabilities(module, fam.factory)
    idx = torch.randint(0, vocab, (CHECK_BATCH, CHECK_LEN), generator=torch.Generator().manual_seed(0))
    module.eval()
    with torch.no_grad():
        _forward_logits(fam.name, module, idx, 1, vocab)
        probe = randomise_(copy.deepcopy(module))
        one, two = (_forward_logits(fam.name, probe, idx, n, vocab) for n in (1, 2))
    if torch.allclose(one, two):
        raise FamilyError(
            f"family {fam.name!r}: forward gives the same logits at loops=1 and loops=2 (with every "
            "parameter randomised); expected the loop count to change the computation"
        )
    split = _split_dependent(module, caps, idx)
    module = module if large is None else large  # counts at the asked size (the meta module)
    n_params = sum(p.numel() for p in module.parameters())
    flops, measured = None, False
    if loops is not None and caps.flops_per_token:
        flops = float(module.flops_per_token(loops))
    elif loops is not None:
        flops = measure_flops_per_token(module, vocab, int(config.get("seq_len", CHECK_LEN)), loops)
        measured = True
    kv = own_kv_strategies(module)
    return FamilyReport(
        fam.name, fam.package, fam.version, caps, split, vocab, n_params, flops, measured, kv, checked
    )


# The longest context the submission's forward probe runs (on the CPU, one row, the family's check size);
# a longer one is checked against the family's declared `max_context` only (docs/own-model.md).
CONTEXT_PROBE_MAX = 2048
_CONTEXTS_TAKEN: dict[str, int | None] = {}  # a grid's points share a family and config: one probe


def check_context(family: str | None, config: dict[str, Any], context: int) -> int | None:
    """`_check_context`, once per family, config and context in a process (a passed check: a refusal
    ends the submission)."""
    key = json.dumps([family, config, context], sort_keys=True, default=str)
    if key not in _CONTEXTS_TAKEN:
        _CONTEXTS_TAKEN[key] = _check_context(family, config, context)
    return _CONTEXTS_TAKEN[key]


def _check_context(family: str | None, config: dict[str, Any], context: int) -> int | None:
    """Refuse (FamilyError naming `context_lens`) a family that cannot take `context` tokens, the longest
    a decode benchmark will ask of it: a module that declares `max_context` (an int: a learned position
    table, a fixed-size cache) is held to it; one that declares nothing is run forward on one row of
    `context` tokens (up to CONTEXT_PROBE_MAX), since a position table of the training length fails
    there with the same shape error on every attempt of the job. Returns the declared limit, if any."""
    fam = resolve_family(family)
    large = large_module(fam, config)
    module = instantiate(fam, config if large is None else check_config(fam, config)).cpu().eval()
    limit = getattr(module, "max_context", None)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise FamilyError(f"family {fam.name!r}: max_context {limit!r}; expected an int >= 1 (tokens)")
    if limit is not None:
        if context > limit:
            raise FamilyError(
                f"context_lens: {context} tokens is more than family {fam.name!r} can take (its max_context "
                f"is {limit}); accepted: context lengths up to {limit}"
            )
        return limit
    if context > CONTEXT_PROBE_MAX:
        return None
    idx = torch.zeros((1, context), dtype=torch.long)
    try:
        with torch.no_grad():
            module(idx, loops=1)
    except Exception as e:
        raise FamilyError(
            f"context_lens: family {fam.name!r} cannot take a context of {context} tokens: its forward on "
            f"(1, {context}) token ids raised {type(e).__name__}: {e} (trained at seq_len "
            f"{config.get('seq_len')}); accepted: context lengths its forward takes, or declare the "
            "family's `max_context` (docs/own-model.md)"
        ) from None
    return None
