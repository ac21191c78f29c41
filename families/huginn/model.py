"""A Huginn-style recurrent-depth language model (Geiping et al., "Scaling up Test-Time Compute with
Latent Reasoning: A Recurrent Depth Approach", arXiv:2502.05171), written against looplab's model
contract (docs/own-model.md) from a reading of the public code (seal-rg/recurrent-pretraining,
`recpre/raven_modeling_minimal.py`):

    e    = prelude(embed(idx) * sqrt(d))                            applied once
    s_0  ~ truncated normal, std sqrt(2 / 5d) * sqrt(d)             per (row, position), from the row key
    s_r  = core(adapter([s_{r-1}, e]))          r = 1 .. loops      the recurrence: state and input
    out  = head(norm(coda(norm(s_loops))))                          applied once

Every block is a sandwich block: x = n2(attn(n1(x)) + x); x = n4(mlp(n3(x)) + x), RMSNorms, causal
attention with RoPE on neighbouring channel pairs and q/k biases, a gated SiLU MLP. In training the
recurrence count is drawn per step (`sample_loops`: Poisson of a log-normal rate around the mean,
plus one) and only the last `backprop_depth` recurrences carry gradient (truncated backprop).

The initial state is drawn from the row key (`model.init.h0_rows`: a pure function of seed, step,
global row, position and channel), so a step's states and loop counts do not depend on how its rows
are split over micro-batches or workers; a forward without a key uses seed 0, step 0, rows 0..B-1.

The contract's exit path (`rope`, `readout` at any recurrence, `run_rounds` with a keep mask) lets
`model.exits` run per-token exit rules inside one forward: a stopped token holds its state and its
last keys and values (`HeldKV`), the function of the `full` KV strategy with per-token exits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from looplab.families.huginn.cache import HuginnCache, KVStrategy, cache_bytes
from looplab.families.huginn.config import HuginnConfig
from looplab.model.family_parts import LastKV
from looplab.model.init import RowKey, h0_rows


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        y = x.float()
        return (y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


def rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x (B, S, H, D) rotated on channel pairs (2i, 2i+1); cos, sin (S, 1, D/2)."""
    pairs = x.float().unflatten(-1, (-1, 2))
    a, b = pairs[..., 0], pairs[..., 1]
    return torch.stack([a * cos - b * sin, b * cos + a * sin], -1).flatten(-2).type_as(x)


class Attention(nn.Module):
    def __init__(self, cfg: HuginnConfig) -> None:
        super().__init__()
        self.h, self.hd = cfg.n_heads, cfg.head_dim
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.qk_bias = nn.Parameter(torch.zeros(2, cfg.n_heads, cfg.head_dim)) if cfg.qk_bias else None
        self.proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, cache: HuginnCache | None, slot: int) -> Tensor:
        B, S, d = x.shape
        q, k, v = (t.view(B, S, self.h, self.hd) for t in self.qkv(x).split(d, dim=-1))
        if self.qk_bias is not None:
            q, k = q + self.qk_bias[0], k + self.qk_bias[1]
        q, k = rope(q, cos, sin).transpose(1, 2), rope(k, cos, sin).transpose(1, 2)  # (B, H, S, D)
        v = v.transpose(1, 2)
        if cache is not None:
            k, v = cache.attend(slot, k, v)  # prefill from 0 (causal) or one token against the past
        y = F.scaled_dot_product_attention(q, k, v, is_causal=S > 1)
        return self.proj(y.transpose(1, 2).reshape(B, S, d))


class GatedMLP(nn.Module):
    def __init__(self, cfg: HuginnConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(cfg.d_model, 2 * cfg.mlp, bias=False)
        self.proj = nn.Linear(cfg.mlp, cfg.d_model, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        gate, up = self.fc(x).chunk(2, dim=-1)
        return self.proj(F.silu(gate) * up)


class SandwichBlock(nn.Module):
    def __init__(self, cfg: HuginnConfig) -> None:
        super().__init__()
        self.attn_in, self.attn_out = RMSNorm(cfg.d_model, cfg.norm_eps), RMSNorm(cfg.d_model, cfg.norm_eps)
        self.mlp_in, self.mlp_out = RMSNorm(cfg.d_model, cfg.norm_eps), RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attn, self.mlp = Attention(cfg), GatedMLP(cfg)

    def forward(self, x: Tensor, rot: tuple[Tensor, Tensor], cache=None, slot: int = 0) -> Tensor:
        x = self.attn_out(self.attn(self.attn_in(x), *rot, cache, slot) + x)
        return self.mlp_out(self.mlp(self.mlp_in(x)) + x)


class HeldKV(LastKV):
    """The keys and values each token offers later recurrences at each core layer: its last computed
    recurrence's (a token that stopped holds them). Passed where a cache goes: it owns a slot per core
    layer and none for the prelude and coda (`attend` passes those through)."""

    def core_slot(self, r: int, j: int) -> int:
        return j


@dataclass
class StepContext:
    """The exit path's context of one decode step (`HuginnLM.step_context`): the rotation of its
    position, the position, and the cache it attends through (`kv`; `cache`, looplab's own KV cache,
    is None: `model.exits` does not fill this one)."""

    cos: Tensor
    sin: Tensor
    positions: Tensor
    kv: HuginnCache
    cache: None = None
    held: None = None


class HuginnLM(nn.Module):
    def __init__(self, cfg: HuginnConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d = cfg.d_model
        self.embed = nn.Embedding(cfg.vocab_size, d)
        self.prelude = nn.ModuleList(SandwichBlock(cfg) for _ in range(cfg.n_prelude))
        self.adapter = nn.Linear(2 * d, d, bias=False)
        self.core = nn.ModuleList(SandwichBlock(cfg) for _ in range(cfg.n_core))
        self.coda = nn.ModuleList(SandwichBlock(cfg) for _ in range(cfg.n_coda))
        self.norm = RMSNorm(d, cfg.norm_eps)  # used twice: on the last state and after the coda
        self.head = nn.Linear(d, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.head.weight = self.embed.weight
        self._init_weights()

    def _init_weights(self) -> None:
        """Truncated normals at the public code's scales: std sqrt(2 / 5d), output projections divided
        by sqrt(2 x the expected depth) (prelude + coda + core x mean recurrence)."""
        cfg = self.cfg
        depth = cfg.n_prelude + cfg.n_coda + cfg.n_core * cfg.mean_recurrence
        std, out_std = cfg.init_std, cfg.init_std / math.sqrt(2 * depth)
        g = torch.Generator().manual_seed(0) if not self.embed.weight.is_meta else None
        for name, p in self.named_parameters():
            if p.ndim < 2 or p.is_meta:
                continue
            s = out_std if name.endswith("proj.weight") else std
            with torch.no_grad():
                p.copy_(torch.nn.init.trunc_normal_(torch.empty(p.shape), 0, s, -3 * s, 3 * s, generator=g))

    # ---- the parts of the forward -----------------------------------------------------------------

    def _rot(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        hd = self.cfg.head_dim
        inv = 1.0 / (self.cfg.rope_base ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        # on the CPU, so every device rotates by the same angles; on the meta device (shapes only, as the
        # planner measures what a forward keeps) there is nothing to copy
        where = positions.float() if positions.is_meta else positions.float().cpu()
        angles = torch.outer(where, inv.to(where.device)).to(positions.device)[:, None, :]  # (S, 1, D/2)
        return angles.cos(), angles.sin()

    def embed_prelude(self, idx: Tensor, rot, cache: HuginnCache | None = None) -> Tensor:
        e = self.embed(idx) * self.cfg.embed_scale
        for i, block in enumerate(self.prelude):
            e = block(e, rot, cache, cache.prelude_slot(i) if cache else 0)
        return e

    def initial_state(self, idx: Tensor, positions: Tensor, row_key=None) -> Tensor:
        """s_0 (B, T, d): the row key's truncated normal at the state scale (`model.init.h0_rows`)."""
        key = row_key if row_key is not None else RowKey(0, 0, tuple(range(idx.shape[0])))
        std = self.cfg.init_std * self.cfg.embed_scale
        return h0_rows(key, positions, self.cfg.d_model, std).to(self.embed.weight.dtype)

    def recur(self, s: Tensor, e: Tensor, rot, r: int = 0, cache: HuginnCache | None = None) -> Tensor:
        """One recurrence (0-based `r`): the adapter on [state, input], then the core blocks."""
        x = self.adapter(torch.cat([s, e], dim=-1))
        for j, block in enumerate(self.core):
            x = block(x, rot, cache, cache.core_slot(r, j) if cache else 0)
        return x

    def _coda(self, h: Tensor, rot, cache: HuginnCache | None = None) -> Tensor:
        x = self.norm(h)
        for i, block in enumerate(self.coda):
            x = block(x, rot, cache, cache.coda_slot(i) if cache else 0)
        return self.head(self.norm(x)).float()

    # ---- the exit path: readout at any recurrence, recurrences with a keep mask, rope ------------------

    def rope(self, n: int) -> tuple[Tensor, Tensor]:
        """cos, sin (n, 1, head_dim/2) of positions 0..n-1: the rotation `run_rounds` and `readout` read
        from the exit path's context (`model.exits` builds it from these)."""
        return self._rot(torch.arange(n, device=self.embed.weight.device))

    def readout(self, h: Tensor, idx: Tensor, ctx=None) -> Tensor:
        """Logits (B, T, V) of a state h (B, T, d) at any recurrence: the coda and head on it, rotated by
        `ctx`'s cos and sin (`rope`), else for positions 0..T-1; in a decode step's context
        (`step_context`) the coda reads and writes the step's cache (the last readout's entry stays)."""
        rot = self.rope(idx.shape[1]) if ctx is None else (ctx.cos, ctx.sin)
        return self._coda(h, rot, getattr(ctx, "kv", None))

    def step_context(self, cache: HuginnCache) -> StepContext:
        """The exit path's context of one decode step at the cache's position: `run_rounds` and
        `readout` attend through `cache` under its strategy (`model.exits.family_exit_forward` runs each
        token's rounds with an exit rule in it and advances the cache)."""
        positions = torch.tensor([cache.pos], device=self.embed.weight.device)
        cos, sin = self._rot(positions)
        return StepContext(cos, sin, positions, cache)

    def run_rounds(self, idx: Tensor, ctx, positions: Tensor, counts, h0_seed=None, skip_round=None,
                   observe=None, keep=None) -> Tensor:  # fmt: skip
        """The prelude, the initial state and the recurrences with the exit path's context -> the last
        state (B, T, d), as `families.looped.model.LoopedLM.run_rounds`: `counts` an int or one per row (a row
        holds its state after its count); `h0_seed` a `model.init.RowKey` (else the forward's default
        key, as `FamilyLM` calls the forward); `skip_round` runs recurrence g (0-based) as the identity;
        `observe(s)` is handed s_0 and every recurrence's output; `keep()` is asked before every
        recurrence which tokens run it ((B, T, 1) bool, or False to stop). A token that does not run
        keeps its state, and later tokens read, at every core layer, the keys and values of its last
        computed recurrence (`HeldKV`): the function of the `full` KV strategy with per-token exits."""
        rot, kv = (ctx.cos, ctx.sin), getattr(ctx, "kv", None)
        e = self.embed_prelude(idx, rot, kv)
        s = self.initial_state(idx, positions, h0_seed if hasattr(h0_seed, "rows") else None)
        B = idx.shape[0]
        ran = torch.as_tensor([counts] * B if isinstance(counts, int) else counts).to(idx.device)
        held, computed = HeldKV() if kv is None else kv, torch.zeros_like(ran)
        if observe is not None:
            observe(s)
        for r in range(int(ran.max())):
            running = None if keep is None else keep()
            if running is False:
                break
            rows = (ran > r)[:, None, None]  # (B, 1, 1): the rows whose count reaches recurrence r
            running = rows if running is None else running & rows
            if kv is None:
                held.running = running[:, None]  # (B, 1, T, 1) against keys (B, H, T, D)
            else:  # a decode step (T = 1): the cache writes the running rows only
                kv.active, computed = running[:, 0, 0], computed + running[:, 0, 0]
            new = s if r == skip_round else self.recur(s, e, rot, r, held)
            if kv is not None:
                kv.active = None  # the readouts write every row
            s = torch.where(running, new, s)
            if observe is not None:
                observe(s)
        if kv is not None:  # `full`: a row's skipped recurrences take its latest entry
            kv.fill_skipped(computed.clamp(min=1).tolist(), idx.shape[1])
        return s

    # ---- the contract -----------------------------------------------------------------------------

    def forward(self, idx: Tensor, loops: int = 4, row_key=None, init_state: Tensor | None = None) -> Tensor:
        """Logits (B, T, V) after `loops` recurrences; `init_state` (B, T, d) replaces the drawn s_0."""
        positions = torch.arange(idx.shape[1], device=idx.device)
        rot = self._rot(positions)
        e = self.embed_prelude(idx, rot)
        s = self.initial_state(idx, positions, row_key) if init_state is None else init_state
        free = max(loops - self.cfg.backprop_depth, 0) if torch.is_grad_enabled() else 0
        with torch.no_grad():  # truncated backprop: no gradient through the first recurrences
            for r in range(free):
                s = self.recur(s, e, rot, r)
        for r in range(free, loops):
            s = self.recur(s, e, rot, r)
        return self._coda(s, rot)

    @torch.no_grad()
    def round_states(self, idx: Tensor, loops: int, skip_round: int | None = None) -> Tensor:
        """s_0 .. s_loops (loops + 1, B, T, d); recurrence `skip_round` (0-based) is the identity."""
        positions = torch.arange(idx.shape[1], device=idx.device)
        rot = self._rot(positions)
        e = self.embed_prelude(idx, rot)
        states = [self.initial_state(idx, positions)]
        for r in range(loops):
            states.append(states[-1] if r == skip_round else self.recur(states[-1], e, rot, r))
        return torch.stack(states)

    def sample_loops(self, batch: int, step: int, seed: int = 0) -> Tensor:
        """The step's recurrence count for every row (B,): 1 + Poisson(rate), rate log-normal with mean
        `mean_recurrence` (sigma 0.5), capped at `max_recurrence`; a pure function of (seed, step)."""
        g = torch.Generator().manual_seed((seed * 1_000_003 + step) & 0x7FFFFFFFFFFFFFFF)
        sigma = 0.5
        rate = torch.empty(1).log_normal_(
            math.log(self.cfg.mean_recurrence) - sigma**2 / 2, sigma, generator=g
        )
        n = int(torch.poisson(rate, generator=g).item()) + 1
        return torch.full((batch,), min(n, self.cfg.sampler_cap), dtype=torch.long)

    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        """Matrices of the blocks and the adapter (for Muon-style optimizers); the rest (embedding,
        head, norms, q/k biases) in "other"."""
        table = {id(self.embed.weight), id(self.head.weight)}
        params = list(self.parameters())
        matrix = [p for p in params if p.ndim == 2 and id(p) not in table]
        return {"matrix": matrix, "other": [p for p in params if p.ndim != 2 or id(p) in table]}

    def param_split(self) -> dict[str, list[nn.Parameter]]:
        once = [*self.prelude.parameters(), *self.coda.parameters(), *self.norm.parameters()]
        recurrent = [*self.adapter.parameters(), *self.core.parameters()]
        tables = [self.embed.weight] + ([] if self.cfg.tie_embeddings else [self.head.weight])
        return {"once": once, "recurrent": recurrent, "embedding": tables}

    def flops_per_token(self, loops: int) -> float:
        """Training FLOPs per token at `loops` recurrences and the config's context: matmuls (2 per
        multiply-add) plus dense attention (4 d T per layer); forward + backward (3x) through the prelude,
        coda, head and the last `backprop_depth` recurrences, forward only through the others."""
        c = self.cfg
        block = 2 * (4 * c.d_model**2 + 3 * c.d_model * c.mlp) + 4 * c.d_model * c.seq_len
        once = (c.n_prelude + c.n_coda) * block + 2 * c.d_model * c.vocab_size
        recurrence = 2 * 2 * c.d_model**2 + c.n_core * block
        with_grad = min(c.backprop_depth, loops)
        return float(3 * (once + with_grad * recurrence) + (loops - with_grad) * recurrence)

    # ---- the KV cache across recurrences ----------------------------------------------------------

    def kv_strategies(self) -> tuple[str, ...]:
        """The cache's strategies (`families.huginn.cache`), the first the model as trained."""
        return tuple(KVStrategy)

    def kv_cache_bytes(self, batch: int, max_len: int, loops: int | None = None, strategy: str = "full",
                       dtype=None) -> int:  # fmt: skip
        item = torch.empty((), dtype=dtype or self.embed.weight.dtype).element_size()
        return cache_bytes(self.cfg, batch, max_len, loops or self.cfg.mean_recurrence, strategy, item)

    def setup_cache(self, batch: int, max_len: int, dtype=None, device=None, loops: int | None = None,
                    h0_seed: int = 0, strategy: str = "full") -> HuginnCache:  # fmt: skip
        """A cache for `batch` sequences of up to `max_len` tokens decoded at `loops` recurrences (the
        mean by default) under `strategy` (`KVStrategy`); initial states from seed `h0_seed`."""
        w = self.embed.weight
        key = RowKey(h0_seed, 0, tuple(range(batch)))
        loops = loops or self.cfg.mean_recurrence
        return HuginnCache(
            self.cfg, batch, max_len, loops, strategy, dtype or w.dtype, device or w.device, key
        )

    @torch.no_grad()
    def prefill(self, idx: Tensor, cache: HuginnCache) -> Tensor:
        """The prompt (B, T) from position 0 through every layer, filling the cache -> logits (B, T, V)."""
        cache.reset()
        return self._cached(idx, cache, cache.loops)

    @torch.no_grad()
    def decode_step(self, tokens: Tensor, cache: HuginnCache, loops=None) -> Tensor:
        """tokens (B,) at the cache's position -> logits (B, V). `loops`: the recurrences to run, an int
        or one per row ((B,) ints), each at most the cache's; fewer is a per-token exit (that row's state
        stops; its cache slots of the skipped recurrences are as the cache's strategy says)."""
        return self._cached(tokens.view(-1, 1), cache, cache.loops if loops is None else loops)[:, 0]

    def _cached(self, idx: Tensor, cache: HuginnCache, loops) -> Tensor:
        B = idx.shape[0]
        counts = (
            [int(loops)] * B if isinstance(loops, int) else [int(c) for c in torch.as_tensor(loops).tolist()]
        )
        if max(counts) > cache.loops or min(counts) < 1:
            raise ValueError(f"loops: from 1 to the cache's {cache.loops} recurrences; got {counts}")
        positions = torch.arange(cache.pos, cache.pos + idx.shape[1], device=idx.device)
        rot = self._rot(positions)
        e = self.embed_prelude(idx, rot, cache)
        s = self.initial_state(idx, positions, cache.key)
        ran = torch.tensor(counts, device=idx.device)
        for r in range(max(counts)):
            active = ran > r  # (B,) the rows still recurring
            cache.active = None if bool(active.all()) else active
            s = torch.where(active[:, None, None], self.recur(s, e, rot, r, cache), s)
        cache.active = None
        cache.fill_skipped(counts, idx.shape[1])
        logits = self._coda(s, rot, cache)
        cache.pos += idx.shape[1]
        return logits
