"""The Ouro-style looped family: in a grid, {"family": "families.ouro:factory", "family_config":
{"d_model": 32, "n_heads": 2, "objective": "entropy", ...}} (the fields of `OuroConfig`; `vocab_size`
and `seq_len` are set by looplab). Its exit gate is the contract's `exit_gate`, so the adaptive job's
`gate` rule runs on it natively."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from looplab.families.ouro import layout
from looplab.families.ouro.config import OBJECTIVES, OuroConfig, check
from looplab.families.ouro.model import OuroCache, OuroLM

__all__ = ["OBJECTIVES", "PUBLISHED_LAYOUTS", "OuroCache", "OuroConfig", "OuroLM", "factory"]

# The public code's checkpoint layout, which the importer reads (workers/layouts.py,
# docs/published-models.md).
PUBLISHED_LAYOUTS = (layout,)


def validate_config(config: dict[str, Any]) -> None:
    check(config)


def factory(config: dict[str, Any]) -> OuroLM:
    cfg = OuroConfig.from_dict(config)
    model = OuroLM(cfg)
    if cfg.init_from:
        load_weights(model, cfg.init_from)
    return model


def load_weights(model: OuroLM, path: str) -> None:
    """The weights of a looplab checkpoint of this family (`final.pt`, or a run directory holding one;
    its "model" state dict, whose keys the jobs' wrapper prefixes with "inner."); ValueError naming
    `init_from` when it is missing or of another shape."""
    file = Path(path) / "final.pt" if Path(path).is_dir() else Path(path)
    if not file.is_file():
        raise ValueError(
            f"init_from: {path!r} is not a checkpoint (no such file); expected a stage I run's final.pt"
        )
    state = torch.load(file, map_location="cpu", weights_only=True).get("model", {})
    state = {k.removeprefix("inner."): v for k, v in state.items()}
    try:
        model.load_state_dict(state)
    except RuntimeError as e:
        raise ValueError(
            f"init_from: {path!r} is not a checkpoint of this configuration ({str(e).splitlines()[0]})"
        ) from None


def check_config(config: dict[str, Any]) -> dict[str, Any]:
    """A small configuration of the same code for looplab's conformance check of a large one (the
    contract's `check_config`, model/family_pricing.py): the same layers, loop count, vocabulary and
    objective at width 32, so Ouro-1.4B (1.43 B parameters) is checked without allocating it. A
    stage II run's `init_from` is left out: its weights are the large width's, read by the run."""
    return {**config, "d_model": 32, "n_heads": 2, "mlp": 48, "init_from": ""}


factory.validate_config = validate_config
factory.check_config = check_config
