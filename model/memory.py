"""Peak memory of training, evaluating and decoding a looped LM, in bytes, from the config alone.

Training (`training_memory`), for `sequences` sequences of T tokens in one forward:

    4 P (fp32 weights) + 4 P (gradients) + the optimizer's state + activations  B T (a A + 8 V)

- the optimizer's state: AdamW 8 P (two moments); the Muon optimizers 4 P_matrix (momentum of the
  non-embedding matrices) + 8 P_embedding (AdamW's two moments of the embedding tables);
- P = parameters (`model.counts.param_count`), B = `sequences`, V = vocabulary;
- A = layer applications with autograd: prelude + coda + recurrent layers x the mean rounds with
  gradient (`model.flops.training_flops`, for a forward of B sequences);
- a = bytes kept per token and application: (6 d + 4 h D + 2 m) elements of 4 bytes on the CPU, 2 under
  CUDA autocast, plus h T softmax probabilities (4 bytes) on the CPU, whose math attention keeps them
  (fused CUDA kernels keep none);
- 8 V: the fp32 logits and their gradient, per token;
- with a learned exit (`model.exit_gate`), rounds 1..R-1 are read out too: n_coda more applications
  and 8 V more per token for each (`gate_readouts`).

Evaluation forwards without autograd (`forward_memory`): 4 P + B T 4 (6 d + 2 m + h T + 2 V) (the
activations of one layer at a time, the attention probabilities, the fp32 logits and their log-softmax).
Decoding (`decode_memory`): the weights, the static KV cache (`model.counts.kv_cache_bytes`) and the fp32
logits of one step, at 2 bytes per element on CUDA (bf16) and 4 on the CPU; `decode_step_bytes`: what one
step reads (each layer application's weights, the head, the whole cache). The optimizer's state
(`optimizer_state_bytes`) is also what a checkpoint holds besides the weights.
These are the planner's estimates; on CUDA it prefers a measured peak of the same variant when it has one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from looplab.model.config import ModelConfig
from looplab.model.counts import kv_cache_bytes, layer_params, param_count
from looplab.model.flops import training_flops
from looplab.model.names import Optimizer

FLOAT_BYTES = 4
HEADROOM = 0.9  # of a device's memory a training step may plan on (the allocator and framework keep the rest)
DEVICE_TYPES = ("cpu", "cuda")


def _item(device_type: str) -> int:
    if device_type not in DEVICE_TYPES:
        raise ValueError(f"device_type: unknown {device_type!r}; accepted: {', '.join(DEVICE_TYPES)}")
    return 2 if device_type == "cuda" else FLOAT_BYTES


def training_memory(cfg: ModelConfig, sequences: int, device_type: str, optimizer: str) -> float:
    """Peak bytes of a training step whose forward holds `sequences` sequences of cfg.seq_len tokens, on
    "cpu" or "cuda", with `optimizer` (AdamW, or a Muon optimizer: anything else)."""
    item = _item(device_type)
    p = param_count(cfg)["total"]
    state = optimizer_state_bytes(cfg, optimizer)
    grad_rounds = training_flops(cfg, sequences).mean_grad_rounds
    readouts = 1 + gate_readouts(cfg)
    applications = cfg.n_prelude + cfg.n_coda * readouts + cfg.n_recurrent * grad_rounds
    per_application = (6 * cfg.d_model + 4 * cfg.n_heads * cfg.head_dim + 2 * cfg.mlp_hidden) * item
    if device_type != "cuda":
        per_application += FLOAT_BYTES * cfg.n_heads * cfg.seq_len  # softmax probabilities (math path)
    tokens = sequences * cfg.seq_len
    activations = tokens * (applications * per_application + readouts * 2 * FLOAT_BYTES * cfg.vocab_size)
    return float(2 * FLOAT_BYTES * p + state + activations)


def gate_readouts(cfg: ModelConfig) -> int:
    """Readouts a training forward keeps beyond its output: R - 1 with a learned exit, else 0."""
    return 0 if cfg.exit_gate == "none" else cfg.loops - 1


def largest_micro_batch(
    memory: Callable[[int], float],
    batch_size: int,
    memory_bytes: float,
    headroom: float = HEADROOM,
) -> int:
    """The most sequences per forward, at most `batch_size`, whose training memory (`memory(sequences)`:
    `training_memory` of looplab's model, `family_training_memory` of another family's) fits `headroom`
    of `memory_bytes` (the rest is the allocator's and the framework's); 1 when not even one fits (the
    run then fails as it would, with the device's own out-of-memory error). The memory grows with the
    sequences (activations; a batch's rounds with autograd do not shrink), so a bisection finds it."""
    budget = headroom * memory_bytes
    lo, hi = 1, batch_size
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if memory(mid) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo


def optimizer_state_bytes(cfg: ModelConfig, optimizer: str) -> float:
    """Bytes of the optimizer's state (fp32): AdamW's two moments of every parameter (8 P), the Muon
    optimizers' momentum of the non-embedding matrices and AdamW's moments of the embeddings (4 P_matrix
    + 8 P_embedding). What a checkpoint holds besides the weights (within ~3 % of a real one: scalars)."""
    params = param_count(cfg)
    p, p_matrix = params["total"], params["non_embedding"]
    return float(8 * p if optimizer == Optimizer.ADAMW else 4 * p_matrix + 8 * (p - p_matrix))


def family_optimizer_state_bytes(pricing: Any, optimizer: str) -> float:
    """`optimizer_state_bytes` of another family's model (`model.family_pricing.FamilyPricing`): AdamW's
    two moments of every parameter, or the Muon optimizers' momentum of its `matrix` group and AdamW's
    moments of the rest."""
    p, p_matrix = pricing.n_params, pricing.matrix_params
    return float(8 * p if optimizer == Optimizer.ADAMW else 4 * p_matrix + 8 * (p - p_matrix))


def family_training_memory(
    pricing: Any, loops: int, sequences: int, device_type: str, optimizer: str
) -> float:
    """`training_memory` of another family's model: fp32 weights and gradients, its optimizer's state,
    and what autograd keeps for `sequences` sequences (measured per sequence from the family's own
    forward, `FamilyPricing.activation_bytes`; in bf16 on CUDA, as the trainer's autocast keeps them)."""
    item = _item(device_type)
    activations = sequences * pricing.activation_bytes(loops) * item / FLOAT_BYTES
    return float(
        2 * FLOAT_BYTES * pricing.n_params + family_optimizer_state_bytes(pricing, optimizer) + activations
    )


def forward_memory(cfg: ModelConfig, sequences: int, seq_len: int | None = None) -> float:
    """Peak bytes of an evaluation forward (no autograd) of `sequences` sequences of `seq_len` tokens
    (default cfg.seq_len), on either device."""
    T = cfg.seq_len if seq_len is None else seq_len
    per_token = 6 * cfg.d_model + 2 * cfg.mlp_hidden + cfg.n_heads * T + 2 * cfg.vocab_size
    return float(FLOAT_BYTES * param_count(cfg)["total"] + sequences * T * FLOAT_BYTES * per_token)


def decode_memory(cfg: ModelConfig, context_len: int, batch: int, device_type: str) -> float:
    """Peak bytes of decoding `batch` sequences with a static cache of `context_len` tokens."""
    item = _item(device_type)
    weights = param_count(cfg)["total"] * item
    cache = kv_cache_bytes(cfg, context_len, batch, dtype="float32") * item / FLOAT_BYTES
    return float(weights + cache + batch * cfg.vocab_size * FLOAT_BYTES)


def decode_step_bytes(cfg: ModelConfig, context_len: int, batch: int, item: int) -> float:
    """Bytes one decode step reads and writes, at `item` bytes per weight and cache element: every layer
    application reads its layer's weights (a recurrent layer once per round), the head reads the
    embedding table (vocabulary x d), attention reads the whole static cache (every slot, every step:
    static shapes), and the fp32 logits of the batch are written. What bounds a decode step on a GPU
    when its FLOPs do not (the planner divides it by the memory bandwidth)."""
    layers = layer_params(cfg)
    first, shared = cfg.n_prelude, cfg.n_prelude + cfg.n_recurrent
    applied = sum(layers[:first]) + cfg.loops * sum(layers[first:shared]) + sum(layers[shared:])
    weights = (applied + cfg.vocab_size * cfg.d_model) * item
    cache = kv_cache_bytes(cfg, context_len, batch, dtype="float32") * item / FLOAT_BYTES
    return float(weights + cache + batch * cfg.vocab_size * FLOAT_BYTES)
