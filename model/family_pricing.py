"""A family at any size, priced and checked without allocating it (model/contract/ is the contract).

The planner and the submission need a family's parameter count and training FLOPs per token at the
grid's configuration, and the submission runs the conformance check (`model.contract.check_family`).
At a published size (Huginn's 3.6 B parameters: 14 GB in fp32, twice that with the check's randomised
copy) building the module on the CPU would exhaust a workstation before a GPU job is even queued. So:

- `FamilyPricing` builds the module on the meta device (shapes, no storage) when the family has its
  own `flops_per_token`: counting its parameters and FLOPs allocates nothing. A family without one is
  measured with FlopCounterMode, which needs real tensors: it is built on the CPU (as small families are).
- `model.contract.large_module(family, config)`: the meta-device module of a configuration above `CHECK_MAX_PARAMS`
  parameters whose family offers `factory.check_config(config)` (a small configuration of the same code:
  the same blocks, loop structure and vocabulary) and its own `flops_per_token`; None otherwise.
  `check_family` then runs its value checks (the forward's shapes, that the loop count matters, split
  dependence) at the small configuration and takes the counts and FLOPs from the meta module, and says
  so in its report (`checked_config`). A large family without `check_config` is checked as before, at
  its own size on the CPU.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

from torch import nn

from looplab.model.contract import (
    CHECK_LEN,
    CHECK_MAX_PARAMS,
    Capabilities,
    FamilyError,
    capabilities,
    instantiate,
    measure_activation_bytes,
    measure_flops_per_token,
    meta_module,
    n_params,
    resolve_family,
)


@dataclass(frozen=True)
class FamilyPricing:
    """A family's model as the planner prices it, from the contract alone: its parameter count and its
    training FLOPs per token at any loop count (its own `flops_per_token`, else measured once per count
    at the config's `seq_len` with FlopCounterMode), the forward a third of them. The module is built
    once per family and config in a process: on the meta device when the family counts its own FLOPs,
    else on the CPU, never run but for the counter."""

    family: str
    config_json: str  # the factory's config (`family_settings`) as canonical JSON

    @property
    def n_params(self) -> int:
        return _pricing_module(self.family, self.config_json)[1]

    @property
    def capabilities(self) -> Capabilities:
        return capabilities(_pricing_module(self.family, self.config_json)[0])

    def training_flops(self, loops: int) -> float:
        return _priced_flops(self.family, self.config_json, int(loops))

    def forward_flops(self, loops: int) -> float:
        return self.training_flops(loops) / 3

    def activation_bytes(self, loops: int) -> float:
        """Bytes autograd keeps for one training sequence at `loops`, fp32 (`measure_activation_bytes`,
        on the meta module when the family counts its own FLOPs)."""
        return _priced_activations(self.family, self.config_json, int(loops))

    def kv_cache_bytes(self, batch: int, context: int, item: int) -> float:
        """Bytes of the family's static cache of `context` tokens for `batch` rows at `item` bytes an
        element: its own `kv_cache_bytes(batch, max_len, dtype=)` on the pricing module (the meta device:
        counted, not allocated); 0 for a family without a KV cache or without that count."""
        import torch

        module, _ = _pricing_module(self.family, self.config_json)
        count = getattr(module, "kv_cache_bytes", None)
        if count is None or not capabilities(module).kv_cache:
            return 0.0
        return float(count(batch, context, dtype=torch.bfloat16 if item == 2 else torch.float32))

    @property
    def matrix_params(self) -> int:
        """Parameters the Muon optimizers update as matrices: the family's `param_groups()["matrix"]`;
        without that capability every parameter is AdamW's (the contract's fallback), so none."""
        module, _ = _pricing_module(self.family, self.config_json)
        if not capabilities(module).param_groups:
            return 0
        return sum(p.numel() for p in module.param_groups()["matrix"])


def family_pricing(family: str, config: dict[str, Any]) -> FamilyPricing:
    """The `FamilyPricing` of `family` built from `config` (its `family_settings`: vocab_size, seq_len)."""
    return FamilyPricing(family, json.dumps(config, sort_keys=True))


@functools.lru_cache(maxsize=16)
def _pricing_module(family: str, config_json: str) -> tuple[nn.Module, int]:
    fam = resolve_family(family)
    config = json.loads(config_json)
    module = meta_module(fam, config)
    if not capabilities(module, fam.factory).flops_per_token:  # measured: real tensors
        module = instantiate(fam, config).cpu()
    return module, n_params(module)


@functools.lru_cache(maxsize=256)
def _priced_activations(family: str, config_json: str, loops: int) -> float:
    """On the module the pricing holds; a family whose forward cannot run on the meta device is measured
    on a CPU copy when that is small (at most CHECK_MAX_PARAMS), else refused naming what it needs."""
    module, count = _pricing_module(family, config_json)
    config = json.loads(config_json)
    seq_len = config.get("seq_len", CHECK_LEN)
    try:
        return measure_activation_bytes(module, seq_len, loops)
    except (NotImplementedError, RuntimeError) as e:
        if next(module.parameters()).device.type != "meta":
            raise
        if count > CHECK_MAX_PARAMS:
            raise FamilyError(
                f"family {family!r}: its forward does not run on the meta device ({type(e).__name__}: {e}), "
                f"so its training memory cannot be counted at {count:,} parameters without allocating them; "
                "expected a forward that runs on the meta device"
            ) from None
        return measure_activation_bytes(instantiate(resolve_family(family), config).cpu(), seq_len, loops)


@functools.lru_cache(maxsize=256)
def _priced_flops(family: str, config_json: str, loops: int) -> float:
    module, _ = _pricing_module(family, config_json)
    if capabilities(module).flops_per_token:
        return float(module.flops_per_token(loops))
    config = json.loads(config_json)
    return measure_flops_per_token(module, config["vocab_size"], config.get("seq_len", CHECK_LEN), loops)
