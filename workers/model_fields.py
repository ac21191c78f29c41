"""The fields that select a job's model, declared once for every Spec that builds one (train, decode
bench): looplab's own model by `recipe`, `size` and `model` overrides, or another family by `family`
and `family_config`. A spec of looplab's own family (`BUILTIN_FAMILY`, model/names.py, torch-free so
that validating a grid imports no torch) stores neither family key, so every run stored before
families existed keeps its dict and its hash."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from looplab.model import fields
from looplab.model.errors import ConfigError
from looplab.model.names import BUILTIN_FAMILY
from looplab.names import canonical_family

FAMILY_KEYS = ("family", "family_config")


@dataclass(frozen=True)
class ModelFields:
    recipe: str = "lean"
    """recipe name, one of model.presets.RECIPES (lean, parcae, fixed4, plain, ...)"""
    size: str = "tiny"
    """model size, one of model.presets.SIZES"""
    model: dict[str, Any] = field(default_factory=dict)
    """ModelConfig field overrides, e.g. d_model=32"""
    family: str = BUILTIN_FAMILY
    """the model family: looped (looplab's own model, set by recipe, size and model), a factory as
    'package.module:factory' importable on every node, or a short name registered in the entry-point
    group looplab.models (docs/own-model.md)"""
    family_config: dict[str, Any] = field(default_factory=dict)
    """another family's own config, given to its factory with vocab_size and seq_len added"""

    def family_keys(self, d: dict[str, Any]) -> dict[str, Any]:
        """`d` (this spec as a dict) without the family keys for looplab's own family, so stored runs
        keep their hash; another family's config as a plain dict."""
        if self.family == BUILTIN_FAMILY:
            for key in FAMILY_KEYS:
                d.pop(key, None)
        else:
            d["family_config"] = dict(self.family_config)
        return d


def model_fields(d: dict[str, Any]) -> dict[str, Any]:
    """The five checked values of `d` (which holds every key, defaults filled): recipe and size by name,
    the overrides as canonical JSON (tuples -> lists, keys sorted, as spec.json and the queue store
    them), the family checked by `family_fields`."""
    from looplab.model.presets import RECIPES, SIZES

    model = fields.mapping("model", d["model"], "a mapping of ModelConfig overrides")
    try:
        model = json.loads(json.dumps(model))
    except (TypeError, ValueError) as e:
        raise ConfigError(f"model: overrides must be plain JSON values: {e}") from e
    family, family_config = family_fields(d["family"], d["family_config"])
    return {
        "recipe": fields.choice("recipe", d["recipe"], sorted(RECIPES)),
        "size": fields.choice("size", d["size"], sorted(SIZES)),
        "model": dict(sorted(model.items())),
        "family": family,
        "family_config": family_config,
    }


def family_fields(family: Any, config: Any) -> tuple[str, dict[str, Any]]:
    """The checked `family` name and `family_config` (canonical JSON values, keys sorted). Only a family
    other than looplab's own takes a family_config (LoopedLM is configured by recipe, size and model);
    the keys looplab sets itself (vocab_size, seq_len) are not the family's to give."""
    if not isinstance(family, str) or not family.strip():
        raise ConfigError(
            f"family: expected {BUILTIN_FAMILY!r}, 'package.module:factory' or a name registered in the "
            f"entry-point group looplab.models; got {family!r}"
        )
    config = fields.mapping("family_config", config, "a mapping of the family's own settings")
    try:
        config = json.loads(json.dumps(config))
    except (TypeError, ValueError) as e:
        raise ConfigError(f"family_config: expected plain JSON values: {e}") from e
    if family == BUILTIN_FAMILY and config:
        raise ConfigError(
            f"family_config: only for a family other than {BUILTIN_FAMILY!r}; looplab's own model is "
            "configured by recipe, size and model"
        )
    provided = sorted(k for k in ("vocab_size", "seq_len") if k in config)
    if provided:
        raise ConfigError(
            f"family_config.{provided[0]}: set by looplab (the tokenizer's vocabulary, the spec's "
            "seq_len); accepted: the family's other settings"
        )
    return canonical_family(family.strip()), dict(sorted(config.items()))
