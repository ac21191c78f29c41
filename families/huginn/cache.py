"""The Huginn-style family's KV cache across recurrences, with its lookup strategies.

Every attention layer the forward runs owns a *slot* of preallocated keys and values, (B, H, max_len,
head_dim) each, written at the cache's position (RoPE applied before caching). The prelude and coda
layers own one slot each; how the core block's layers map to slots across recurrences is the strategy:

- `full`: a slot per (recurrence, core layer): recurrence r of a token attends to the keys every
  earlier token made at recurrence r (the model as trained). A token decoded with fewer recurrences
  than the cache's (a per-token exit) leaves the slots of the recurrences it skipped filled with its
  latest entry for that core layer, so later tokens read its latest state there: the public code's
  per-token-exit lookup (`HuginnDynamicCache` strategy "latest-m4"; looplab's own model calls this
  `per_round`, `model.kv_cache`), done once at write time instead of at every read.
- `latest_per_slot`: one slot per core layer, overwritten by every recurrence: every recurrence of a
  later token reads each earlier token's latest entry for that layer (the KV sharing of Geiping et al.,
  section 6, at a budget of one entry per layer; "compress-s" in the public code). Its memory does not
  grow with the recurrence count; it changes the function even without exits (not looplab's `latest`,
  which keeps the function).

`cache_bytes` is what a cache of a strategy allocates; `HuginnCache.nbytes` reads the tensors' own
storage sizes, and the tests hold the two equal.
"""

from __future__ import annotations

from enum import StrEnum

import torch
from torch import Tensor


class KVStrategy(StrEnum):
    FULL = "full"
    LATEST_PER_SLOT = "latest_per_slot"


def core_slots(strategy: KVStrategy, loops: int, n_core: int) -> int:
    return loops * n_core if strategy == KVStrategy.FULL else n_core


def cache_bytes(cfg, batch: int, max_len: int, loops: int, strategy: str, item_bytes: int) -> int:
    """Bytes of keys and values a cache of `strategy` allocates (cfg: a HuginnConfig)."""
    slots = cfg.n_prelude + core_slots(KVStrategy(strategy), loops, cfg.n_core) + cfg.n_coda
    return 2 * slots * batch * max_len * cfg.d_model * item_bytes


class HuginnCache:
    """Keys and values of every slot, (slots, B, H, max_len, head_dim) in one tensor each, and the
    position the next token is written at. `loops`: the recurrences a decode step runs by default."""

    def __init__(self, cfg, batch: int, max_len: int, loops: int, strategy: str, dtype, device, key) -> None:
        self.strategy = KVStrategy(strategy)
        self.n_prelude, self.n_core, self.loops = cfg.n_prelude, cfg.n_core, loops
        self.batch, self.max_len, self.key = batch, max_len, key
        self.n_core_slots = core_slots(self.strategy, loops, cfg.n_core)
        slots = cfg.n_prelude + self.n_core_slots + cfg.n_coda
        shape = (slots, batch, cfg.n_heads, max_len, cfg.head_dim)  # (slots, B, H, T, D)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.pos = 0
        self.active: Tensor | None = None  # (B,) bool: the rows a core layer writes (None: all)

    def prelude_slot(self, i: int) -> int:
        return i

    def core_slot(self, r: int, j: int) -> int:
        if self.strategy == KVStrategy.FULL:
            return self.n_prelude + r * self.n_core + j
        return self.n_prelude + j

    def coda_slot(self, i: int) -> int:
        return self.n_prelude + self.n_core_slots + i

    def attend(self, slot: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Write k, v (B, H, S, D) at the cache's position (only the rows of `active` when it is set: the
        others have exited); the keys and values up to the end of them."""
        end = self.pos + k.shape[2]
        if end > self.max_len:
            raise ValueError(f"{end} tokens do not fit a cache of {self.max_len}")
        keys, values = self.k[slot, :, :, self.pos : end], self.v[slot, :, :, self.pos : end]  # views
        if self.active is None:
            keys.copy_(k)
            values.copy_(v)
        else:
            keys[self.active], values[self.active] = k[self.active], v[self.active]
        return self.k[slot, :, :, :end], self.v[slot, :, :, :end]

    def fill_skipped(self, counts: list[int], length: int) -> None:
        """Rows that ran fewer recurrences (`counts`, one per row) than the cache's `loops`: under `full`,
        the slots of the recurrences each skipped take its latest entry per core layer (the positions
        `pos` .. `pos + length`)."""
        if self.strategy != KVStrategy.FULL:
            return
        span = slice(self.pos, self.pos + length)
        for b, ran in enumerate(counts):
            for j in range(self.n_core):
                last = self.core_slot(ran - 1, j)
                for r in range(ran, self.loops):
                    self.k[self.core_slot(r, j), b, :, span] = self.k[last, b, :, span]
                    self.v[self.core_slot(r, j), b, :, span] = self.v[last, b, :, span]

    def reset(self) -> None:
        self.pos = 0

    def fake_fill(self, n: int) -> None:
        """Pretend `n` tokens are cached (a decode benchmark's context): the position only."""
        self.pos = n

    def nbytes(self) -> int:
        """The bytes the cache's tensors hold: their storages' sizes."""
        return self.k.untyped_storage().nbytes() + self.v.untyped_storage().nbytes()
