"""The static, preallocated KV cache for incremental decoding (gpt-fast style, Mistral rolling window).

Every layer *application* that computes keys is named by a `LayerKey`: each prelude layer, each
(round, recurrent layer) pair, each coda layer. One *slot set* (K and V buffers, (B, H, S, D)) per key:
- full-context application: S = max_len, position p in slot p.
- windowed round: S = min(window, max_len) slots, a ring buffer: position p in slot p % S. RoPE is
  applied before caching, so attention may read the slots in any order (softmax ignores order).
- MLP-only rounds and reuse-KV rounds keep nothing (reuse reads round 1's slot set of that layer).
Each slot set also keeps `slot_pos` (S,) int64: the position stored in each slot (-1 = empty); the
attention mask is built from it and the current position, so there is never an `is_causal`
misalignment and every step has the same shapes.

`cache_layout` is the one description of what the cache holds: the cache allocates from it and
`model.counts.kv_cache_bytes` counts from it.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from model.config import ModelConfig

PRELUDE, RECURRENT, CODA = "prelude", "recurrent", "coda"


class LayerKey(NamedTuple):
    """One application of one distinct layer: `part` is prelude/recurrent/coda, `round` the 0-based
    round for the recurrent part (None for prelude and coda), `layer` the index within the part."""

    part: str
    round: int | None
    layer: int

    @classmethod
    def prelude(cls, layer: int) -> LayerKey:
        return cls(PRELUDE, None, layer)

    @classmethod
    def recurrent(cls, round_index: int, layer: int) -> LayerKey:
        return cls(RECURRENT, round_index, layer)

    @classmethod
    def coda(cls, layer: int) -> LayerKey:
        return cls(CODA, None, layer)


class SlotSet:
    """K, V buffers (B, H, S, D) for one layer application, plus the position held by each slot."""

    def __init__(self, batch: int, heads: int, slots: int, head_dim: int, window: int | None, dtype, device):
        self.k = torch.zeros(batch, heads, slots, head_dim, dtype=dtype, device=device)
        self.v = torch.zeros(batch, heads, slots, head_dim, dtype=dtype, device=device)
        self.slot_pos = torch.full((slots,), -1, dtype=torch.long, device=device)
        self.slots, self.window = slots, window

    def write(self, k: Tensor, v: Tensor, pos: Tensor) -> None:
        """k, v (B, H, 1, D) for position `pos` (0-dim device tensor) -> slot pos % S, in place, cast to
        the cache's dtype (decoding under autocast, or into a cache of another dtype than the model)."""
        slot = torch.remainder(pos, self.slots).view(1)
        self.k.index_copy_(2, slot, k.to(self.k.dtype))
        self.v.index_copy_(2, slot, v.to(self.v.dtype))
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


class SlotShape(NamedTuple):
    """What one slot set holds: heads, slots (positions kept) and the attention window (None = full)."""

    heads: int
    slots: int
    window: int | None


def cache_layout(cfg: ModelConfig, max_len: int, loops: int) -> dict[LayerKey, SlotShape]:
    """Every layer application that keeps keys/values at `loops` rounds, with its slot shape."""
    out: dict[LayerKey, SlotShape] = {}
    for i in range(cfg.n_prelude):
        out[LayerKey.prelude(i)] = SlotShape(cfg.n_heads, max_len, None)
    for r in range(loops):
        rc = cfg.round(r)
        if rc.attention and not rc.reuse_kv:
            slots = max_len if rc.window is None else min(rc.window, max_len)
            for j in range(cfg.n_recurrent):
                out[LayerKey.recurrent(r, j)] = SlotShape(cfg.round_heads(r), slots, rc.window)
    for i in range(cfg.n_coda):
        out[LayerKey.coda(i)] = SlotShape(cfg.n_heads, max_len, None)
    return out


class KVCache:
    """All slot sets of one decoding session, the current position (device scalar), loops and seed.
    Decoding runs the fixed loop count `loops` with the int h0 seed `h0_seed`."""

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
            key: SlotSet(batch, shape.heads, shape.slots, cfg.head_dim, shape.window, dtype, device)
            for key, shape in cache_layout(cfg, max_len, self.loops).items()
        }
        self.pos = torch.zeros((), dtype=torch.long, device=device)  # next position to write

    def nbytes(self) -> int:
        """Bytes held by K and V buffers (the slot_pos bookkeeping, 8 bytes per slot, is not counted)."""
        return sum(s.k.nbytes + s.v.nbytes for s in self.sets.values())

    def write_prefill(self, key: LayerKey, k: Tensor, v: Tensor) -> None:
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

    def save_next_slots(self, steps: int) -> CacheSnapshot:
        """Copies of the slots the next `steps` decode steps will write (slot = position % S in every
        slot set) and of the position: enough to undo those steps. Computed on the device, no sync."""
        offsets = torch.arange(steps, device=self.pos.device)
        saved = []
        for s in self.sets.values():
            slot = torch.remainder(self.pos + offsets, s.slots)  # (steps,)
            saved.append(
                (
                    s,
                    slot,
                    s.k.index_select(2, slot),
                    s.v.index_select(2, slot),
                    s.slot_pos.index_select(0, slot),
                )
            )
        return CacheSnapshot(self.pos.clone(), saved)

    def restore(self, snapshot: CacheSnapshot) -> None:
        """Write a `save_next_slots` copy back in place (the buffers keep their addresses, so a captured
        CUDA graph that reads them stays valid)."""
        for s, slot, k, v, slot_pos in snapshot.slots:
            s.k.index_copy_(2, slot, k)
            s.v.index_copy_(2, slot, v)
            s.slot_pos.index_copy_(0, slot, slot_pos)
        self.pos.copy_(snapshot.pos)


class CacheSnapshot(NamedTuple):
    """The position and, per slot set, (set, slots, K, V, slot_pos) of the saved slots."""

    pos: Tensor
    slots: list[tuple[SlotSet, Tensor, Tensor, Tensor, Tensor]]
