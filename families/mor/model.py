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
loss loops · Σ_j f_j P_j spreads the tokens. A selected token's update is scaled by its router weight.

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
from looplab.model.family_parts import RMSNorm, rope_tables, rotate


class Layer(nn.Module):
    """A pre-norm layer whose attention takes a key mask and may reuse given keys and values."""

    def __init__(self, cfg: MoRConfig) -> None:
        super().__init__()
        d = cfg.d_model
        self.h, self.hd = cfg.n_heads, cfg.head_dim
        self.qkv, self.out = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
        self.up, self.down = nn.Linear(d, 2 * cfg.mlp, bias=False), nn.Linear(cfg.mlp, d, bias=False)
        self.n1, self.n2 = RMSNorm(d, cfg.norm_eps), RMSNorm(d, cfg.norm_eps)

    def forward(self, x: Tensor, rot, keys: Tensor | None = None, shared=None) -> tuple[Tensor, tuple]:
        """x (B, T, d); `keys` (B, T) bool: the tokens whose keys and values this recursion offers (each
        query also reads itself); `shared`: (K, V) to use instead of this layer's own."""
        B, T, d = x.shape
        q, k, v = (t.view(B, T, self.h, self.hd).transpose(1, 2) for t in self.qkv(self.n1(x)).split(d, -1))
        q, k = rotate(q, *rot), rotate(k, *rot)
        k, v = shared if shared is not None else (k, v)
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        if keys is not None:
            mask = mask & (keys[:, None, None, :] | torch.eye(T, dtype=torch.bool, device=x.device))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.out(y.transpose(1, 2).reshape(B, T, d))
        gate, up = self.up(self.n2(x)).chunk(2, -1)
        return x + self.down(F.silu(gate) * up), (k, v)


@dataclass
class Routed:
    """A forward's result: logits, the recursion depth of every token (B, T) and the router's loss."""

    logits: Tensor
    depths: Tensor
    router_loss: Tensor


@dataclass
class MoROutput:
    loss: Tensor
    logits: Tensor


class MoRLM(nn.Module):
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

    def routed(self, idx: Tensor, loops: int) -> Routed:
        """The forward with its routing (module docstring): logits, depths and the router's loss."""
        cfg, T = self.cfg, idx.shape[1]
        rot = rope_tables(
            torch.arange(T, device=idx.device), cfg.head_dim, cfg.rope_base, self.embed.weight.dtype
        )
        h, _ = self.first(self.embed(idx), rot)
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
                share = first_kv.get(j) if cfg.kv == "share_first" else None
                x, kv = layer(x, rot, None if share is not None else chosen, share)
                first_kv.setdefault(j, kv)
            update = w.unsqueeze(-1).to(h.dtype) * (x - h)
            h = torch.where(chosen[..., None], h + update, h)
            depths = depths + chosen.long()
        h, _ = self.last(h, rot)
        return Routed(self.head(self.norm(h)).float(), depths, router_loss)

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
        return MoROutput(ce + out.router_loss, out.logits)

    @torch.no_grad()
    def token_depths(self, idx: Tensor, loops: int) -> Tensor:
        """(B, T) the recursions each token ran at `loops`  (1..loops: every token runs the first)."""
        return self.routed(idx, loops).depths

    def param_split(self) -> dict[str, list[nn.Parameter]]:
        once = [*self.first.parameters(), *self.last.parameters(), *self.norm.parameters()]
        recurrent = [*self.shared.parameters(), *self.routers.parameters()]
        return {"once": once, "recurrent": recurrent, "embedding": [self.embed.weight, self.head.weight]}
