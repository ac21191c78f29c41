"""The fields that select a job's model, declared once for every Spec that builds one (train, decode
bench): looplab's own model by `recipe`, `size` and `model` overrides, or another family by `family`
and `family_config`. A spec of looplab's own family (`BUILTIN_FAMILY`, model/names.py, torch-free so
that validating a grid imports no torch) stores neither family key, so every run stored before
families existed keeps its dict and its hash.

Another family's run states its shape (model/shape.py) as its own keys: `seq_len`, `loops` (and, for
a train job, `batch_size` and the budget), with no recipe, size or `model` overrides, which are
LoopedLM's; its spec stores the resolved figures, so leaving one out and giving its default are one run.
A family spec that names a recipe, size or model (written before families stated their shape, as the families
study's grids are) is read as it always was, its shape from the preset, and keeps its stored dict."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from looplab.model import fields
from looplab.model.errors import ConfigError
from looplab.model.names import BUILTIN_FAMILY
from looplab.model.shape import FAMILY_LOOPS, FAMILY_SEQ_LEN
from looplab.names import canonical_family

FAMILY_KEYS = ("family", "family_config")
# What a family's spec states of its shape besides its budget and batch: what an architecture follow-up
# (a decode bench) copies from the train job it follows, with the family keys.
SHAPE_KEYS = ("loops", "seq_len")
LOOPED_KEYS = ("recipe", "size", "model")


@dataclass(frozen=True)
class ModelFields:
    recipe: str | None = "lean"
    """recipe name, one of model.presets.RECIPES (lean, parcae, fixed4, plain, ...); not for another
    family (its shape is its seq_len and loops)"""
    size: str | None = "tiny"
    """model size, one of model.presets.SIZES; not for another family"""
    model: dict[str, Any] = field(default_factory=dict)
    """ModelConfig field overrides, e.g. d_model=32"""
    family: str = BUILTIN_FAMILY
    """the model family: looped (looplab's own model, set by recipe, size and model), a factory as
    'package.module:factory' importable on every node, or a short name registered in the entry-point
    group looplab.models (docs/own-model.md)"""
    family_config: dict[str, Any] = field(default_factory=dict)
    """another family's own config, given to its factory with vocab_size and seq_len added"""
    loops: int | None = None
    """another family's loop count (its fixed count, or the mean its own sampler draws around);
    default 4; looplab's own model takes its count from the recipe or model.loops"""

    @property
    def shaped(self) -> bool:
        """Another family whose spec states its own shape (no recipe or size of looplab's)."""
        return self.family != BUILTIN_FAMILY and self.recipe is None

    def family_keys(self, d: dict[str, Any], optional: tuple[str, ...] = ("loops",)) -> dict[str, Any]:
        """`d` (this spec as a dict) without the family keys for looplab's own family, so stored runs
        keep their hash; another family's config as a plain dict; a shaped family without LoopedLM's
        keys, any other spec without the `optional` shape keys it does not use (None)."""
        if self.family == BUILTIN_FAMILY:
            for key in FAMILY_KEYS:
                d.pop(key, None)
        else:
            d["family_config"] = dict(self.family_config)
        for key in (*LOOPED_KEYS, *optional) if self.shaped else optional:
            if key in d and (self.shaped and key in LOOPED_KEYS or d[key] is None):
                d.pop(key)
        return d

    @property
    def model_name(self) -> str:
        """How a log line names the model: recipe/size, or the family of one stating its own shape."""
        return self.family if self.shaped else f"{self.recipe}/{self.size}"

    @property
    def arch_name(self) -> str:
        """A decode bench row's `arch`: the recipe, or the family of one stating its own shape."""
        return self.family if self.shaped else str(self.recipe)

    def preset_config(self):
        """The ModelConfig this spec names, at its preset's vocabulary: looplab's own model's, or for a
        shaped family `RunShape.model_config` (the defaults at its context and loop count)."""
        from looplab.model.presets import preset
        from looplab.model.shape import RunShape

        if self.shaped:
            return RunShape(256, self.seq_len, self.loops).model_config()
        return preset(self.recipe, self.size, **self.model)


def model_fields(d: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """The checked values of `d` (which holds every key, defaults filled; `given`: the keys the spec
    gave) that select the model: recipe and size by name, the overrides as canonical JSON (tuples ->
    lists, keys sorted, as spec.json and the queue store them), the family checked by `family_fields`;
    for a shaped family (another family named with no recipe, size or model) its loops and seq_len
    instead. A family spec naming any of those is read as it was before families stated their shape
    (its shape from the preset), so a grid written so keeps its jobs' hashes."""
    from looplab.model.presets import RECIPES, SIZES

    family, family_config = family_fields(d["family"], d["family_config"])
    chosen: dict[str, Any] = {"family": family, "family_config": family_config}
    if family != BUILTIN_FAMILY and not set(LOOPED_KEYS) & set(given):
        seq_len = FAMILY_SEQ_LEN if d["seq_len"] is None else d["seq_len"]
        loops = FAMILY_LOOPS if d["loops"] is None else d["loops"]
        return {
            **chosen,
            **dict(recipe=None, size=None, model={}),
            "seq_len": fields.integer("seq_len", seq_len, lo=2),
            "loops": fields.integer("loops", loops, lo=1),
        }
    if d["loops"] is not None:
        raise ConfigError(
            f"loops: another family's loop count, when its spec names no recipe, size or model; looplab's own "
            f"model (or a family given those) takes it from the recipe or model.loops; got {d['loops']!r}"
        )
    model = fields.mapping("model", d["model"], "a mapping of ModelConfig overrides")
    try:
        model = json.loads(json.dumps(model))
    except (TypeError, ValueError) as e:
        raise ConfigError(f"model: overrides must be plain JSON values: {e}") from e
    return {
        **chosen,
        "recipe": fields.choice("recipe", d["recipe"], sorted(RECIPES)),
        "size": fields.choice("size", d["size"], sorted(SIZES)),
        "model": dict(sorted(model.items())),
        "loops": None,
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
