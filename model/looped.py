"""The looped language model: prelude -> injection -> recurrent block x T -> readout -> coda -> head.

    e   = prelude(embed(idx))                         run once
    e'  = rms_norm(e);  Be = B e'                     B dense, identity at init
    h0  ~ truncated normal (std 0.023)                fresh per forward, or from a seed (see below)
    h_t = R( exp(-dt*A) * h_{t-1} + dt * Be )         R = the recurrent layers, settings of round t
    y   = head(norm(coda(C h_T)))                     C dense readout, identity at init; tied head

(`injection="none"` instead runs h_1 = R(e), h_t = R(h_{t-1}), no B/C/h0: the plain transformer.)

Loop counts: `loops` is an int for the whole batch or a (B,) tensor of per-sequence counts. A batch
with mixed counts runs max(count) rounds and freezes each sample's state once its own count is reached,
so every sample's output equals its solo run (rounds never mix samples). Truncated backprop: when grad
is enabled, a sample with n rounds gets gradient through its last min(n, grad_rounds) rounds only;
rounds that no sample needs gradient for run under `torch.no_grad()` (no activations kept).

h0 and seeds: `h0_seed=None` draws fresh from the global RNG, shape (B, T, d), as in training.
An int seed gives a *deterministic function of (seed, position, channel)* (a counter-based hash, no
generator state), identical for every row of the batch, on any device. That is what makes
token-by-token decoding (which needs h0 at position p only) equal the full forward at every position,
and a sample's result independent of the batch it runs in. A `torch.Generator` draws (B, T, d) from it
(reproducible, but decoding cannot reproduce it: decode with an int seed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from model.attention import attention
from model.config import FULL_ROUND, ModelConfig
from model.layers import Block, rms_norm, rope_tables

_M32 = 0xFFFFFFFF


@dataclass
class LMOutput:
    logits: Tensor  # (B, T, V) fp32
    loss: Tensor | None = None  # mean cross-entropy over targets != -1
    round_deltas: Tensor | None = None  # (n_rounds,) mean ||h_t - h_{t-1}|| / ||h_{t-1}||


def _mix32(x: Tensor) -> Tensor:
    """A 32-bit integer hash (int64 tensors holding 32-bit values; products stay below 2**63)."""
    x = ((x >> 16) ^ x) * 0x45D9F3B & _M32
    x = ((x >> 16) ^ x) * 0x45D9F3B & _M32
    return (x >> 16) ^ x


def _trunc_normal_from_uniform(u: Tensor, std: float) -> Tensor:
    """Inverse-CDF truncated normal on [-3 std, 3 std] from uniforms in (0, 1). No host sync, unlike
    nn.init.trunc_normal_ (which calls .item() and breaks torch.compile graphs)."""
    lo = 0.5 * (1.0 + math.erf(-3.0 / math.sqrt(2.0)))  # Phi(-3)
    p = lo + u * (1.0 - 2.0 * lo)
    return torch.erfinv(2.0 * p - 1.0) * (math.sqrt(2.0) * std)


def h0_from_seed(seed: int, positions: Tensor, d: int, std: float) -> Tensor:
    """Deterministic truncated-normal (+-3 std) initial state, (T, d), a pure function of
    (seed, position, channel). positions: (T,) int64 on the target device."""
    s = (seed * 0x9E3779B9 + 0x7F4A7C15) & _M32
    ch = torch.arange(d, device=positions.device)
    key = (positions[:, None].long() * d + ch[None, :]) & _M32  # (T, d)
    x = _mix32(_mix32(key) ^ s)
    u = ((x >> 8).float() + 0.5) / float(1 << 24)  # uniform in (0, 1)
    return _trunc_normal_from_uniform(u, std)


class SeqContext:
    """Attention plumbing for a whole sequence: plain causal attention, keeps round 1's K,V for
    reuse_kv rounds, and (prefill) writes every layer application's K,V into a cache."""

    def __init__(self, cos: Tensor, sin: Tensor, cache=None) -> None:
        self.cos, self.sin, self.cache = cos, sin, cache
        self.round1_kv: dict[int, tuple[Tensor, Tensor]] = {}

    def attend(self, q: Tensor, k: Tensor, v: Tensor, key: tuple, window: int | None) -> Tensor:
        if key[0] == "r" and key[1] == 0:
            self.round1_kv[key[2]] = (k, v)
        if self.cache is not None:
            self.cache.write_prefill(key, k, v)
        return attention(q, k, v, window)

    def attend_reused(self, q: Tensor, key: tuple, window: int | None) -> Tensor:
        k, v = self.round1_kv[key[2]]
        H = q.shape[1]
        return attention(q, k[:, :H], v[:, :H], window)


class LoopedLM(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d, ve = cfg.d_model, set(cfg.value_embed_layers())
        self.wte = nn.Embedding(cfg.vocab_size, d)
        i = iter(range(cfg.n_layers))
        self.prelude = nn.ModuleList(Block(cfg, next(i) in ve) for _ in range(cfg.n_prelude))
        self.recurrent = nn.ModuleList(Block(cfg, next(i) in ve) for _ in range(cfg.n_recurrent))
        self.coda = nn.ModuleList(Block(cfg, next(i) in ve) for _ in range(cfg.n_coda))
        if cfg.injection == "diagonal":
            self.A_log = nn.Parameter(torch.zeros(d))
            self.dt_bias = nn.Parameter(torch.zeros(d))
            self.B = nn.Parameter(torch.empty(d, d))
            self.C = nn.Parameter(torch.empty(d, d))
        self.norm_f = nn.Parameter(torch.ones(d))  # final RMSNorm weight (kept flat: see _final_norm)
        self.lm_head = None if cfg.tie_embeddings else nn.Linear(d, cfg.vocab_size, bias=False)
        # RoPE tables live outside the module's buffers so `model.to(bfloat16)` cannot round them
        self._rope_tables: tuple[Tensor, Tensor] | None = None
        self._truncate_by_detach = False  # tests only: detach instead of no_grad (same gradients)
        self.init_weights()

    # ---- initialisation & parameter bookkeeping -------------------------------------------------

    @torch.no_grad()
    def init_weights(self) -> None:
        self.wte.weight.normal_(0.0, 0.02)
        for blk in self.blocks():
            blk.init_weights()
        self.norm_f.fill_(1.0)
        if self.lm_head is not None:
            self.lm_head.weight.normal_(0.0, 0.02)
        if self.cfg.injection == "diagonal":
            dt = -math.log(self.cfg.init_decay)  # exp(-dt * A) = init_decay with A = exp(0) = 1
            self.A_log.zero_()
            self.dt_bias.fill_(math.log(math.expm1(dt)))  # softplus^-1(dt)
            self.B.copy_(torch.eye(self.cfg.d_model))
            self.C.copy_(torch.eye(self.cfg.d_model))

    def blocks(self) -> list[Block]:
        return [*self.prelude, *self.recurrent, *self.coda]

    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        """ "matrix": the 2-D attention/MLP weights (for Muon); "other": embeddings, norms, value-embed
        gates, injection (A_log, dt_bias, B, C) and an untied head (for AdamW)."""
        matrix = []
        for blk in self.blocks():
            matrix += [blk.attn.q.weight, blk.attn.k.weight, blk.attn.v.weight, blk.attn.o.weight]
            matrix += [blk.mlp.fc.weight, blk.mlp.proj.weight]
        ids = {id(p) for p in matrix}
        return {"matrix": matrix, "other": [p for p in self.parameters() if id(p) not in ids]}

    def embedding_params(self) -> list[nn.Parameter]:
        """Vocabulary-sized tables: token embedding, value embeddings, untied head."""
        out = [self.wte.weight] + [b.attn.ve.weight for b in self.blocks() if b.attn.ve is not None]
        return out + ([self.lm_head.weight] if self.lm_head is not None else [])

    # ---- helpers --------------------------------------------------------------------------------

    def _rope(self, n: int) -> tuple[Tensor, Tensor]:
        """fp32 cos, sin (n, head_dim/2) for positions 0..n-1, (re)built when too short or on another device."""
        dev, t = self.wte.weight.device, self._rope_tables
        if t is None or t[0].shape[0] < n or t[0].device != dev:
            t = rope_tables(max(n, self.cfg.seq_len), self.cfg.head_dim, self.cfg.rope_base, device=dev)
            self._rope_tables = t
        return t[0][:n], t[1][:n]

    def _final(self, x: Tensor) -> Tensor:
        """Final norm + head -> fp32 logits."""
        xf = x.float()
        x = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * self.norm_f.float()).to(x.dtype)
        w = self.wte.weight if self.lm_head is None else self.lm_head.weight
        return F.linear(x, w).float()

    def _h0(self, B: int, positions: Tensor, h0_seed, like: Tensor) -> Tensor:
        d, std = self.cfg.d_model, self.cfg.h0_std
        if isinstance(h0_seed, int) and not isinstance(h0_seed, bool):
            return h0_from_seed(h0_seed, positions, d, std).to(like.dtype).expand(B, -1, -1)
        gen_device = like.device if h0_seed is None else h0_seed.device
        u = torch.rand(B, positions.shape[0], d, device=gen_device, generator=h0_seed)  # (B, T, d)
        return _trunc_normal_from_uniform(u.to(like.device), std).to(like.dtype)

    def sample_loops(self, batch_size: int, step: int, seed: int = 0) -> Tensor:
        """Training loop counts (B,) int64 on CPU: a pure function of (seed, step) per the sampler."""
        cfg = self.cfg
        if cfg.loop_sampler == "fixed":
            return torch.full((batch_size,), cfg.loops, dtype=torch.long)
        g = torch.Generator().manual_seed((seed * 1_000_003 + step) & 0x7FFFFFFFFFFFFFFF)
        n = batch_size if cfg.loop_sampler == "poisson_seq" else 1
        counts = torch.poisson(torch.full((n,), float(cfg.loops)), generator=g).long().clamp_min(1)
        return counts.expand(batch_size).clone()

    # ---- forward --------------------------------------------------------------------------------

    def forward(
        self,
        idx: Tensor,
        targets: Tensor | None = None,
        loops=None,
        h0_seed=None,
        return_deltas: bool = False,
    ) -> LMOutput:
        B, T = idx.shape
        cos, sin = self._rope(T)
        positions = torch.arange(T, device=idx.device)
        logits, deltas = self._run(idx, SeqContext(cos, sin), positions, loops, h0_seed, return_deltas)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-1)
        return LMOutput(logits=logits, loss=loss, round_deltas=deltas)

    def _run(self, idx: Tensor, ctx, positions: Tensor, loops, h0_seed, return_deltas: bool):
        """Shared by forward, prefill and decode_step: ctx decides where K,V go."""
        counts = self._counts(loops, idx.shape[0])
        x = self.wte(idx)  # (B, T, d)
        for i, blk in enumerate(self.prelude):
            x = blk(x, idx, FULL_ROUND, self.cfg.n_heads, self.cfg.mlp_hidden, ctx, ("p", i))
        x, deltas = self._loop(x, idx, ctx, positions, counts, h0_seed, return_deltas)
        for i, blk in enumerate(self.coda):
            x = blk(x, idx, FULL_ROUND, self.cfg.n_heads, self.cfg.mlp_hidden, ctx, ("c", i))
        return self._final(x), deltas

    def _counts(self, loops, B: int) -> int | list[int]:
        if loops is None:
            return self.cfg.loops
        if isinstance(loops, Tensor):
            c = [int(v) for v in loops.reshape(-1).tolist()]
            if len(c) != B:
                raise ValueError(f"loops: expected {B} per-sequence counts, got {len(c)}")
            if min(c) < 1:
                raise ValueError(f"loops: counts must be >= 1, got {c}")
            return c[0] if len(set(c)) == 1 else c
        if int(loops) < 1:
            raise ValueError(f"loops: must be >= 1, got {loops}")
        return int(loops)

    def _round(self, h: Tensor, inj, idx: Tensor, ctx, r: int) -> Tensor:
        """One application of the recurrent block with round r's settings."""
        cfg = self.cfg
        x = h if inj is None else inj[0] * h + inj[1]
        rc, heads, hidden = cfg.round(r), cfg.round_heads(r), cfg.round_hidden(r)
        for j, blk in enumerate(self.recurrent):
            x = blk(x, idx, rc, heads, hidden, ctx, ("r", r, j))
        return x

    def _loop(self, e: Tensor, idx: Tensor, ctx, positions: Tensor, counts, h0_seed, return_deltas: bool):
        cfg, B = self.cfg, e.shape[0]
        mixed = isinstance(counts, list)
        n_rounds = max(counts) if mixed else counts
        k = cfg.grad_rounds
        grad_on = torch.is_grad_enabled()
        if cfg.injection == "diagonal":
            dt = F.softplus(self.dt_bias)  # (d,)
            inj = (torch.exp(-dt * torch.exp(self.A_log)), dt * F.linear(rms_norm(e), self.B))
            h = self._h0(B, positions, h0_seed, e)
        else:
            inj, h = None, e
        if mixed:
            c = torch.tensor(counts, device=e.device)
        deltas = []
        for r in range(n_rounds):
            if mixed:
                active = c > r  # (B,)
                need = active if k is None else active & (r >= c - k)
                round_grad = grad_on and bool(need.any())
            else:
                round_grad = grad_on and (k is None or r >= n_rounds - k)
            use_grad = round_grad or (grad_on and self._truncate_by_detach)
            with torch.set_grad_enabled(use_grad):
                new = self._round(h, inj, idx, ctx, r)
            # outside the no_grad block: a finished sample must keep its state's graph
            if mixed:
                if grad_on:  # samples outside their last k rounds contribute no gradient
                    new = torch.where(need[:, None, None], new, new.detach())
                new = torch.where(active[:, None, None], new, h)
            elif use_grad and not round_grad:
                new = new.detach()
            if return_deltas:
                with torch.no_grad():
                    rel = (new - h).float().norm(dim=-1) / h.float().norm(dim=-1).clamp_min(1e-12)  # (B, T)
                    deltas.append(rel[active].mean() if mixed else rel.mean())
            h = new
        if inj is not None:
            h = F.linear(h, self.C)
        return h, (torch.stack(deltas) if return_deltas else None)

    # ---- decoding (see model/decode.py) -----------------------------------------------------------

    def setup_cache(
        self, batch: int, max_len: int, dtype=None, device=None, loops: int | None = None, h0_seed: int = 0
    ):
        from model.decode import KVCache

        self._rope(max_len)
        p = self.wte.weight
        return KVCache(self.cfg, batch, max_len, dtype or p.dtype, device or p.device, loops, h0_seed)

    def prefill(self, idx: Tensor, cache) -> Tensor:
        from model.decode import prefill

        return prefill(self, idx, cache)

    def decode_step(self, tokens: Tensor, cache) -> Tensor:
        from model.decode import decode_step

        return decode_step(self, tokens, cache)
