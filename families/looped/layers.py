"""Building blocks: RMSNorm, RoPE, the MLP, causal self-attention with value embeddings, the block.

A block is applied with the settings of one round (`RoundSettings`): a narrow round (width < 1) uses
the first `heads` of the heads and the first `hidden` MLP units of the same weights (so it adds no
parameters); an MLP-only round skips attention. *Where* keys/values go and come from (plain sequence,
KV cache, round 1's keys for reuse) is the job of the `ctx` object passed in (see `model.contexts`).

Numerics follow the public Parcae code: RMSNorm eps 1e-5 on every normalisation with a weight; the
qk-norm is `F.rms_norm` without eps (PyTorch's default, a machine epsilon); ReLU^2 is 0.5 * relu(x)^2.
Initialisation: see `model.init`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from looplab.families.looped.loop_design import LayerCondition
from looplab.model.config import VE_GATE_CHANNELS, ModelConfig, RoundSettings
from looplab.model.init import scaled_orthogonal_, small_init_std, torch_default_linear_
from looplab.model.kv_cache import LayerKey

NORM_EPS = 1e-5  # block norms, the prelude-output norm and the final norm, as the reference


def rms_norm(x: Tensor, eps: float = NORM_EPS) -> Tensor:
    """Parameter-free RMS norm over the last dim, computed in fp32."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def qk_norm(x: Tensor) -> Tensor:
    """The query/key norm: `F.rms_norm` with no eps, called exactly as the reference calls it. PyTorch
    then uses a machine epsilon (fp32's, 1.2e-7, for fp32 and bf16 inputs alike in torch 2.13)."""
    return F.rms_norm(x, (x.shape[-1],))


class RMSNorm(nn.Module):
    """RMSNorm with a learnable weight, computed in fp32 (bf16 squares lose too much)."""

    def __init__(self, d: int, eps: float = NORM_EPS) -> None:
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
    """x (B, T, H, D); cos/sin (T, D/2). Rotates the two halves of the head dim (GPT-NeoX style).

    The reference rotates neighbouring channels (2i, 2i+1) instead; the two are the same function up to
    a fixed permutation of the rows of the q and k weights (channel i of the first half and channel i of
    the second half here are channels 2i and 2i+1 there), and the qk-norm and the dot product do not see
    the order of channels. A reference checkpoint loads by permuting those rows."""
    d = x.shape[-1] // 2
    x1, x2 = x[..., :d].float(), x[..., d:].float()
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat([x1 * c - x2 * s, x1 * s + x2 * c], dim=-1).to(x.dtype)


class MLP(nn.Module):
    """d -> 4d -> d with 0.5 * ReLU^2, no biases. `hidden` < 4d uses the first units only (narrow round)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(cfg.d_model, cfg.mlp_hidden, bias=False)
        self.proj = nn.Linear(cfg.mlp_hidden, cfg.d_model, bias=False)

    def forward(self, x: Tensor, hidden: int) -> Tensor:
        h = 0.5 * F.relu(F.linear(x, self.fc.weight[:hidden])).square()  # (B, T, hidden)
        return F.linear(h, self.proj.weight[:, :hidden])


class Attention(nn.Module):
    """Multi-head causal self-attention (no GQA) with RoPE + QK RMS norm and optional value embeddings."""

    def __init__(self, cfg: ModelConfig, value_embed: bool) -> None:
        super().__init__()
        d, self.head_dim = cfg.d_model, cfg.head_dim
        self.q = nn.Linear(d, d, bias=False)
        self.k = nn.Linear(d, d, bias=False)
        self.v = nn.Linear(d, d, bias=False)
        self.o = nn.Linear(d, d, bias=False)
        self.gate_ch = min(VE_GATE_CHANNELS, d)
        # value embedding: a vocab x d table added to V through a per-head gate in (0, 2)
        self.ve = nn.Embedding(cfg.vocab_size, d) if value_embed else None
        self.ve_gate = nn.Linear(self.gate_ch, cfg.n_heads, bias=False) if value_embed else None

    def forward(self, x: Tensor, idx: Tensor, *, settings: RoundSettings, ctx, key: LayerKey) -> Tensor:
        """x (B, T, d), idx (B, T) token ids (for the value embedding) -> (B, T, d)."""
        B, T, _ = x.shape
        heads, D, rc = settings.heads, self.head_dim, settings.round
        q = F.linear(x, self.q.weight[: heads * D]).view(B, T, heads, D)
        q = qk_norm(apply_rope(q, ctx.cos, ctx.sin)).transpose(1, 2)  # (B, H, T, D)
        if rc.reuse_kv:
            y = ctx.attend_reused(q, key, rc.window)
        else:
            k = F.linear(x, self.k.weight[: heads * D]).view(B, T, heads, D)
            v = F.linear(x, self.v.weight[: heads * D]).view(B, T, heads, D)
            if self.ve is not None:
                gate = 2 * torch.sigmoid(
                    F.linear(x[..., : self.gate_ch], self.ve_gate.weight[:heads])
                )  # (B,T,H)
                v = v + (gate.unsqueeze(-1) * self.ve(idx).view(B, T, -1, D)[:, :, :heads]).to(v.dtype)
            k = qk_norm(apply_rope(k, ctx.cos, ctx.sin)).transpose(1, 2)  # (B, H, T, D)
            y = ctx.attend(q, k, v.transpose(1, 2), key, rc.window)
        y = y.transpose(1, 2).reshape(B, T, heads * D)
        return F.linear(y, self.o.weight[:, : heads * D])


UNCONDITIONED = LayerCondition()


def _modulate(x: Tensor, scale: Tensor | None, shift: Tensor | None) -> Tensor:
    """adaLN: x (B, T, d) * (1 + scale) + shift, scale and shift (d,); x itself when not conditioned."""
    if scale is None:
        return x
    return x * (1.0 + scale.to(x.dtype)) + shift.to(x.dtype)


def _gated(branch: Tensor, gate: Tensor | None) -> Tensor:
    """A residual branch (B, T, d) scaled by its 0-dim gate, or as it is when not gated."""
    return branch if gate is None else gate.to(branch.dtype) * branch


class Block(nn.Module):
    """Pre-norm transformer layer: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, cfg: ModelConfig, value_embed: bool) -> None:
        super().__init__()
        self.norm1 = RMSNorm(cfg.d_model)
        self.attn = Attention(cfg, value_embed)
        self.norm2 = RMSNorm(cfg.d_model)
        self.mlp = MLP(cfg)

    def forward(
        self, x: Tensor, idx: Tensor, *, settings: RoundSettings, ctx, key: LayerKey, cond=None
    ) -> Tensor:
        """x (B, T, d) -> (B, T, d) with `settings` of the round; `key` names this application.
        `cond`: a `families.looped.loop_design.LayerCondition` (per-round gates on the branches and/or scale and
        shift of the pre-norms, for timestep conditioning) or None."""
        cond = cond or UNCONDITIONED  # every part None: _modulate and _gated pass their input through
        if settings.round.attention:
            branch = self.attn(
                _modulate(self.norm1(x), cond.attn_scale, cond.attn_shift),
                idx,
                settings=settings,
                ctx=ctx,
                key=key,
            )
            x = x + _gated(branch, cond.attn_gate)
        branch = self.mlp(_modulate(self.norm2(x), cond.mlp_scale, cond.mlp_shift), settings.hidden)
        return x + _gated(branch, cond.mlp_gate)

    @torch.no_grad()
    def init_weights(self) -> None:
        """The reference's block init (see `model.init`): q, k, v, fc scaled orthogonal with entry RMS
        sqrt(2/(5d)); o and proj zero; norms one; value-embedding table N(0, 1) and gate PyTorch's
        nn.Linear default."""
        std = small_init_std(self.attn.q.weight.shape[1])
        for w in (self.attn.q.weight, self.attn.k.weight, self.attn.v.weight, self.mlp.fc.weight):
            scaled_orthogonal_(w, std)
        self.attn.o.weight.zero_()
        self.mlp.proj.weight.zero_()
        self.norm1.weight.fill_(1.0)
        self.norm2.weight.fill_(1.0)
        if self.attn.ve is not None:
            self.attn.ve.weight.normal_(0.0, 1.0)
            torch_default_linear_(self.attn.ve_gate.weight)
