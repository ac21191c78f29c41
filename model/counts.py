"""Analytic parameter and KV-cache counts, computed from the config alone (no model is built).

Both are tested against what the model and the cache really hold. "Embedding" parameters are the
vocabulary-sized tables: the token embedding (tied with the head), the value-embedding tables and an
untied head if any; everything else is "non_embedding".
"""

from __future__ import annotations

import torch

from model.config import ModelConfig
from model.kv_cache import cache_layout
from model.layers import VE_GATE_CHANNELS

_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}


def param_count(cfg: ModelConfig) -> dict[str, int]:
    """{"total", "non_embedding"} parameters of `LoopedLM(cfg)`, from the config alone."""
    d, V = cfg.d_model, cfg.vocab_size
    hd = cfg.n_heads * cfg.head_dim
    per_layer = 3 * d * hd + hd * d + 2 * d * cfg.mlp_hidden + 2 * d  # q,k,v,o + fc,proj + 2 norms
    n_ve = len(cfg.value_embed_layers())
    non_emb = cfg.n_layers * per_layer + n_ve * min(VE_GATE_CHANNELS, d) * cfg.n_heads + d  # + final norm
    if cfg.injection == "diagonal":
        non_emb += 3 * d + 2 * d * d  # prelude-output norm, A_log, dt_bias, B, C
    emb = V * d * (1 + n_ve + (0 if cfg.tie_embeddings else 1))
    return {"total": emb + non_emb, "non_embedding": non_emb}


def dtype_of(dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in _DTYPES:
        raise ValueError(f"dtype: unknown {dtype!r}; accepted: {', '.join(_DTYPES)}")
    return _DTYPES[dtype]


def kv_cache_bytes(
    cfg: ModelConfig, context_len: int, batch: int, dtype=torch.bfloat16, loops: int | None = None
) -> int:
    """Bytes of K and V the decode cache holds for `context_len` tokens at `loops` rounds (default
    cfg.loops): full-context applications keep context_len slots, windowed rounds min(window, ctx)."""
    item = torch.empty((), dtype=dtype_of(dtype)).element_size()
    layout = cache_layout(cfg, context_len, cfg.loops if loops is None else loops)
    return sum(2 * batch * shape.heads * shape.slots * cfg.head_dim * item for shape in layout.values())
