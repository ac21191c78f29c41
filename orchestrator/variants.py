"""Variant identity: which model a job is about, as the columns the views and the dashboard group by.

A *variant* is recipe + size + the model overrides that change the preset (`model.loops=8`, a
train spec's `seq_len`) and, for a training run, the batch it trains with and the vocabulary its
tokenizer asks for. Seeds of one variant share its id; two variants of one recipe never do, so
nothing that averages over seeds mixes, say, loops 4 with loops 8, batch 8 with batch 256, or a
byte-level run with a 32k BPE one. Overrides equal to the preset's value are left out: `{"loops": 4}`
on fixed4 is fixed4. Runs that differ only in their budget (or the corpus) are the same variant.

The id is built in two steps, so a migration can re-derive it from stored columns: the architecture's
id = sha256 of {recipe, size, model overrides} (what a decode benchmark, which trains nothing, is
known by), then a training run's id = sha256 of {architecture id, batch_size, vocab_size}.

An imported model (workers/importer.py) is known by where it came from as well: its kind declares
`identity_keys` (source and revision), which join the variant id, make its label (`parcae-140m@1a2b3c4d5e6f`)
and fill `imported_from`, so a published model never shares a variant with a run of the same
architecture trained here, while a decode bench of it (architecture only) does.

The columns are derived from live model code (the resolved `ModelConfig` and `model.counts.arch_summary`)
at submission and stored, so that readers need neither the model code nor JSON functions.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from looplab.model.fields import plain
from looplab.model.names import ARCH_COLUMNS
from looplab.orchestrator import jobkinds
from looplab.orchestrator.canonical import canonical_json, sha256
from looplab.orchestrator.jobkinds import Kind

VARIANT_ID_HEX = 12
LABEL_MAX = 200  # jobs.variant_label is String(200)
LABEL_SEPARATOR = " · "
# Columns of `jobs` filled from `model.counts.arch_summary`: ARCH_COLUMNS, declared in model/names.py.
# What a training run's variant adds to its architecture's (revision 0010); NULL for a decode bench.
RUN_COLUMNS = ("global_batch", "vocab_size")
VARIANT_COLUMNS = (
    "variant_id",
    "variant_label",
    "loop_sampler",
    "loops",
    *RUN_COLUMNS,
    *ARCH_COLUMNS,
    "imported_from",
)
REVISION_SHOWN = 12  # hex digits of a revision in a label


@dataclasses.dataclass(frozen=True)
class Resolved:
    """The model a spec is about: its config, the batch size its FLOPs are counted at, the variant."""

    cfg: Any  # model.config.ModelConfig
    batch_size: int
    recipe: str | None
    size: str | None  # None, and recipe too: another family stating its own shape
    overrides: dict[str, Any]  # canonical: only the fields that differ from the preset, JSON values
    identity: dict[str, Any] = dataclasses.field(default_factory=dict)  # the kind's identity_keys' values
    trained: bool = False  # a training run: its batch size and vocabulary are part of its variant

    def run_design(self) -> dict[str, int] | None:
        """What a training run's variant adds to its architecture's: the global batch and the asked
        vocabulary (None for a job that trains nothing)."""
        return {"batch_size": self.batch_size, "vocab_size": self.cfg.vocab_size} if self.trained else None


def resolve(kind: str, spec: dict[str, Any], declared: Kind | None = None) -> Resolved | None:
    """The resolved model of the spec of a kind that names one (declared with `arch_keys`: train,
    decode bench; `declared`, default `jobkinds.declared(kind)`); None when the spec names no model
    this code knows (a kind about another job's model, a plugin's spec, a config that no longer builds).

    A train spec is read through `workers.train.spec.Spec` (the vocabulary its data will have, the
    spec's seq_len); a spec that is not one (a test double's, an old config whose data is gone) falls
    back to the preset with its model overrides and the preset's vocabulary."""
    from looplab.model.errors import ConfigError as ModelConfigError
    from looplab.model.presets import preset
    from looplab.workers.train.spec import Spec

    declared = jobkinds.declared(kind) if declared is None else declared
    if not declared.arch_keys or not isinstance(spec, dict):
        return None
    if spec.get("family") is not None and "loops" in spec:
        return _resolve_shaped(spec, declared)
    recipe, size, model = spec.get("recipe"), spec.get("size") or "tiny", spec.get("model") or {}
    if not isinstance(recipe, str) or not isinstance(size, str) or not isinstance(model, dict):
        return None
    given = dict(model)
    seq_len = spec.get("seq_len") if declared.trains else None
    if seq_len is not None:
        given["seq_len"] = seq_len
    batch_size = Spec.batch_size  # a decode bench: FLOPs at the small sizes' train batch
    try:
        cfg = None
        if declared.trains:
            probe = dict(spec)
            if all(probe.get(k) is None for k in ("tokens", "time_s", "flops")):
                probe["time_s"] = 1.0  # a budget resolved later (a match-time one) does not change the model
            try:
                train = Spec.from_dict(probe)
                cfg, batch_size = train.resolved_model_config(), train.batch_size
            except (ModelConfigError, TypeError, ValueError, OSError):
                batch_size = spec.get("batch_size", batch_size)
        if cfg is None:
            cfg = preset(recipe, size, **given)
        base = preset(recipe, size)
    except (ModelConfigError, TypeError, ValueError):
        return None
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        return None
    overrides = {k: plain(getattr(cfg, k)) for k in sorted(given) if getattr(cfg, k) != getattr(base, k)}
    if spec.get("family") is not None:  # another model family: part of the variant (looplab's own is not)
        overrides = {**overrides, "family": spec["family"], "family_config": spec.get("family_config") or {}}
    identity = {k: spec.get(k) for k in declared.identity_keys}
    return Resolved(cfg, batch_size, recipe, size, overrides, identity, trained=declared.trains)


def _resolve_shaped(spec: dict[str, Any], declared: Kind) -> Resolved | None:
    """`resolve` of another family's spec that states its own shape (model/shape.py; no recipe or size):
    the variant is the family, its config and the shape's loops and context (and, for a training run,
    its batch and vocabulary); its ModelConfig is the shape's (`RunShape.model_config`)."""
    from looplab.model.errors import ConfigError as ModelConfigError
    from looplab.workers.evaluate import decode_bench
    from looplab.workers.train import spec as train_spec

    try:
        if declared.trains:
            probe = (
                spec
                if any(spec.get(k) is not None for k in ("tokens", "time_s", "flops"))
                else {
                    **spec,
                    "time_s": 1.0,  # a budget resolved later (a match-time one) does not change the model
                }
            )
            shape = train_spec.Spec.from_dict(probe).run_shape()
        else:
            shape = decode_bench.Spec.from_dict(
                {k: spec[k] for k in ("family", "family_config", "loops", "seq_len") if k in spec}
            ).run_shape()
            shape = dataclasses.replace(shape, batch_size=train_spec.Spec.batch_size)
    except (ModelConfigError, TypeError, ValueError, OSError):
        return None
    overrides = {
        "family": spec["family"],
        "family_config": spec.get("family_config") or {},
        "loops": shape.loops,
        "seq_len": shape.seq_len,
    }
    identity = {k: spec.get(k) for k in declared.identity_keys}
    cfg = dataclasses.replace(shape.model_config(), vocab_size=shape.vocab_size)
    return Resolved(cfg, shape.batch_size, None, None, overrides, identity, trained=declared.trains)


def variant_id(
    recipe: str | None,
    size: str,
    overrides: dict[str, Any],
    run: dict[str, Any] | None = None,
    identity: dict[str, Any] | None = None,
) -> str:
    """First 12 hex digits of sha256 of the canonical JSON of {recipe, size, model overrides} (and the
    identity of an imported model, when it has one): the architecture's id; with `run` ({batch_size,
    vocab_size} of a training run) `run_variant_id` of it."""
    key = {"recipe": recipe, "size": size, "model": overrides}
    arch = sha256({**key, "identity": identity} if identity else key)[:VARIANT_ID_HEX]
    return arch if run is None else run_variant_id(arch, run)


def run_variant_id(arch_id: str, run: dict[str, Any]) -> str:
    """A training run's variant id: the first 12 hex digits of sha256 of {architecture: its id, batch_size,
    vocab_size} (revision 0010 re-derives stored ids this way)."""
    return sha256({"architecture": arch_id, **run})[:VARIANT_ID_HEX]


def variant_label(recipe: str | None, overrides: dict[str, Any], shared: dict[str, Any] | None = None) -> str:
    """`fixed4 · d_model=192 · loops=8`: the recipe and each override that differs from its preset
    (the size has its own column), cut to LABEL_MAX characters. An override in `shared` with the same
    value is left out (`shared_overrides`: what every variant of a submission sets alike tells none
    of them apart); the variant id and the columns still count it."""
    shared = shared or {}
    kept = {k: v for k, v in overrides.items() if k not in shared or shared[k] != v}
    if recipe is None:  # another family stating its own shape: named first by its family
        recipe = str(overrides.get("family"))
        kept.pop("family", None)
    parts = [recipe, *(f"{key}={_label_value(value)}" for key, value in sorted(kept.items()))]
    return clip_label(LABEL_SEPARATOR.join(parts))


def identity_label(identity: dict[str, Any]) -> str:
    """`parcae-140m@1a2b3c4d5e6f`: the identity's values joined by @, a path as its last part and a
    revision as its first REVISION_SHOWN hex digits (an imported model's source and revision)."""
    parts = []
    for value in identity.values():
        text = str(value)
        if text.startswith("hf:"):
            text = text.rsplit("/", 1)[-1]
        elif "/" in text:
            text = text.rstrip("/").rsplit("/", 1)[-1]
        else:
            text = text.removeprefix("sha256:")[:REVISION_SHOWN]
        parts.append(text)
    return clip_label("@".join(parts))


def shared_overrides(models: list[Resolved | None]) -> dict[str, Any]:
    """The overrides every model of `models` (a submission's resolved plans; None: about no model)
    sets to one value, when they are two variants or more: `{"seq_len": 64}` for the demo, whose every
    run would otherwise read `parcae · seq_len=64`. {} for a single variant (its seeds): there the
    overrides are what tells it from the preset. Labels are stored at submission, so the rule applies
    per submission; jobs already stored keep the labels they were given."""
    known = [m for m in models if m is not None]
    if len({variant_id(m.recipe, m.size, m.overrides) for m in known}) < 2:
        return {}
    first, *rest = known
    return {
        key: value
        for key, value in first.overrides.items()
        if all(key in m.overrides and m.overrides[key] == value for m in rest)
    }


def clip_label(label: str) -> str:
    return label if len(label) <= LABEL_MAX else label[: LABEL_MAX - 1] + "…"


def variant_columns(kind: str, spec: dict[str, Any], label: str | None = None) -> dict[str, Any]:
    """The `jobs` columns that say which model a train or decode-bench spec is about: variant_id,
    variant_label (`label` if given), loop_sampler, loops and ARCH_COLUMNS. {} when `resolve` gives None."""
    resolved = resolve(kind, spec)
    return {} if resolved is None else columns_of(resolved, label)


def columns_of(
    resolved: Resolved, label: str | None = None, shared: dict[str, Any] | None = None
) -> dict[str, Any]:
    """`variant_columns` of a resolved model; the generated label leaves out the `shared` overrides."""
    from looplab.model.counts import arch_summary

    facts = arch_summary(resolved.cfg, resolved.batch_size)
    identity = resolved.identity
    generated = (
        identity_label(identity) if identity else variant_label(resolved.recipe, resolved.overrides, shared)
    )
    out: dict[str, Any] = {
        "variant_id": variant_id(
            resolved.recipe, resolved.size, resolved.overrides, resolved.run_design(), identity
        ),
        "variant_label": clip_label(label) if label else generated,
        "loop_sampler": resolved.cfg.loop_sampler,
        "loops": resolved.cfg.loops,
        "global_batch": resolved.batch_size if resolved.trained else None,
        "vocab_size": resolved.cfg.vocab_size if resolved.trained else None,
    }
    if identity:  # an imported model: where it came from (left out, so NULL, for a model trained here)
        out["imported_from"] = "@".join(str(v) for v in identity.values())
    for column in ARCH_COLUMNS:
        value = facts[column]
        out[column] = None if isinstance(value, float) and not math.isfinite(value) else value
    out["effective_depth"] = float(out["effective_depth"])
    out["flops_per_token"] = float(out["flops_per_token"])
    return out


def flop_budget_tokens(resolved: Resolved, flops: float) -> int:
    """The whole-step token count a FLOP budget trains (the trainer's own conversion)."""
    from looplab.model.counts import tokens_for_flops

    return int(tokens_for_flops(resolved.cfg, flops, resolved.batch_size, resolved.cfg.seq_len))


def _label_value(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, float) and value.is_integer():
        return str(value)
    return canonical_json(value)
