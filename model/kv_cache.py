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

KV strategies across rounds (`model.exit_names.KVStrategy`; for decoding and for evaluation with per-token exits,
`model.exits`), for a forward of at most R = `max_rounds` rounds:
- `per_round`: every round keeps its own keys/values (the model as trained). A token that exited after
  round e offers every later round the keys/values of its last computed round (they are written into
  those rounds' slots: no recompute).
- `latest`: the same function; an exited token's round-e keys/values serve every later round where they
  are, without a copy per round. A static cache allocates what `per_round` does; what the strategy
  *needs* is only the computed entries (`model.counts.kv_strategy_bytes`).
- `first`: round 1's keys/values serve every round (rounds >= 2 compute queries only), as the
  `reuse_kv` ablation does in training: one round's cache. Changes the function even without exits.
- `last_m`: round 1 and the last m rounds (R-m+1..R) keep their own cache; every older round (2..R-m)
  reads round 1's, as `first` does. An older round cannot read a *later* kept round's keys: in a
  causal forward over the whole sequence those do not exist yet when it runs, so decoding and the full
  forward could not agree. 1 + m caches; changes the function even without exits (m >= R-1 is
  `per_round`).
`first` and `last_m` are the model with those rounds turned into reuse_kv rounds (`strategy_config`),
so the cache layout, the KV bytes and the FLOPs follow from the config; `per_round` and `latest` leave
it as it is.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import torch
from torch import Tensor

from looplab.model import fields
from looplab.model.config import ModelConfig, RoundConfig
from looplab.model.errors import ConfigError
from looplab.model.exit_names import KVStrategy

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


def check_strategy(strategy: str, m: int | None) -> tuple[KVStrategy, int | None]:
    """(strategy, m) checked: m (>= 1) only with last_m, which needs it."""
    strategy = KVStrategy(fields.choice("kv_strategy", strategy, tuple(KVStrategy)))
    if strategy is not KVStrategy.LAST_M:
        if m is not None:
            raise ConfigError(
                f"kv_m: only with kv_strategy last_m; accepted with {strategy}: null; got {m!r}"
            )
        return strategy, None
    if m is None:
        raise ConfigError("kv_m: last_m needs m, the number of last rounds that keep their own cache (>= 1)")
    return strategy, fields.integer("kv_m", m, lo=1)


def _reads_round1(rc: RoundConfig) -> RoundConfig:
    return dataclasses.replace(rc, reuse_kv=True) if rc.attention else rc


def strategy_config(cfg: ModelConfig, strategy: str, max_rounds: int, m: int | None = None) -> ModelConfig:
    """The config whose forward at up to `max_rounds` rounds is `cfg` under KV strategy `strategy` (see
    the module docstring): `cfg` itself for per_round and latest; for first and last_m the rounds that
    read round 1's keys/values become reuse_kv rounds (the same weights: reuse adds no parameters).
    ConfigError names kv_strategy when the model cannot share round 1's keys (e.g. round 1 is MLP-only,
    or a later round is wider or sees further back than round 1)."""
    strategy, m = check_strategy(strategy, m)
    max_rounds = fields.integer("max_rounds", max_rounds, lo=1)
    if not strategy.changes_function:
        return cfg
    own_from = (
        max_rounds if strategy is KVStrategy.FIRST else max(1, max_rounds - m)
    )  # 0-based first kept round
    if own_from == 1:  # last_m with m >= max_rounds - 1: every round keeps its own
        return cfg
    rounds = [cfg.round(0)] + [
        cfg.round(r) if r >= own_from else _reads_round1(cfg.round(r)) for r in range(1, max_rounds)
    ]
    if strategy is KVStrategy.FIRST:  # the last entry repeats: every later round reads round 1's too
        rounds.append(_reads_round1(cfg.round(max_rounds)))
    try:
        return dataclasses.replace(cfg, rounds=tuple(rounds))
    except ConfigError as e:
        raise ConfigError(f"kv_strategy: {strategy} cannot share round 1's keys/values here: {e}") from None


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
