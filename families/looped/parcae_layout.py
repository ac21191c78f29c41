"""The public Parcae code's checkpoints as looplab models: its config as a `ModelConfig`, its state dict
as `LoopedLM` weights. Pure mapping, no I/O (files, tokenizers and the hub are `workers.hub`'s, which
finds this module among the family's `PUBLISHED_LAYOUTS` by `CLASS_NAME`: workers/layouts.py).

The public code (sandyresearch/parcae, `parcae_lm.models.parcae`) computes the same function as
`families.looped.model` (tests/model/test_fidelity.py writes it out and compares) with three differences of
layout, undone here:
- RoPE: it rotates neighbouring channels (2i, 2i+1) of a head, we rotate halves (i, i + D/2); the
  functions agree once the rows of every q and k weight are reordered per head (`pairs_to_halves`);
  the qk-norm and the dot product do not see the order of channels;
- names: `transformer.prelude.0.attn.c_q.weight` is our `prelude.0.attn.q.weight` (`_NAMES`), its value
  embeddings are one table per distinct layer index (`value_embeds.3.weight`), ours live in the layer;
- a tied head is stored twice there (`lm_head.weight` is `transformer.wte.weight`), once here.

Its config maps field by field (`config_from_parcae`): widths, layers per part, vocabulary (the padded
one: the table size), sequence length, RoPE base, the loop sampler (`poisson-truncated-full` per
sequence = our `poisson_seq`, per batch = `poisson_batch`, `fixed` = `fixed`; `mean_recurrence` = loops,
`mean_backprop_depth` = grad_rounds). A field whose value would change the function in a way looplab does
not compute (a bias, a softcap, another norm, GQA, a recurrent block of another width, ...) is refused
naming the field and the accepted value; fields that only say how it trains or runs (attention kernel,
checkpointing, fused head, curriculum) are ignored; an unknown field is refused, as the public code's
own `ParcaeConfig(**config)` refuses one.

Value embeddings there: a table for distinct layer i when i % 2 == (L - 1) % 2 (L distinct layers), and
a gate in the layer whose *layer id* has i % 2 == (n_layer - 1) % 2, where coda layer ids are counted
after the unrolled recurrence and n_layer = n_recurrent * mean_backprop_depth. A layer uses its table
only when it has both; the others (a table or gate with no partner) are dropped, so the mapped model
has value embeddings exactly where the public one uses them.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from looplab.model.config import ModelConfig
from looplab.model.errors import ConfigError
from looplab.model.family_parts import check_tensors
from looplab.model.names import BUILTIN_FAMILY

# The published layout this family declares (families/__init__.py): a Parcae config.json says its class,
# not a `model_type`, and maps to looplab's own family, whose config is the run's ModelConfig.
CLASS_NAME = "ParcaeConfig"  # config.json's `_class_name` for a Parcae model
FAMILY = BUILTIN_FAMILY

# The public code's defaults (parcae_lm/models/config.py Config, parcae_lm/models/parcae/config.py
# ParcaeConfig) of every field read here: from_pretrained builds ParcaeConfig(**config.json), so a
# field the file leaves out has this value.
DEFAULTS: dict[str, Any] = {
    "block_size": 4096,
    "n_embd": 4096,
    "intermediate_size": None,
    "num_attention_heads": 32,
    "num_key_value_heads": None,
    "vocab_size": 50254,
    "padding_multiple": 512,
    "padded_vocab_size": None,
    "rope_settings": {"use_rope": True, "rope_condense_ratio": 1, "rope_base": 50_000},
    "use_abacus": False,
    "block_class_name": "TransformerPreNormBlock",
    "norm_class_name": "LayerNorm",
    "norm_eps": 1e-5,
    "mlp_class_name": "BaseMLP",
    "nonlin_name": "GELU",
    "bias": False,
    "qk_bias": False,
    "init_strategy": "scaled",
    "mup_model_scaling_factor": 1,
    "clip_qkv": None,
    "qk_norm": False,
    "logit_softcap": None,
    "injection_type": "diagonal",
    "n_layers_in_recurrent_block": 4,
    "n_layers_in_prelude": 1,
    "n_layers_in_coda": 1,
    "state_init": "like-init",
    "recurrent_embedding_dimension": 1024,
    "recurrent_intermediation_embedding_dimension": 3520,
    "recurrent_num_attention_heads": None,
    "prelude_norm": False,
    "sampling_scheme": "poisson-truncated-full",
    "mean_recurrence": 32,
    "mean_backprop_depth": 8,
    "recurrent_iteration_method": "per-batch",
    "tie_embeddings": False,
}

# Fields that say how the public code trains or runs a model, not what it computes at a loop count.
IGNORED = (
    "name",
    "hf_config",
    "attn_impl",
    "init_orthogonal",
    "skip_initialization",
    "use_fused_head",
    "debias_attention",
    "center_attention",
    "activation_checkpoint_impl",
    "simple_ops",
    "strategy",
    "randomize_positions_from",
    "lockstep_n",
    "lockstep_k",
    "curriculum_target",
    "model_class_name",
    "architecture_class_name",
    "_is_recurrent_block_config",
)

# Fields with the one value looplab computes: (field, accepted value).
REQUIRED: tuple[tuple[str, Any], ...] = (
    ("injection_type", "diagonal"),
    ("state_init", "like-init"),
    ("prelude_norm", True),
    ("qk_norm", True),
    ("norm_class_name", "RMSNorm"),
    ("norm_eps", 1e-5),
    ("block_class_name", "TransformerPreNormBlock"),
    ("mlp_class_name", "BaseMLP"),
    ("nonlin_name", "ReLU2"),
    ("bias", False),
    ("qk_bias", False),
    ("clip_qkv", None),
    ("logit_softcap", None),
    ("use_abacus", False),
    ("mup_model_scaling_factor", 1),
)
# Init strategies whose embedding std (the h0 std of `state_init="like-init"`) is sqrt(2 / (5 d)), with
# no embedding or logit scale: the forward of such a model is ours with the default h0_std.
INIT_STRATEGIES = ("scaled-zero", "scaled-geiping", "scaled-stuck")
SAMPLERS = {  # (sampling_scheme, recurrent_iteration_method) -> our loop_sampler
    ("poisson-truncated-full", "per-sequence"): "poisson_seq",
    ("poisson-truncated-full", "per-batch"): "poisson_batch",
    ("fixed", "per-sequence"): "fixed",
    ("fixed", "per-batch"): "fixed",
}
# Their parameter names (after the part and layer index) -> ours.
_NAMES = {
    "norm_1.weight": "norm1.weight",
    "attn.c_q.weight": "attn.q.weight",
    "attn.c_k.weight": "attn.k.weight",
    "attn.c_v.weight": "attn.v.weight",
    "attn.c_proj.weight": "attn.o.weight",
    "attn.ve_gate.weight": "attn.ve_gate.weight",
    "norm_2.weight": "norm2.weight",
    "mlp.fc.weight": "mlp.fc.weight",
    "mlp.proj.weight": "mlp.proj.weight",
}
_PARTS = (("prelude", "prelude"), ("core_block", "recurrent"), ("coda", "coda"))
_TOP = {
    "transformer.wte.weight": "wte.weight",
    "transformer.adapter.A_log": "A_log",
    "transformer.adapter.dt_bias": "dt_bias",
    "transformer.adapter.B": "B",
    "transformer.C.weight": "C",
    "transformer.ln_f.weight": "norm_f.weight",
    "transformer.ln_prelude.weight": "prelude_norm.weight",
}
ROPE_BUFFER = "freqs_cis"  # (1, T, 1, D/2, 2) cos and sin: checked against ours, not loaded


def pairs_to_halves(weight: Tensor, heads: int) -> Tensor:
    """Rows of a q or k weight (heads * D, d_in) in the reference's RoPE layout reordered to ours: per
    head, our channel c is its channel 2c and our channel c + D/2 its channel 2c + 1."""
    D = weight.shape[0] // heads
    perm = torch.cat([torch.arange(0, D, 2), torch.arange(1, D, 2)])
    return weight[torch.cat([h * D + perm for h in range(heads)])]


def halves_to_pairs(weight: Tensor, heads: int) -> Tensor:
    """The inverse of `pairs_to_halves`: our q/k rows in the reference's layout."""
    D = weight.shape[0] // heads
    perm = torch.cat([torch.arange(0, D, 2), torch.arange(1, D, 2)])
    inverse = torch.argsort(perm)
    return weight[torch.cat([h * D + inverse for h in range(heads)])]


def _field(config: dict[str, Any], name: str) -> Any:
    return config.get(name, DEFAULTS[name])


def _has_ve(i: int, n: int) -> bool:
    """The reference's rule: layer i of n gets a value embedding (alternating, the last one included)."""
    return i % 2 == (n - 1) % 2


def value_embed_layers(config: dict[str, Any]) -> tuple[int, ...]:
    """Distinct layers whose value embedding the public model uses: a table and a gate (module docstring)."""
    p, r, c = (
        int(_field(config, k))
        for k in ("n_layers_in_prelude", "n_layers_in_recurrent_block", "n_layers_in_coda")
    )
    n_layer = r * int(_field(config, "mean_backprop_depth"))  # ParcaeConfig.__post_init__
    coda_id = p + r * int(_field(config, "mean_recurrence"))  # the first coda layer's layer id
    layer_ids = [*range(p + r), *range(coda_id, coda_id + c)]
    return tuple(i for i, lid in enumerate(layer_ids) if _has_ve(i, p + r + c) and _has_ve(lid, n_layer))


def padded_vocab(config: dict[str, Any]) -> int:
    """The embedding table's rows: `padded_vocab_size`, else vocab_size rounded up to padding_multiple."""
    padded = _field(config, "padded_vocab_size")
    if padded is not None:
        return int(padded)
    multiple = int(_field(config, "padding_multiple"))
    return -(-int(_field(config, "vocab_size")) // multiple) * multiple


def config_from_parcae(config: dict[str, Any]) -> ModelConfig:
    """A Parcae config.json (a dict, `_class_name` included or not) -> the `ModelConfig` of the same
    function; ConfigError naming the field (as `config.<field>`) when looplab cannot compute it."""
    config = dict(config)
    cls = config.pop("_class_name", CLASS_NAME)
    if cls != CLASS_NAME:
        raise ConfigError(f"config._class_name: {cls!r} is not a Parcae model; accepted: {CLASS_NAME}")
    known = set(DEFAULTS) | set(IGNORED)
    unknown = sorted(set(config) - known)
    if unknown:
        raise ConfigError(
            f"config.{unknown[0]}: unknown field (not one of parcae_lm's ParcaeConfig); accepted: "
            f"{', '.join(sorted(known))}"
        )
    for name, accepted in REQUIRED:
        value = _field(config, name)
        same = math.isclose(value, accepted) if isinstance(accepted, float) else value == accepted
        if not same:
            raise ConfigError(f"config.{name}: {value!r} is not computed by looplab; accepted: {accepted!r}")
    strategy = _field(config, "init_strategy")
    if strategy not in INIT_STRATEGIES:
        raise ConfigError(
            f"config.init_strategy: {strategy!r} scales the embedding, the logits or h0 otherwise than "
            f"looplab; accepted: {', '.join(INIT_STRATEGIES)}"
        )
    rope = {**DEFAULTS["rope_settings"], **(_field(config, "rope_settings") or {})}
    if not rope["use_rope"] or rope["rope_condense_ratio"] != 1:
        raise ConfigError(
            f"config.rope_settings: {rope!r}; accepted: use_rope true with rope_condense_ratio 1"
        )
    d, heads = int(_field(config, "n_embd")), int(_field(config, "num_attention_heads"))
    hidden = _field(config, "intermediate_size") or 4 * d
    for name, accepted in (
        ("num_key_value_heads", heads),
        ("recurrent_num_attention_heads", heads),
        ("recurrent_embedding_dimension", d),
        ("recurrent_intermediation_embedding_dimension", hidden),
    ):
        value = _field(config, name)
        if value is not None and value != accepted:
            raise ConfigError(
                f"config.{name}: {value!r}; looplab's recurrent block and attention have the model's own "
                f"width and heads; accepted: {accepted!r}"
            )
    if hidden % d:
        raise ConfigError(f"config.intermediate_size: {hidden} is not a multiple of n_embd {d}")
    if d % heads:
        raise ConfigError(f"config.n_embd: {d} is not a multiple of num_attention_heads {heads}")
    scheme = (_field(config, "sampling_scheme"), _field(config, "recurrent_iteration_method"))
    if scheme not in SAMPLERS:
        raise ConfigError(
            f"config.sampling_scheme: {scheme[0]!r} with recurrent_iteration_method {scheme[1]!r}; "
            f"accepted: {', '.join(f'{s} with {m}' for s, m in SAMPLERS)}"
        )
    n_layers = sum(
        int(_field(config, k))
        for k in ("n_layers_in_prelude", "n_layers_in_recurrent_block", "n_layers_in_coda")
    )
    ve = value_embed_layers(config)
    alternate = tuple(i for i in range(n_layers) if _has_ve(i, n_layers))
    return ModelConfig(
        vocab_size=padded_vocab(config),
        d_model=d,
        n_heads=heads,
        head_dim=d // heads,
        mlp_ratio=hidden // d,
        n_prelude=int(_field(config, "n_layers_in_prelude")),
        n_recurrent=int(_field(config, "n_layers_in_recurrent_block")),
        n_coda=int(_field(config, "n_layers_in_coda")),
        value_embeds="alternate" if ve == alternate else ve,
        rope_base=float(rope["rope_base"]),
        seq_len=int(_field(config, "block_size")),
        tie_embeddings=bool(_field(config, "tie_embeddings")),
        injection="diagonal",
        loop_sampler=SAMPLERS[scheme],
        loops=int(_field(config, "mean_recurrence")),
        grad_rounds=int(_field(config, "mean_backprop_depth")),
    )


def _their_layer_names(cfg: ModelConfig) -> list[tuple[str, str, int]]:
    """(their prefix, our prefix, distinct layer index) for every layer, in order."""
    out, i = [], 0
    counts = {"prelude": cfg.n_prelude, "recurrent": cfg.n_recurrent, "coda": cfg.n_coda}
    for theirs, ours in _PARTS:
        for j in range(counts[ours]):
            out.append((f"transformer.{theirs}.{j}.", f"{ours}.{j}.", i))
            i += 1
    return out


def state_dict_from_parcae(
    state: dict[str, Tensor], cfg: ModelConfig, want: dict[str, Tensor]
) -> dict[str, Tensor]:
    """A Parcae state dict -> ours for the model `cfg` whose own state dict is `want` (names and shapes
    to fill). ConfigError naming the tensor: a missing one, an unexpected one, a shape mismatch (both
    shapes), an untied head where the config ties it, a RoPE table that is not base `cfg.rope_base`."""
    uses_ve = set(cfg.value_embed_layers())
    mapped: dict[str, Tensor] = {}
    where: dict[str, str] = {}  # our name -> theirs, for the messages

    def put(theirs: str, ours: str, value: Tensor) -> None:
        mapped[ours], where[ours] = value, theirs

    rest = dict(state)
    for theirs, ours in _TOP.items():
        if theirs in rest:
            put(theirs, ours, rest.pop(theirs))
    for their_prefix, our_prefix, i in _their_layer_names(cfg):
        for their_name, our_name in _NAMES.items():
            key = their_prefix + their_name
            if key not in rest:
                continue
            value = rest.pop(key)
            if our_name == "attn.ve_gate.weight" and i not in uses_ve:
                continue  # a gate without its table: unused by the public model
            if our_name in ("attn.q.weight", "attn.k.weight"):
                value = pairs_to_halves(value, cfg.n_heads)
            put(key, our_prefix + our_name, value)
        table = f"value_embeds.{i}.weight"
        if table in rest:
            value = rest.pop(table)
            if i in uses_ve:
                put(table, our_prefix + "attn.ve.weight", value)
    head = rest.pop("lm_head.weight", None)
    if head is not None:
        if cfg.tie_embeddings:
            wte = mapped.get("wte.weight")
            if wte is not None and not torch.equal(head, wte):
                raise ConfigError(
                    "weights: lm_head.weight differs from transformer.wte.weight, but config.tie_embeddings "
                    "is true (the public model ties them)"
                )
        else:
            put("lm_head.weight", "lm_head.weight", head)
    rope = rest.pop(ROPE_BUFFER, None)
    for value_embed in [k for k in rest if k.startswith("value_embeds.")]:
        rest.pop(value_embed)  # a table of a layer without a gate: unused by the public model
    if rest:
        raise ConfigError(
            f"weights: unexpected tensor(s) {', '.join(sorted(rest))} (no such parameter in "
            "a Parcae model of this config.json)"
        )
    check_tensors(mapped, want, name=lambda ours: where.get(ours) or _their_name(ours, cfg))
    if rope is not None:
        _check_rope(rope, cfg)
    return mapped


def _their_name(ours: str, cfg: ModelConfig) -> str:
    """The public state dict's name of our parameter `ours` (for a message about a missing tensor)."""
    for theirs, mine in _TOP.items():
        if mine == ours:
            return theirs
    for their_prefix, our_prefix, i in _their_layer_names(cfg):
        if ours == our_prefix + "attn.ve.weight":
            return f"value_embeds.{i}.weight"
        for their_name, our_name in _NAMES.items():
            if ours == our_prefix + our_name:
                return their_prefix + their_name
    return ours


def _check_rope(table: Tensor, cfg: ModelConfig) -> None:
    """The public model's RoPE buffer (1, T, 1, D/2, 2) must be our tables at `cfg.rope_base`: it is
    loaded from the state dict, so it, not the config's rope_base, is what that model computes with."""
    from looplab.families.looped.layers import rope_tables

    if table.dim() != 5 or table.shape[-2] != cfg.head_dim // 2:
        raise ConfigError(
            f"weights: {ROPE_BUFFER} has shape {tuple(table.shape)}; expected (1, T, 1, {cfg.head_dim // 2}, 2)"
        )
    cos, sin = rope_tables(table.shape[1], cfg.head_dim, cfg.rope_base)
    theirs = table.float()[0, :, 0]  # (T, D/2, 2)
    if not (
        torch.allclose(theirs[..., 0], cos, atol=1e-5) and torch.allclose(theirs[..., 1], sin, atol=1e-5)
    ):
        raise ConfigError(
            f"weights: {ROPE_BUFFER} is not RoPE with base {cfg.rope_base:g} (config.rope_settings.rope_base)"
        )


def config_from_published(raw: dict[str, Any]) -> ModelConfig:
    """The layout's config reader (workers/layouts.py): `config_from_parcae`."""
    return config_from_parcae(raw)


def state_from_published(
    state: dict[str, Tensor], want: dict[str, Tensor], cfg: ModelConfig
) -> dict[str, Tensor]:
    """The layout's weights mapper (workers/layouts.py): `state_dict_from_parcae`."""
    return state_dict_from_parcae(state, cfg, want)
