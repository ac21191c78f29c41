"""Attention contexts: where a layer's keys and values go and come from.

A block computes q, k, v and hands them to the context it was given, so the same model code serves
- `SeqContext`: a whole sequence (training, evaluation and prefill): plain causal attention; keeps
  round 1's K, V for reuse_kv rounds; with a cache (prefill) also writes every application's K, V.
- `StepContext`: one decode step against a `KVCache`: write the new K, V into its slot set and attend
  over the slots visible from the current position.
Both carry the RoPE tables (`cos`, `sin`, (T, head_dim/2) fp32) for the positions being computed.

With per-token exits (`model.exits`) the same contexts hold the keys and values of tokens that stopped
(`HeldKV`): `ExitSeqContext` / `ExitStepContext` hand every recurrent layer, for a token that no longer
runs, the keys/values of its last computed round instead of those computed from its held state, so
later tokens read what it last computed (no recompute); with a cache these are what the round's slots
receive. Prelude and coda keys are never substituted.
"""

from __future__ import annotations

import torch
from torch import Tensor

from looplab.model.attention import attention, cached_attention
from looplab.model.kv_cache import RECURRENT, KVCache, LayerKey


class SeqContext:
    """Attention over a whole sequence, optionally filling a cache (prefill)."""

    def __init__(self, cos: Tensor, sin: Tensor, cache: KVCache | None = None) -> None:
        self.cos, self.sin, self.cache = cos, sin, cache
        self.round1_kv: dict[int, tuple[Tensor, Tensor]] = {}  # recurrent layer -> round 1's (K, V)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, key: LayerKey, window: int | None) -> Tensor:
        """q, k, v (B, H, T, D) -> (B, H, T, D)."""
        if key.part == RECURRENT and key.round == 0:
            self.round1_kv[key.layer] = (k, v)
        if self.cache is not None:
            self.cache.write_prefill(key, k, v)
        return attention(q, k, v, window)

    def attend_reused(self, q: Tensor, key: LayerKey, window: int | None) -> Tensor:
        """q (B, H, T, D) against round 1's keys/values of the same layer (first H heads)."""
        k, v = self.round1_kv[key.layer]
        heads = q.shape[1]
        return attention(q, k[:, :heads], v[:, :heads], window)


class StepContext:
    """One decode step at `cache.pos`: write the new K, V, attend over the slot set."""

    def __init__(self, cache: KVCache, cos: Tensor, sin: Tensor) -> None:
        self.cache, self.cos, self.sin, self.pos = cache, cos, sin, cache.pos

    def attend(self, q: Tensor, k: Tensor, v: Tensor, key: LayerKey, window: int | None) -> Tensor:
        """q, k, v (B, H, 1, D) -> (B, H, 1, D)."""
        slots = self.cache.sets[key]
        slots.write(k, v, self.pos)
        # a cache of another dtype than the compute (e.g. a bf16 cache for an fp32 model) is read in q's
        keys, values = slots.k.to(q.dtype), slots.v.to(q.dtype)  # no copy when the dtypes agree
        return cached_attention(q, keys, values, slots.visible(self.pos, window))

    def attend_reused(self, q: Tensor, key: LayerKey, window: int | None) -> Tensor:
        slots = self.cache.sets[LayerKey.recurrent(0, key.layer)]
        heads = q.shape[1]
        keys, values = slots.k[:, :heads].to(q.dtype), slots.v[:, :heads].to(q.dtype)
        return cached_attention(q, keys, values, slots.visible(self.pos, window))


class HeldKV:
    """Per recurrent layer, the keys/values each token offers later rounds (its last computed round's),
    and `running`: (B, 1, T, 1) bool, the tokens that compute the current round (None: every token)."""

    def __init__(self) -> None:
        self.running: Tensor | None = None
        self.last: dict[int, tuple[Tensor, Tensor]] = {}  # layer -> (K, V) (B, H, T, D)

    def apply(self, k: Tensor, v: Tensor, key: LayerKey) -> tuple[Tensor, Tensor]:
        """k, v (B, h, T, D) computed by recurrent layer application `key` -> the keys/values attention
        uses: a stopped token's last ones. A narrow round (h heads) updates the first h heads only; a
        round with more heads than any before it (a narrow round 1) has no earlier keys for the extra
        heads, which then come from the stopped token's held state."""
        if key.part != RECURRENT:
            return k, v
        last = self.last.get(key.layer)
        if last is not None and self.running is not None:
            shared = min(k.shape[1], last[0].shape[1])
            k = torch.cat([torch.where(self.running, k[:, :shared], last[0][:, :shared]), k[:, shared:]], 1)
            v = torch.cat([torch.where(self.running, v[:, :shared], last[1][:, :shared]), v[:, shared:]], 1)
        heads = k.shape[1]
        keep_k, keep_v = k, v
        if last is not None and last[0].shape[1] > heads:  # keep the heads this round does not compute
            keep_k, keep_v = torch.cat([k, last[0][:, heads:]], 1), torch.cat([v, last[1][:, heads:]], 1)
        self.last[key.layer] = (keep_k, keep_v)
        return k, v


class ExitSeqContext(SeqContext):
    """`SeqContext` for a forward with per-token exits (see `HeldKV`)."""

    def __init__(self, cos: Tensor, sin: Tensor, cache: KVCache | None = None) -> None:
        super().__init__(cos, sin, cache)
        self.held = HeldKV()

    def attend(self, q: Tensor, k: Tensor, v: Tensor, key: LayerKey, window: int | None) -> Tensor:
        k, v = self.held.apply(k, v, key)
        return super().attend(q, k, v, key, window)


class ExitStepContext(StepContext):
    """`StepContext` for a decode step with per-token exits (see `HeldKV`)."""

    def __init__(self, cache: KVCache, cos: Tensor, sin: Tensor) -> None:
        super().__init__(cache, cos, sin)
        self.held = HeldKV()

    def attend(self, q: Tensor, k: Tensor, v: Tensor, key: LayerKey, window: int | None) -> Tensor:
        k, v = self.held.apply(k, v, key)
        return super().attend(q, k, v, key, window)
