"""A Mixture-of-Recursions-style language model (Bae et al., arXiv:2507.10524), written against
looplab's model contract (docs/own-model.md) from a reading of the public code
(raymin0223/mixture_of_recursions):

    h   = first(embed(idx))                        a unique first layer
    h   = recursion r = 0 .. loops-1 of the shared block, each token only while its router keeps it
    out = head(norm(last(h)))                      a unique last layer

Expert choice (`router: expert`): before recursion r a router per recursion scores the still-active
tokens, s = sigmoid(w_r · h); in training the top ceil(share_r T) of them run it (share_r = (loops −
r) / loops, the capacity schedule), and a binary cross-entropy of s against that selection (the
auxiliary loss) teaches the router to decide alone, which it does in evaluation (s > 0.5) so that a
token's depth does not read later tokens. Token choice (`router: token`): one router gives every token
a softmax over the depths 1..loops, the token runs argmax + 1 recursions, and a Switch-style balancing
loss loops · Σ_j f_j P_j spreads the tokens. A selected token's state becomes h + w · block(h) (w its router weight; the public code's weighted
gating, a scatter-add of the block's output).

Attention in a recursion reads the keys and values of the tokens that recursion runs (recursion-wise
caching: `kv: recursion`), or the first recursion's keys and values for every recursion (`kv:
share_first`). Past `max_recursions` expert choice reuses the last router; token choice never
assigns more than `max_recursions`. `token_depths` gives each token's recursion count (what the adaptive frontier plots).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from looplab.families.mor.config import MoRConfig
from looplab.model.family_parts import CachedDecode, RMSNorm, rope_tables, rotate


class Layer(nn.Module):
    """A pre-norm layer whose attention takes a key mask and may reuse given keys and values."""

    def __init__(self, cfg: MoRConfig) -> None:
        super().__init__()
        d = cfg.d_model
        self.h, self.hd = cfg.n_heads, cfg.head_dim
        self.qkv, self.out = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
        self.up, self.down = nn.Linear(d, 2 * cfg.mlp, bias=False), nn.Linear(cfg.mlp, d, bias=False)
        self.n1, self.n2 = RMSNorm(d, cfg.norm_eps), RMSNorm(d, cfg.norm_eps)

    def forward(self, x: Tensor, rot, kv) -> tuple[Tensor, tuple]:
        """x (B, S, d); `kv(k, v) -> (K, V, mask)`: the keys, values and attention mask this layer reads
        (`sequence_kv`, or a cache's `MoRCache.view`). Returns the output and this layer's own (k, v)."""
        B, S, d = x.shape
        q, k, v = (t.view(B, S, self.h, self.hd).transpose(1, 2) for t in self.qkv(self.n1(x)).split(d, -1))
        q, k = rotate(q, *rot), rotate(k, *rot)
        keys, values, mask = kv(k, v)
        y = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
        x = x + self.out(y.transpose(1, 2).reshape(B, S, d))
        gate, up = self.up(self.n2(x)).chunk(2, -1)
        return x + self.down(F.silu(gate) * up), (k, v)


def sequence_kv(keys: Tensor | None = None, shared: tuple | None = None):
    """A whole sequence's attention: causal, reading only the tokens `keys` (B, T) marks (each query also
    reads itself), or the keys and values `shared` (the first recursion's) instead of the layer's own."""

    def kv(k: Tensor, v: Tensor):
        T = k.shape[2]
        mask = torch.ones(T, T, dtype=torch.bool, device=k.device).tril()
        if keys is not None:
            mask = mask & (keys[:, None, None, :] | torch.eye(T, dtype=torch.bool, device=k.device))
        return (*(shared if shared is not None else (k, v)), mask)

    return kv


class MoRCache:
    """Keys and values (slots, B, H, max_len, D) and which tokens each slot holds (slots, B, max_len):
    slot 0 the first layer, 1 the last, then one per (recursion, shared layer), recursion-wise (a
    recursion's slot holds only the tokens it ran), or, under `share_first`, the first recursion's
    only, which every recursion reads."""

    def __init__(self, cfg: MoRConfig, batch: int, max_len: int, loops: int, dtype, device) -> None:
        self.recursion_slots = loops if cfg.kv == "recursion" else 1
        slots = 2 + self.recursion_slots * cfg.n_shared
        self.k = torch.zeros(slots, batch, cfg.n_heads, max_len, cfg.head_dim, dtype=dtype, device=device)
        self.v = torch.zeros_like(self.k)
        self.held = torch.zeros(slots, batch, max_len, dtype=torch.bool, device=device)
        self.loops, self.n_shared, self.pos = loops, cfg.n_shared, 0

    def slot(self, r: int, j: int) -> int:
        return 2 + min(r, self.recursion_slots - 1) * self.n_shared + j

    def view(self, slot: int, chosen: Tensor | None = None, write: bool = True):
        """The attention of S new tokens at `pos` through `slot`: they write their keys and values (the
        rows `chosen` (B, S) marks as held) and read every held position up to themselves."""

        def kv(k: Tensor, v: Tensor):
            S, end = k.shape[2], self.pos + k.shape[2]
            if write:
                self.k[slot, :, :, self.pos : end], self.v[slot, :, :, self.pos : end] = k, v
                self.held[slot, :, self.pos : end] = True if chosen is None else chosen
            causal = torch.ones(S, end, dtype=torch.bool, device=k.device).tril(self.pos)
            itself = torch.zeros_like(causal)
            itself[:, self.pos : end] = torch.eye(S, dtype=torch.bool, device=k.device)
            mask = causal & (self.held[slot, :, None, None, :end] | itself)
            return self.k[slot, :, :, :end], self.v[slot, :, :, :end], mask

        return kv

    def fake_fill(self, n: int) -> None:
        """Pretend `n` tokens are cached (the decode benchmark's context): the position only."""
        self.pos = n

    def nbytes(self) -> int:
        return self.k.nbytes + self.v.nbytes + self.held.nbytes


@dataclass
class Routed:
    """A forward's result: logits, the recursion depth of every token (B, T) and the router's loss."""

    logits: Tensor
    depths: Tensor
    router_loss: Tensor


@dataclass
class MoROutput:
    """`training_loss`'s result: the loss, the logits, the cross-entropy part and the mean per-token
    recursion depth (the train job logs the last two as train_task_loss and gate_expected_rounds)."""

    loss: Tensor
    logits: Tensor
    task_loss: Tensor
    expected_rounds: Tensor


class MoRLM(CachedDecode, nn.Module):
    def __init__(self, cfg: MoRConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d = cfg.d_model
        self.embed = nn.Embedding(cfg.vocab_size, d)
        self.first, self.last = Layer(cfg), Layer(cfg)
        self.shared = nn.ModuleList(Layer(cfg) for _ in range(cfg.n_shared))
        n_routers = cfg.max_recursions if cfg.router == "expert" else 1
        width = 1 if cfg.router == "expert" else cfg.max_recursions
        self.routers = nn.ModuleList(nn.Linear(d, width, bias=False) for _ in range(n_routers))
        self.norm = RMSNorm(d, cfg.norm_eps)
        self.head = nn.Linear(d, cfg.vocab_size, bias=False)
        for p in self.parameters():
            if p.ndim == 2 and not p.is_meta:
                nn.init.normal_(p, std=0.02)

    def _select(self, h: Tensor, r: int, loops: int, active: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Expert choice before recursion r: (selected (B, T) bool, weight (B, T), auxiliary loss)."""
        score = self.routers[min(r, len(self.routers) - 1)](h).squeeze(-1).float()
        s = torch.sigmoid(score)
        if r == 0:  # the schedule's first share is 1: every token runs the first recursion
            chosen, aux = active, F.binary_cross_entropy_with_logits(score, torch.ones_like(score))
        elif self.training:
            k = max(1, math.ceil((loops - r) / loops * h.shape[1]))
            top = score.masked_fill(~active, float("-inf")).topk(k, dim=-1).indices
            chosen = torch.zeros_like(active).scatter(1, top, True) & active
            aux = F.binary_cross_entropy_with_logits(score, chosen.float())
        else:
            chosen, aux = active & (s > 0.5), score.new_zeros(())
        return chosen, s, aux

    def routed(self, idx: Tensor, loops: int, cache: MoRCache | None = None) -> Routed:
        """The forward with its routing (module docstring): logits, depths and the router's loss;
        through `cache` from its position (evaluation only: its routing is then token by token)."""
        cfg, T = self.cfg, idx.shape[1]
        start = 0 if cache is None else cache.pos
        positions = torch.arange(start, start + T, device=idx.device)
        rot = rope_tables(positions, cfg.head_dim, cfg.rope_base, self.embed.weight.dtype)
        h, _ = self.first(self.embed(idx), rot, sequence_kv() if cache is None else cache.view(0))
        depths = torch.zeros(idx.shape, dtype=torch.long, device=idx.device)
        if cfg.router == "token":
            probs = torch.softmax(self.routers[0](h).float()[..., :loops], -1)  # (B, T, loops)
            weight, pick = probs.max(-1)
            target = pick + 1  # each token's depth
            n = probs.shape[-1]  # the depths it can assign: min(loops, max_recursions)
            share = F.one_hot(pick, n).float().mean((0, 1))
            router_loss = cfg.balance_coef * n * (share * probs.mean((0, 1))).sum()
        else:
            active, router_loss = torch.ones(idx.shape, dtype=torch.bool, device=idx.device), h.new_zeros(())
        first_kv: dict[int, tuple] = {}
        for r in range(loops):
            if cfg.router == "token":
                chosen, w = target > r, torch.where(target == r + 1, weight, torch.ones_like(weight))
            else:
                chosen, w, aux = self._select(h, r, loops, active)
                active, router_loss = chosen, router_loss + cfg.aux_coef * aux
            x = h
            for j, layer in enumerate(self.shared):
                x, own = layer(x, rot, self._kv(r, j, chosen, first_kv.get(j), cache))
                first_kv.setdefault(j, own)  # the first recursion's, which share_first reads
            # the public code's weighted gating: the block's output (its residual included) scaled by
            # the router weight and added to the token's state (a scatter-add there)
            h = torch.where(chosen[..., None], h + w.unsqueeze(-1).to(h.dtype) * x, h)
            depths = depths + chosen.long()
        h, _ = self.last(h, rot, sequence_kv() if cache is None else cache.view(1))
        return Routed(self.head(self.norm(h)).float(), depths, router_loss)

    def _kv(self, r: int, j: int, chosen: Tensor, first: tuple | None, cache: MoRCache | None):
        """Recursion r's attention at shared layer j: the tokens it runs (recursion-wise), or, past the
        first recursion under `share_first`, the first recursion's keys and values of every token."""
        sharing = self.cfg.kv == "share_first" and r > 0
        if cache is None:
            return sequence_kv(None, first) if sharing else sequence_kv(chosen)
        return (
            cache.view(cache.slot(r, j), None, write=False)
            if sharing
            else cache.view(cache.slot(r, j), chosen)
        )

    # ---- the contract -----------------------------------------------------------------------------

    def forward(self, idx: Tensor, loops: int = 3) -> Tensor:
        """Logits (B, T, V) with at most `loops` recursions per token."""
        return self.routed(idx, loops).logits

    def training_loss(self, idx: Tensor, targets: Tensor, loops: int) -> MoROutput:
        """Cross-entropy plus the router's loss (auxiliary or balancing, by `router`)."""
        out = self.routed(idx, loops)
        ce = F.cross_entropy(
            out.logits.reshape(-1, out.logits.shape[-1]), targets.reshape(-1), ignore_index=-1
        )
        return MoROutput(ce + out.router_loss, out.logits, ce.detach(), out.depths.float().mean())

    @torch.no_grad()
    def token_depths(self, idx: Tensor, loops: int) -> Tensor:
        """(B, T) the recursions each token ran at `loops`  (1..loops: every token runs the first)."""
        return self.routed(idx, loops).depths

    # ---- the KV cache: recursion-wise, or the first recursion's shared -------------------------------

    def kv_cache_bytes(self, batch: int, max_len: int, loops: int | None = None, dtype=None) -> int:
        """The bytes of `setup_cache(batch, max_len, loops=...)`: keys and values of 2 + recursion slots x
        n_shared layers (one recursion slot under share_first), and the held-token mask (a byte each)."""
        c = self.cfg
        item = torch.empty((), dtype=dtype or self.embed.weight.dtype).element_size()
        slots = 2 + (loops or c.max_recursions if c.kv == "recursion" else 1) * c.n_shared
        return slots * batch * max_len * (2 * c.d_model * item + 1)

    def setup_cache(self, batch: int, max_len: int, dtype=None, device=None, loops: int | None = None,
                    **_) -> MoRCache:  # fmt: skip
        """A cache for `batch` sequences of up to `max_len` tokens decoded with at most `loops`
        recursions (`max_recursions` by default), under the model's `kv`."""
        w = self.embed.weight
        return MoRCache(
            self.cfg, batch, max_len, loops or self.cfg.max_recursions, dtype or w.dtype, device or w.device
        )

    def _cached(self, idx: Tensor, cache: MoRCache) -> Tensor:
        logits = self.routed(idx, cache.loops, cache).logits
        cache.pos += idx.shape[1]
        return logits

    def param_split(self) -> dict[str, list[nn.Parameter]]:
        once = [*self.first.parameters(), *self.last.parameters(), *self.norm.parameters()]
        recurrent = [*self.shared.parameters(), *self.routers.parameters()]
        return {"once": once, "recurrent": recurrent, "embedding": [self.embed.weight, self.head.weight]}
