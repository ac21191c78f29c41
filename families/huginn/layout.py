"""The published Huginn layout (the Hugging Face directory the public code's `save_pretrained` writes:
seal-rg/recurrent-pretraining `recpre/raven_modeling_minimal.py`, hub model tomg-group-umd/huginn-0125)
as this family's config and weights. Pure mapping, no I/O (reading the directory is `workers.hub`'s).

`config.json` says `"model_type": "huginn_raven"` (`MODEL_TYPE`); its fields map one by one
(`config_from_published`); a field whose value changes the function in a way this family does not
compute (another injection, block, MLP, norm, nonlinearity, biases, grouped-query attention, noise
at test time) is refused naming the field and the accepted value. Fields the file leaves out take the
public `RavenConfig` defaults (`DEFAULTS`); every other field (how it trains, Hugging Face's own) is
not read.

Weights: `transformer.prelude.0.attn.Wqkv.weight` is our `prelude.0.attn.qkv.weight` (the same fused
q, k, v rows), `norm_1..4` are our `attn_in, attn_out, mlp_in, mlp_out`, `core_block` is our `core`,
`wte` / `ln_f` / `lm_head` our `embed` / `norm` / `head`, and the q/k biases lose a unit axis. The RoPE
table `freqs_cis` is a buffer derived from the config and is not read. A tied head is stored once.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from looplab.model.family_parts import checked_state, published_values

MODEL_TYPE = "huginn_raven"
FAMILY = "families.huginn:factory"

# The public RavenConfig's defaults of every field read here.
DEFAULTS: dict[str, Any] = {
    "n_embd": 5280,
    "n_heads": 55,
    "block_size": 4096,
    "vocab_size": 65536,
    "tie_embeddings": True,
    "intermediate_size": 17920,
    "norm_eps": 1e-6,
    "n_layers_in_recurrent_block": 4,
    "mean_recurrence": 32,
    "mean_backprop_depth": 8,
    "n_layers_in_prelude": 2,
    "n_layers_in_coda": 2,
    "qk_bias": True,
    "rope_base": 50_000,
}
# public field -> our family_config key
FIELDS = {
    "n_embd": "d_model",
    "n_heads": "n_heads",
    "intermediate_size": "mlp",
    "n_layers_in_prelude": "n_prelude",
    "n_layers_in_recurrent_block": "n_core",
    "n_layers_in_coda": "n_coda",
    "mean_recurrence": "mean_recurrence",
    "mean_backprop_depth": "backprop_depth",
    "rope_base": "rope_base",
    "norm_eps": "norm_eps",
    "qk_bias": "qk_bias",
    "tie_embeddings": "tie_embeddings",
}
# Fields with the one value this family computes: (field, accepted value); absent = accepted.
REQUIRED: tuple[tuple[str, Any], ...] = (
    ("injection_type", "linear"),
    ("block_class_name", "SandwichBlock"),
    ("mlp_class_name", "GatedMLP"),
    ("nonlin_name", "SiLU"),
    ("norm_class_name", "RMSNorm_llama"),
    ("bias", False),
    ("state_init", "like-init"),
    ("test_time_noise", 0),
)
_BLOCK = {"norm_1": "attn_in", "norm_2": "attn_out", "norm_3": "mlp_in", "norm_4": "mlp_out"}
_PARTS = {"prelude": "prelude", "core_block": "core", "coda": "coda"}
IGNORED_TENSORS = ("freqs_cis",)


def config_from_published(raw: dict[str, Any]) -> tuple[dict[str, Any], dict[str, int]]:
    """(this family's config, the run's settings) from a published config.json: the run's `vocab_size`
    (the padded table), `seq_len` (the block size) and `loops` (the mean recurrence). ValueError naming
    the field this family cannot compute."""
    value = published_values(raw, MODEL_TYPE, REQUIRED, DEFAULTS)
    heads = raw.get("num_key_value_heads", value["n_heads"])
    if heads != value["n_heads"]:
        raise ValueError(f"config.num_key_value_heads: {heads} (grouped-query attention); accepted: n_heads")
    config = {FIELDS[k]: value[k] for k in FIELDS}
    config["rope_base"] = float(config["rope_base"])
    vocab = raw.get("padded_vocab_size") or value["vocab_size"]
    run = {
        "vocab_size": int(vocab),
        "seq_len": int(value["block_size"]),
        "loops": int(value["mean_recurrence"]),
    }
    return config, run


def _our_name(name: str) -> str | None:
    """Our parameter name of a published tensor name (None: a tensor we do not read)."""
    if name in IGNORED_TENSORS:
        return None
    top = {"transformer.wte.weight": "embed.weight", "transformer.adapter.weight": "adapter.weight"}
    top |= {"transformer.ln_f.weight": "norm.weight", "lm_head.weight": "head.weight"}
    if name in top:
        return top[name]
    parts = name.split(".")
    if len(parts) < 5 or parts[0] != "transformer" or parts[1] not in _PARTS:
        raise ValueError(f"weights: unexpected tensor {name!r} in the published layout")
    rest = ".".join(_BLOCK.get(p, p) for p in parts[3:]).replace("attn.Wqkv", "attn.qkv")
    return f"{_PARTS[parts[1]]}.{parts[2]}.{rest}"


def state_from_published(
    state: dict[str, Tensor], want: dict[str, Tensor], config: dict[str, Any]
) -> dict[str, Tensor]:
    """Our state dict from a published one, checked tensor by tensor against `want` (our module's, built
    from `config`): ValueError naming the unexpected or missing tensor, or the one whose shape differs."""
    tied = config.get("tie_embeddings", True)

    def named():
        for name, tensor in state.items():
            ours = _our_name(name)
            if ours is None or (ours == "head.weight" and tied):
                continue  # a derived buffer; a tied head (the embedding) stored twice
            if ours.endswith("qk_bias") and ours in want and tensor.numel() == want[ours].numel():
                tensor = tensor.reshape(want[ours].shape)  # the public code's biases carry a unit axis
            yield name, ours, tensor

    return checked_state(named(), want, ("head.weight", "embed.weight") if tied else None)
