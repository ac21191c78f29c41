"""The published Ouro layout (the Hugging Face directory the public code's `save_pretrained` writes:
`modeling_ouro.py` / `configuration_ouro.py` beside ByteDance/Ouro-1.4B and -2.6B) as this family's
config and weights. Pure mapping, no I/O (reading the directory is `workers.hub`'s).

`config.json` says `"model_type": "ouro"` (`MODEL_TYPE`); the fields this family computes map one by
one (`FIELDS`); a field whose value changes the function in a way this family does not compute
(grouped-query attention, another head width, another activation, a sliding window, RoPE scaling) is
refused naming the field and the accepted value. Fields the file leaves out take the public
`OuroConfig` defaults (`DEFAULTS`); every other field (how it samples, Hugging Face's own) is not read.
`early_exit_threshold` is how the public forward picks a step at inference; looplab's exits are the
adaptive job's rules, so it is not read either.

Weights: `model.` is dropped; `self_attn.{q,k,v,o}_proj` and `mlp.{gate,up,down}_proj` lose their
module name; `input_layernorm`, `input_layernorm_2`, `post_attention_layernorm`,
`post_attention_layernorm_2` are our `norms.0` .. `norms.3` (before and after attention, before and
after the MLP); `embed_tokens`, `norm`, `early_exit_gate` and `lm_head` keep their names. A tied head
is stored once. The run's `loops` is the published `total_ut_steps`.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from looplab.model.family_parts import checked_state, published_values

MODEL_TYPE = "ouro"
FAMILY = "families.ouro:factory"

# The public OuroConfig's defaults of every field read here.
DEFAULTS: dict[str, Any] = {
    "vocab_size": 151_936,
    "hidden_size": 4096,
    "intermediate_size": 22_016,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "max_position_embeddings": 32_768,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
    "rope_theta": 10_000.0,
    "total_ut_steps": 4,
}
# public field -> our family_config key
FIELDS = {
    "hidden_size": "d_model",
    "num_attention_heads": "n_heads",
    "intermediate_size": "mlp",
    "num_hidden_layers": "n_layers",
    "total_ut_steps": "max_loops",
    "rope_theta": "rope_base",
    "rms_norm_eps": "norm_eps",
    "tie_word_embeddings": "tie_embeddings",
}
# Fields with the one value this family computes: (field, accepted value); absent = accepted.
REQUIRED: tuple[tuple[str, Any], ...] = (
    ("hidden_act", "silu"),
    ("use_sliding_window", False),
    ("rope_scaling", None),
)
_NORMS = {
    "input_layernorm": "norms.0",
    "input_layernorm_2": "norms.1",
    "post_attention_layernorm": "norms.2",
    "post_attention_layernorm_2": "norms.3",
}
_PROJ = {"self_attn", "mlp"}


def config_from_published(raw: dict[str, Any]) -> tuple[dict[str, Any], dict[str, int]]:
    """(this family's config, the run's settings) from a published config.json: the run's `vocab_size`,
    `seq_len` (max_position_embeddings) and `loops` (total_ut_steps). ValueError naming the field this
    family cannot compute."""
    value = published_values(raw, MODEL_TYPE, REQUIRED, DEFAULTS)
    heads = value["num_attention_heads"]
    kv_heads = raw.get("num_key_value_heads") or heads
    if kv_heads != heads:
        raise ValueError(
            f"config.num_key_value_heads: {kv_heads} (grouped-query attention); accepted: {heads} "
            "(num_attention_heads)"
        )
    if raw.get("head_dim") not in (None, value["hidden_size"] // heads):
        raise ValueError(
            f"config.head_dim: {raw['head_dim']!r}; accepted: {value['hidden_size'] // heads} "
            "(hidden_size / num_attention_heads)"
        )
    config = {FIELDS[k]: value[k] for k in FIELDS}
    config["rope_base"] = float(config["rope_base"])
    config["norm_eps"] = float(config["norm_eps"])
    run = {
        "vocab_size": int(value["vocab_size"]),
        "seq_len": int(value["max_position_embeddings"]),
        "loops": int(value["total_ut_steps"]),
    }
    return config, run


def _our_name(name: str) -> str:
    """Our parameter name of a published tensor name; ValueError for a name outside the layout."""
    if name == "lm_head.weight":
        return name
    parts = name.split(".")
    if parts[0] != "model" or len(parts) < 3:
        raise ValueError(f"weights: unexpected tensor {name!r} in the published layout")
    if parts[1] != "layers":
        return ".".join(parts[1:])  # embed_tokens, norm, early_exit_gate
    if len(parts) == 5 and parts[3] in _NORMS:
        return f"layers.{parts[2]}.{_NORMS[parts[3]]}.{parts[4]}"
    if len(parts) == 6 and parts[3] in _PROJ:
        return f"layers.{parts[2]}.{parts[4]}.{parts[5]}"
    raise ValueError(f"weights: unexpected tensor {name!r} in the published layout")


def state_from_published(
    state: dict[str, Tensor], want: dict[str, Tensor], config: dict[str, Any]
) -> dict[str, Tensor]:
    """Our state dict from a published one, checked tensor by tensor against `want` (our module's, built
    from `config`): ValueError naming the unexpected or missing tensor, or the one whose shape differs."""
    tied = ("lm_head.weight", "embed_tokens.weight") if config.get("tie_embeddings", False) else None
    named = ((name, _our_name(name), tensor) for name, tensor in state.items())
    # a tied head is the embedding, which a checkpoint may store twice
    return checked_state(((n, o, t) for n, o, t in named if not (tied and o == tied[0])), want, tied)
