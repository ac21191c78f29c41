"""Analytic parameter, KV-cache and FLOP counts, computed from the config alone (no model is built).

All are tested against what the model and the cache really hold (FLOPs: against PyTorch's counter,
see `model.flops`). "Embedding" parameters are the vocabulary-sized tables: the token embedding (tied
with the head), the value-embedding tables and an untied head if any; everything else is
"non_embedding". `arch_summary` is the resolved architecture a results table stores per run;
`tokens_for_flops` turns a FLOP budget into whole training steps; `kv_strategy_bytes` gives the KV bytes a
KV strategy across rounds allocates and needs (`model.kv_cache`).
"""

from __future__ import annotations

import math

import torch

from looplab.model import fields
from looplab.model.config import VE_GATE_CHANNELS, ModelConfig
from looplab.model.exit_names import KVStrategy
from looplab.model.flops import training_flops
from looplab.model.kv_cache import RECURRENT, cache_layout, strategy_config

_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}


def layer_params(cfg: ModelConfig) -> list[int]:
    """Non-embedding parameters of each distinct layer 0..n_layers-1 (prelude, recurrent, coda): q, k,
    v, o + fc, proj + 2 norms, plus the value-embedding gate on a layer with a value embedding (whose
    table is an embedding parameter)."""
    d, hd = cfg.d_model, cfg.n_heads * cfg.head_dim
    per_layer = 3 * d * hd + hd * d + 2 * d * cfg.mlp_hidden + 2 * d  # q,k,v,o + fc,proj + 2 norms
    gate = min(VE_GATE_CHANNELS, d) * cfg.n_heads
    ve = set(cfg.value_embed_layers())
    return [per_layer + (gate if i in ve else 0) for i in range(cfg.n_layers)]


def param_count(cfg: ModelConfig) -> dict[str, int]:
    """{"total", "non_embedding"} parameters of `LoopedLM(cfg)`, from the config alone."""
    d, V = cfg.d_model, cfg.vocab_size
    n_ve = len(cfg.value_embed_layers())
    non_emb = (
        sum(layer_params(cfg)) + d + injection_params(cfg) + timestep_params(cfg) + gate_params(cfg)
    )  # d: final norm
    emb = V * d * (1 + n_ve + (0 if cfg.tie_embeddings else 1))
    return {"total": emb + non_emb, "non_embedding": non_emb}


def injection_params(cfg: ModelConfig) -> int:
    """Parameters of the injection and the history maps (both applied every round, counted in N_once
    like the diagonal injection's A_log and dt_bias): diagonal 3 d + 2 d^2 (prelude-output norm, A_log,
    dt_bias, B, C), scalar 1, channel d, dense d^2, none 0; plus history w d."""
    d = cfg.d_model
    inject = {"diagonal": 3 * d + 2 * d * d, "none": 0, "scalar": 1, "channel": d, "dense": d * d}
    return inject[cfg.injection] + cfg.history * d


def timestep_params(cfg: ModelConfig) -> int:
    """Per-round parameters of the recurrent block, for `timestep_round_count` rounds (counted in N_rec):
    loop_gate 1, branch_gate 2 n_recurrent, adaln 4 n_recurrent d per round."""
    n, d = cfg.n_recurrent, cfg.d_model
    per_round = {"none": 0, "loop_gate": 1, "branch_gate": 2 * n, "adaln": 4 * n * d}[cfg.timestep]
    return cfg.timestep_round_count * per_round


def gate_params(cfg: ModelConfig) -> int:
    """The learned exit's parameters (`model.exit_gate`): its weight d and one bias per round, R; 0 without."""
    return 0 if cfg.exit_gate == "none" else cfg.d_model + cfg.loops


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


def kv_strategy_bytes(
    cfg: ModelConfig,
    context_len: int,
    batch: int,
    strategy: str,
    max_rounds: int,
    m: int | None = None,
    dtype=torch.bfloat16,
    exit_share: dict[int, float] | None = None,
) -> tuple[int, int]:
    """(allocated, needed) bytes of K and V for `context_len` tokens decoded with up to `max_rounds`
    rounds under KV strategy `strategy` (`model.kv_cache`). Allocated: the static cache of the
    strategy's config (`strategy_config`), exactly what `KVCache` holds. Needed: what the strategy
    must keep when a fraction `exit_share[e]` of the tokens stops after round e (None: none stops
    early). For `latest` only a token's computed rounds are kept (round r's slots for the share of
    tokens with e >= r); the other strategies need every slot they allocate (per_round holds a copy of
    an exited token's last keys/values in each later round)."""
    item = torch.empty((), dtype=dtype_of(dtype)).element_size()
    layout = cache_layout(strategy_config(cfg, strategy, max_rounds, m), context_len, max_rounds)
    per_set = {
        key: 2 * batch * shape.heads * shape.slots * cfg.head_dim * item for key, shape in layout.items()
    }
    allocated = sum(per_set.values())
    if strategy != KVStrategy.LATEST or exit_share is None:
        return allocated, allocated
    reach = {r: sum(share for e, share in exit_share.items() if e > r) for r in range(max_rounds)}  # 0-based
    needed = sum(n if key.part != RECURRENT else reach[key.round] * n for key, n in per_set.items())
    return allocated, round(needed)


def once_and_recurrent_params(cfg: ModelConfig) -> dict[str, int]:
    """{"n_once", "n_rec"}: N_rec = the recurrent block's parameters (its layers, value-embedding gates
    included, and the per-round timestep parameters); N_once = the other non-embedding parameters
    (prelude, coda, the injection with its prelude-output norm, the history maps, the exit gate, the
    final norm) plus
    an untied head. So n_once + n_rec + the embedding tables = param_count's total."""
    d, layers = cfg.d_model, layer_params(cfg)
    first, after = cfg.n_prelude, cfg.n_prelude + cfg.n_recurrent
    n_rec = sum(layers[first:after]) + timestep_params(cfg)
    n_once = (
        sum(layers[:first]) + sum(layers[after:]) + d + injection_params(cfg) + gate_params(cfg)
    )  # + final norm
    if not cfg.tie_embeddings:
        n_once += cfg.vocab_size * d
    return {"n_once": n_once, "n_rec": n_rec}


def arch_summary(cfg: ModelConfig, batch_size: int) -> dict:
    """The resolved architecture of `cfg` trained at `batch_size` sequences of cfg.seq_len per step.

    `loops` is the trained loop count (the Poisson mean for the sampled recipes), `effective_depth`
    = n_prelude + n_recurrent * loops + n_coda; `flops_per_token` = training forward + backward FLOPs
    per token expected over the loop sampler, padded rounds included (`model.flops.training_flops`,
    dense attention convention); `padding_waste` = the fraction of recurrent-round FLOPs thrown away."""
    flops = training_flops(cfg, batch_size)
    params = param_count(cfg)
    return {
        "n_prelude": cfg.n_prelude,
        "n_recurrent": cfg.n_recurrent,
        "n_coda": cfg.n_coda,
        "loops": cfg.loops,
        "effective_depth": float(cfg.n_prelude + cfg.n_recurrent * cfg.loops + cfg.n_coda),
        "d_model": cfg.d_model,
        "injection": cfg.injection,
        "n_params": params["total"],
        "n_params_non_embedding": params["non_embedding"],
        **once_and_recurrent_params(cfg),
        "flops_per_token": float(flops.total),
        "padding_waste": float(flops.padding_waste),
    }


def tokens_for_flops(cfg: ModelConfig, flops: float, batch_size: int, seq_len: int) -> int:
    """Tokens of the whole training steps a budget of `flops` training FLOPs buys: steps =
    max(1, floor(flops / (flops_per_token * batch_size * seq_len))), returned as steps * batch * seq."""
    flops = fields.number("flops", flops, lo=0.0, lo_open=True)
    batch_size = fields.integer("batch_size", batch_size, lo=1)
    seq_len = fields.integer("seq_len", seq_len, lo=1)
    per_token = training_flops(cfg, batch_size, seq_len=seq_len).total
    steps = max(1, math.floor(flops / (per_token * batch_size * seq_len)))
    return steps * batch_size * seq_len
