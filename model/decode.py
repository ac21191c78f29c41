"""Incremental decoding with a static, preallocated KV cache (gpt-fast style, Mistral rolling window).

One *slot set* (K and V buffers, (B, H, S, D)) per layer application that computes keys:
each prelude layer ("p", i), each (round r, recurrent layer j) ("r", r, j), each coda layer ("c", i).
- full-context application: S = max_len, position p in slot p.
- windowed round: S = min(window, max_len) slots, a ring buffer: position p in slot p % S. RoPE is
  applied before caching, so attention may read the slots in any order (softmax ignores order).
- MLP-only rounds and reuse-KV rounds keep nothing (reuse reads round 1's slot set of that layer).
Each slot set also keeps `slot_pos` (S,) int64: the position stored in each slot (-1 = empty); the
attention mask is built from it and the current position, so there is never an `is_causal`
misalignment and every step has the same shapes. `kv_cache_bytes` counts K and V only.

`decode_step` has static shapes and no host sync (the position lives on the device and is advanced
in place), so on CUDA the whole step can be captured in a CUDA graph (`capture_decode_graph`).
Decoding runs a fixed loop count (the cache's `loops`) with an int h0 seed: h0 at position p is the
same deterministic draw the full forward uses at p (see `model.looped.h0_from_seed`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from model.attention import cached_attention
from model.config import ModelConfig


class SlotSet:
    """K, V buffers (B, H, S, D) for one layer application, plus the position held by each slot."""

    def __init__(self, batch: int, heads: int, slots: int, head_dim: int, window: int | None, dtype, device):
        self.k = torch.zeros(batch, heads, slots, head_dim, dtype=dtype, device=device)
        self.v = torch.zeros(batch, heads, slots, head_dim, dtype=dtype, device=device)
        self.slot_pos = torch.full((slots,), -1, dtype=torch.long, device=device)
        self.slots, self.window = slots, window

    def write(self, k: Tensor, v: Tensor, pos: Tensor) -> None:
        """k, v (B, H, 1, D) for position `pos` (0-dim device tensor) -> slot pos % S, in place."""
        slot = torch.remainder(pos, self.slots).view(1)
        self.k.index_copy_(2, slot, k)
        self.v.index_copy_(2, slot, v)
        self.slot_pos.index_copy_(0, slot, pos.view(1))

    def write_many(self, k: Tensor, v: Tensor) -> None:
        """Prefill: k, v (B, H, T, D) for positions 0..T-1; keeps the last S of them."""
        T = k.shape[2]
        keep = min(T, self.slots)
        pos = torch.arange(T - keep, T, device=k.device)
        slot = torch.remainder(pos, self.slots)
        self.k.index_copy_(2, slot, k[:, :, T - keep :].to(self.k.dtype))
        self.v.index_copy_(2, slot, v[:, :, T - keep :].to(self.v.dtype))
        self.slot_pos.index_copy_(0, slot, pos)

    def visible(self, pos: Tensor, window: int | None) -> Tensor:
        """(S,) bool: slots holding a position the query at `pos` may attend to."""
        m = (self.slot_pos >= 0) & (self.slot_pos <= pos)
        if window is not None:
            m = m & (self.slot_pos > pos - window)
        return m

    def fake_fill(self, n: int) -> None:
        """Mark positions 0..n-1 as written (benchmarks: latency does not depend on the contents)."""
        keep = min(n, self.slots)
        pos = torch.arange(n - keep, n, device=self.slot_pos.device)
        self.slot_pos.index_copy_(0, torch.remainder(pos, self.slots), pos)


def cache_layout(cfg: ModelConfig, max_len: int, loops: int) -> dict[tuple, tuple[int, int, int | None]]:
    """key -> (heads, slots, window) for every layer application that keeps keys/values.
    The single source of truth for both the real cache and `model.counts.kv_cache_bytes`."""
    out: dict[tuple, tuple[int, int, int | None]] = {}
    for i in range(cfg.n_prelude):
        out[("p", i)] = (cfg.n_heads, max_len, None)
    for r in range(loops):
        rc = cfg.round(r)
        if rc.attention and not rc.reuse_kv:
            slots = max_len if rc.window is None else min(rc.window, max_len)
            for j in range(cfg.n_recurrent):
                out[("r", r, j)] = (cfg.round_heads(r), slots, rc.window)
    for i in range(cfg.n_coda):
        out[("c", i)] = (cfg.n_heads, max_len, None)
    return out


class KVCache:
    """All slot sets of one decoding session, the current position (device scalar), loops and seed."""

    def __init__(
        self,
        cfg: ModelConfig,
        batch: int,
        max_len: int,
        dtype,
        device,
        loops: int | None = None,
        h0_seed: int = 0,
    ) -> None:
        self.loops = cfg.loops if loops is None else int(loops)
        self.batch, self.max_len, self.h0_seed = batch, max_len, h0_seed
        self.sets = {
            key: SlotSet(batch, heads, slots, cfg.head_dim, window, dtype, device)
            for key, (heads, slots, window) in cache_layout(cfg, max_len, self.loops).items()
        }
        self.pos = torch.zeros((), dtype=torch.long, device=device)  # next position to write

    def nbytes(self) -> int:
        """Bytes held by K and V buffers (the slot_pos bookkeeping, 8 bytes per slot, is not counted)."""
        return sum(s.k.nbytes + s.v.nbytes for s in self.sets.values())

    def write_prefill(self, key: tuple, k: Tensor, v: Tensor) -> None:
        if key in self.sets:
            self.sets[key].write_many(k, v)

    def reset(self) -> None:
        self.pos.zero_()
        for s in self.sets.values():
            s.slot_pos.fill_(-1)

    def fake_fill(self, n: int) -> None:
        """Pretend n tokens were prefilled: for latency benchmarks at long contexts."""
        for s in self.sets.values():
            s.fake_fill(n)
        self.pos.fill_(n)


class StepContext:
    """Attention plumbing for one decode step: write the new K,V, attend over the slot set."""

    def __init__(self, cache: KVCache, cos: Tensor, sin: Tensor) -> None:
        self.cache, self.cos, self.sin, self.pos = cache, cos, sin, cache.pos

    def attend(self, q: Tensor, k: Tensor, v: Tensor, key: tuple, window: int | None) -> Tensor:
        s = self.cache.sets[key]
        s.write(k, v, self.pos)
        return cached_attention(q, s.k, s.v, s.visible(self.pos, window))

    def attend_reused(self, q: Tensor, key: tuple, window: int | None) -> Tensor:
        s = self.cache.sets[("r", 0, key[2])]
        H = q.shape[1]
        return cached_attention(q, s.k[:, :H], s.v[:, :H], s.visible(self.pos, window))


@torch.no_grad()
def decode_step(model, tokens: Tensor, cache: KVCache) -> Tensor:
    """tokens (B,) at position cache.pos -> logits (B, V) fp32; advances cache.pos in place."""
    pos = cache.pos.view(1)
    cos_all, sin_all = model._rope(cache.max_len)  # built by setup_cache: no allocation here
    cos, sin = cos_all.index_select(0, pos), sin_all.index_select(0, pos)  # (1, D/2)
    logits, _ = model._run(
        tokens.view(-1, 1), StepContext(cache, cos, sin), pos, cache.loops, cache.h0_seed, False
    )
    cache.pos.add_(1)
    return logits[:, 0]


@torch.no_grad()
def prefill(model, idx: Tensor, cache: KVCache) -> Tensor:
    """Full forward over a prompt (B, T) starting at position 0 that fills the cache -> logits (B, T, V)."""
    from model.looped import SeqContext

    T = idx.shape[1]
    if T > cache.max_len:
        raise ValueError(f"prompt of {T} tokens does not fit a cache of {cache.max_len}")
    cache.reset()
    cos, sin = model._rope(T)
    positions = torch.arange(T, device=idx.device)
    logits, _ = model._run(idx, SeqContext(cos, sin, cache), positions, cache.loops, cache.h0_seed, False)
    cache.pos.fill_(T)
    return logits


@torch.no_grad()
def generate(
    model,
    prompt: Tensor,
    max_new_tokens: int,
    temperature: float = 0.0,
    top_k: int | None = None,
    loops: int | None = None,
    h0_seed: int = 0,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Prompt (B, T0) -> (B, T0 + max_new_tokens). temperature 0 = greedy. Sampling stays on device."""
    B, T0 = prompt.shape
    cache = model.setup_cache(B, T0 + max_new_tokens, loops=loops, h0_seed=h0_seed)
    logits = prefill(model, prompt, cache)[:, -1]
    out = [prompt]
    for i in range(max_new_tokens):
        if temperature <= 0:
            nxt = logits.argmax(-1)
        else:
            lg = logits / temperature
            if top_k is not None:
                kth = torch.topk(lg, min(top_k, lg.shape[-1])).values[:, -1:]
                lg = lg.masked_fill(lg < kth, float("-inf"))
            nxt = torch.multinomial(lg.softmax(-1), 1, generator=generator).view(-1)
        out.append(nxt.view(B, 1))
        if i + 1 < max_new_tokens:
            logits = decode_step(model, nxt, cache)
    return torch.cat(out, dim=1)


def capture_decode_graph(model, cache: KVCache, tokens: Tensor, warmup: int = 3):
    """CUDA only: capture one decode step in a CUDA graph. Returns (graph, static_tokens, static_logits);
    to step: static_tokens.copy_(next); graph.replay(). Warm-up steps advance cache.pos: reset after."""
    static_tokens = tokens.clone()
    start = cache.pos.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(warmup):
            decode_step(model, static_tokens, cache)
    torch.cuda.current_stream().wait_stream(s)
    cache.pos.copy_(start)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_logits = decode_step(model, static_tokens, cache)
    cache.pos.copy_(start)
    return graph, static_tokens, static_logits
