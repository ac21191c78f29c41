"""Building blocks: RMSNorm, RoPE, the MLP, causal self-attention with value embeddings, the block.

A block is applied with the settings of one round (`RoundConfig`): a narrow round (width < 1) uses the
first `width * n_heads` heads and the first `width * 4d` MLP units of the same weights (so it adds no
parameters); an MLP-only round skips attention. *Where* keys/values go and come from (plain sequence,
KV cache, round 1's keys for reuse) is the job of the `ctx` object passed in (see `model.looped`).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from model.config import ModelConfig, RoundConfig

VE_GATE_CHANNELS = 32  # the value-embedding gate reads the first 32 channels of the block input


def rms_norm(x: Tensor, eps: float = 1e-6) -> Tensor:
    """Parameter-free RMS norm over the last dim, computed in fp32."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


class RMSNorm(nn.Module):
    """RMSNorm with a learnable weight, computed in fp32 (bf16 squares lose too much)."""

    def __init__(self, d: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: Tensor) -> Tensor:
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight.float()
        return y.to(x.dtype)


def rope_tables(n: int, head_dim: int, base: float, device=None) -> tuple[Tensor, Tensor]:
    """cos, sin of shape (n, head_dim/2) for positions 0..n-1 (fp32)."""
    inv = 1.0 / (base ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    ang = torch.arange(n, device=device, dtype=torch.float32)[:, None] * inv[None, :]
    return ang.cos(), ang.sin()


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x (B, T, H, D); cos/sin (T, D/2). Rotates the two halves of the head dim (GPT-NeoX style)."""
    d = x.shape[-1] // 2
    x1, x2 = x[..., :d].float(), x[..., d:].float()
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat([x1 * c - x2 * s, x1 * s + x2 * c], dim=-1).to(x.dtype)


class MLP(nn.Module):
    """d -> 4d -> d with ReLU^2, no biases. `hidden` < 4d uses the first units only (narrow round)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(cfg.d_model, cfg.mlp_hidden, bias=False)
        self.proj = nn.Linear(cfg.mlp_hidden, cfg.d_model, bias=False)

    def forward(self, x: Tensor, hidden: int) -> Tensor:
        h = F.relu(F.linear(x, self.fc.weight[:hidden])).square()  # (B, T, hidden)
        return F.linear(h, self.proj.weight[:, :hidden])


class Attention(nn.Module):
    """Multi-head causal self-attention (no GQA) with RoPE + QK RMS norm and optional value embeddings."""

    def __init__(self, cfg: ModelConfig, value_embed: bool) -> None:
        super().__init__()
        d, self.D = cfg.d_model, cfg.head_dim
        self.q = nn.Linear(d, d, bias=False)
        self.k = nn.Linear(d, d, bias=False)
        self.v = nn.Linear(d, d, bias=False)
        self.o = nn.Linear(d, d, bias=False)
        self.gate_ch = min(VE_GATE_CHANNELS, d)
        # value embedding: a vocab x d table added to V through a per-head sigmoid gate
        self.ve = nn.Embedding(cfg.vocab_size, d) if value_embed else None
        self.ve_gate = nn.Linear(self.gate_ch, cfg.n_heads, bias=False) if value_embed else None

    def forward(self, x: Tensor, idx: Tensor, rc: RoundConfig, heads: int, ctx, key: tuple) -> Tensor:
        B, T, _ = x.shape
        H, D = heads, self.D
        q = F.linear(x, self.q.weight[: H * D]).view(B, T, H, D)
        q = rms_norm(apply_rope(q, ctx.cos, ctx.sin)).transpose(1, 2)  # (B, H, T, D)
        if rc.reuse_kv:
            y = ctx.attend_reused(q, key, rc.window)
        else:
            k = F.linear(x, self.k.weight[: H * D]).view(B, T, H, D)
            v = F.linear(x, self.v.weight[: H * D]).view(B, T, H, D)
            if self.ve is not None:
                gate = 2 * torch.sigmoid(F.linear(x[..., : self.gate_ch], self.ve_gate.weight[:H]))  # (B,T,H)
                v = v + (gate.unsqueeze(-1) * self.ve(idx).view(B, T, -1, D)[:, :, :H]).to(v.dtype)
            k = rms_norm(apply_rope(k, ctx.cos, ctx.sin)).transpose(1, 2)  # (B, H, T, D)
            y = ctx.attend(q, k, v.transpose(1, 2), key, rc.window)
        y = y.transpose(1, 2).reshape(B, T, H * D)
        return F.linear(y, self.o.weight[:, : H * D])


class Block(nn.Module):
    """Pre-norm transformer layer: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, cfg: ModelConfig, value_embed: bool) -> None:
        super().__init__()
        self.norm1 = RMSNorm(cfg.d_model)
        self.attn = Attention(cfg, value_embed)
        self.norm2 = RMSNorm(cfg.d_model)
        self.mlp = MLP(cfg)

    def forward(
        self, x: Tensor, idx: Tensor, rc: RoundConfig, heads: int, hidden: int, ctx, key: tuple
    ) -> Tensor:
        if rc.attention:
            x = x + self.attn(self.norm1(x), idx, rc, heads, ctx, key)
        return x + self.mlp(self.norm2(x), hidden)

    @torch.no_grad()
    def init_weights(self, std_emb: float = 0.02) -> None:
        """Uniform(-a, a) with std 1/sqrt(d) for input projections; output projections at zero."""
        d = self.attn.q.weight.shape[1]
        a = math.sqrt(3.0 / d)
        for w in (self.attn.q.weight, self.attn.k.weight, self.attn.v.weight, self.mlp.fc.weight):
            w.uniform_(-a, a)
        self.attn.o.weight.zero_()
        self.mlp.proj.weight.zero_()
        self.norm1.weight.fill_(1.0)
        self.norm2.weight.fill_(1.0)
        if self.attn.ve is not None:
            self.attn.ve.weight.normal_(0.0, std_emb)
            self.attn.ve_gate.weight.zero_()  # gate = 2*sigmoid(0) = 1 at init
