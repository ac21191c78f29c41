"""The Mixture-of-Recursions-style family: in a grid, {"family": "families.mor:factory",
"family_config": {"d_model": 32, "router": "expert" | "token", "kv": "recursion" | "share_first"}}
(the fields of `MoRConfig`; `vocab_size` and `seq_len` are set by looplab; the grid's fixed
`model.loops` is the most recursions a token runs, at most `max_recursions`)."""

from __future__ import annotations

from typing import Any

from looplab.families.mor.config import KV, ROUTERS, MoRConfig, check
from looplab.families.mor.model import MoRLM

__all__ = ["KV", "ROUTERS", "MoRConfig", "MoRLM", "factory"]


def validate_config(config: dict[str, Any]) -> None:
    check(config)


def factory(config: dict[str, Any]) -> MoRLM:
    return MoRLM(MoRConfig.from_dict(config))


factory.validate_config = validate_config
