"""The Huginn-style recurrent-depth family: in a grid, {"family": "families.huginn:factory",
"family_config": {"d_model": 32, "n_heads": 2, ...}} (the fields of `HuginnConfig`; `vocab_size` and
`seq_len` are set by looplab). `published_counts()` gives the published model's parameters and
training FLOPs per token at the recurrence counts the planner prices (`PLANNER_RECURRENCES`)."""

from __future__ import annotations

from typing import Any

import torch

from looplab.families.huginn import layout
from looplab.families.huginn.cache import KVStrategy
from looplab.families.huginn.config import PLANNER_RECURRENCES, PUBLISHED, HuginnConfig, check
from looplab.families.huginn.model import HuginnLM

__all__ = [
    "PLANNER_RECURRENCES",
    "PUBLISHED",
    "PUBLISHED_LAYOUTS",
    "HuginnConfig",
    "HuginnLM",
    "KVStrategy",
    "factory",
]

# The checkpoint layouts of other code this family reads (the importer asks every family for its own;
# docs/published-models.md): each has MODEL_TYPE, FAMILY, config_from_published, state_from_published.
PUBLISHED_LAYOUTS = (layout,)


def validate_config(config: dict[str, Any]) -> None:
    check(config)


def factory(config: dict[str, Any]) -> HuginnLM:
    return HuginnLM(HuginnConfig.from_dict(config))


def check_config(config: dict[str, Any]) -> dict[str, Any]:
    """A small configuration of the same code for looplab's conformance check of a large one (the
    contract's `check_config`, model/family_pricing.py): the same blocks, recurrence, vocabulary and
    options at width 32, so a grid at the published size is checked without allocating 3.6 B parameters."""
    return {**config, "d_model": 32, "n_heads": 2, "mlp": 48}


factory.validate_config = validate_config
factory.check_config = check_config


def published_counts(recurrences=PLANNER_RECURRENCES) -> dict[str, Any]:
    """The published configuration's parameter counts and training FLOPs per token at each recurrence
    count, from a model built on the meta device (nothing allocated)."""
    with torch.device("meta"):
        model = factory(dict(PUBLISHED))
    split = model.param_split()
    count = lambda ps: sum(p.numel() for p in ps)  # noqa: E731
    return {
        "params": count(model.parameters()),
        "params_once": count(split["once"]),
        "params_recurrent": count(split["recurrent"]),
        "params_embedding": count(split["embedding"]),
        "flops_per_token": {n: model.flops_per_token(n) for n in recurrences},
    }
