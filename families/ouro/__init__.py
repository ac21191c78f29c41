"""The Ouro-style looped family: in a grid, {"family": "families.ouro:factory", "family_config":
{"d_model": 32, "n_heads": 2, "objective": "entropy", ...}} (the fields of `OuroConfig`; `vocab_size`
and `seq_len` are set by looplab). Its exit gate is the contract's `exit_gate`, so the adaptive job's
`gate` rule runs on it natively."""

from __future__ import annotations

from typing import Any

from looplab.families.ouro.config import OBJECTIVES, OuroConfig, check
from looplab.families.ouro.model import OuroCache, OuroLM

__all__ = ["OBJECTIVES", "OuroCache", "OuroConfig", "OuroLM", "factory"]


def validate_config(config: dict[str, Any]) -> None:
    check(config)


def factory(config: dict[str, Any]) -> OuroLM:
    return OuroLM(OuroConfig.from_dict(config))


factory.validate_config = validate_config
