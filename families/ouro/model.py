"""An Ouro-style looped language model (Zhu et al., arXiv:2510.25741), written against looplab's
model contract (docs/own-model.md) from a reading of the public `modeling_ouro.py`:

    h_0 = embed(idx)
    h_t = norm(stack(h_{t-1}))          t = 1 .. loops     the whole decoder stack, looped
    y_t = head(h_t)                                         logits readable after every step
    λ_t = sigmoid(gate(h_t))                                the probability of stopping after step t

Every layer: x = x + n2(attn(n1(x))); x = x + n4(mlp(n3(x))) (RMSNorms on both sides of each
sublayer), causal attention with RoPE on half-split channels, a gated SiLU MLP. The exit
distribution is p(t) = λ_t ∏_{s<t}(1 − λ_s), the remaining mass at the last step.

Training (`training_loss`) is the paper's: stage I, `entropy`, minimises Σ_t p(t) L_t − β H(p) (the
entropy term is a KL to the uniform prior up to a constant); stage II, `gate_tuning`, freezes the
language model (its states are computed without gradient) and fits λ_t by binary cross-entropy to
stop where the next step's loss improvement I = max(0, L_t − L_{t+1}) is small: the continuation
label is σ(k (I − γ)).

KV cache (`OuroCache`): one slot per (loop, layer), as the public `UniversalTransformerCache` keeps
them. The exit path (`rope`, `readout`, `run_rounds` with a keep mask, `exit_gate`) lets the adaptive
job run exits in one forward: a stopped token keeps its state and offers later tokens, at every
layer, the keys and values of its last computed step (`looplab.model.family_parts.LastKV`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from looplab.families.ouro.config import OuroConfig
from looplab.model.exit_gate import exit_distribution, objective
from looplab.model.family_parts import CachedDecode, LastKV, RMSNorm, rope_tables, rotate


class OuroCache:
    """Keys and values (slots, B, H, max_len, D), slot = loop x n_layers + layer, and the position."""

    def __init__(self, cfg: OuroConfig, batch: int, max_len: int, loops: int, dtype, device) -> None:
        shape = (loops * cfg.n_layers, batch, cfg.n_heads, max_len, cfg.head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.loops, self.n_layers, self.pos, self.max_len = loops, cfg.n_layers, 0, max_len

    def attend(self, slot: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        end = self.pos + k.shape[2]
        self.k[slot, :, :, self.pos : end], self.v[slot, :, :, self.pos : end] = k, v
        return self.k[slot, :, :, :end], self.v[slot, :, :, :end]

    def fake_fill(self, n: int) -> None:
        """Pretend `n` tokens are cached (the decode benchmark's context): the position only."""
        self.pos = n

    def nbytes(self) -> int:
        return self.k.nbytes + self.v.nbytes


class HeldThroughCache:
    """A decode step's attention with per-token exits (`step_context`): a row that does not run this
    loop offers its last computed keys and values (`LastKV`), which are written to this loop's slots
    too (a slot per loop and layer, as the `full` cache of a row that ran every loop would hold the
    latest entry), so later tokens read what the parallel exit path gives them."""

    def __init__(self, cache: OuroCache, held: LastKV, t: int, n_layers: int) -> None:
        self.cache, self.held, self.t, self.n_layers = cache, held, t, n_layers

    def attend(self, slot: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        k, v = self.held.attend(slot, k, v)
        return self.cache.attend(self.t * self.n_layers + slot, k, v)


@dataclass
class StepContext:
    """The exit path's context of one decode step: its rotation, position and cache (`cache` and
    `held`, looplab's own slots, are None)."""

    cos: Tensor
    sin: Tensor
    positions: Tensor
    kv: OuroCache
    cache: None = None
    held: None = None


class Layer(nn.Module):
    def __init__(self, cfg: OuroConfig) -> None:
        super().__init__()
        d, eps = cfg.d_model, cfg.norm_eps
        self.h, self.hd = cfg.n_heads, cfg.head_dim
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(d, d, bias=False) for _ in range(4))
        self.gate_proj, self.up_proj = nn.Linear(d, cfg.mlp, bias=False), nn.Linear(d, cfg.mlp, bias=False)
        self.down_proj = nn.Linear(cfg.mlp, d, bias=False)
        self.norms = nn.ModuleList(RMSNorm(d, eps) for _ in range(4))  # attn in/out, mlp in/out

    def forward(self, x: Tensor, rot: tuple[Tensor, Tensor], kv=None, slot: int = 0) -> Tensor:
        B, S, _ = x.shape
        a = self.norms[0](x)
        q, k, v = (
            p(a).view(B, S, self.h, self.hd).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj)
        )
        q, k = rotate(q, *rot), rotate(k, *rot)
        if kv is not None:
            k, v = kv.attend(slot, k, v)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=S > 1)
        x = x + self.norms[1](self.o_proj(y.transpose(1, 2).reshape(B, S, -1)))
        m = self.norms[2](x)
        return x + self.norms[3](self.down_proj(F.silu(self.gate_proj(m)) * self.up_proj(m)))


@dataclass
class OuroOutput:
    """`training_loss`'s result: the loss to minimise, the last step's logits, the task part and the
    exit distribution's mean step (what the trainer reports of a learned exit)."""

    loss: Tensor
    logits: Tensor
    task_loss: Tensor
    expected_rounds: Tensor


class OuroLM(CachedDecode, nn.Module):
    def __init__(self, cfg: OuroConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.layers = nn.ModuleList(Layer(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.early_exit_gate = nn.Linear(cfg.d_model, 1)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        for name, p in self.named_parameters():
            if p.ndim == 2 and not p.is_meta:
                nn.init.normal_(p, std=0.02)
            elif name.endswith("gate.bias") and not p.is_meta:
                nn.init.zeros_(p)

    # ---- the parts of the forward -----------------------------------------------------------------

    def rope(self, n: int) -> tuple[Tensor, Tensor]:
        """cos, sin (n, head_dim) of positions 0..n-1 (the exit path's rotation)."""
        return self._rot(torch.arange(n, device=self.embed_tokens.weight.device))

    def _rot(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        dtype = self.embed_tokens.weight.dtype
        if positions.is_meta:  # priced on the meta device (model/family_pricing.py): the tables' shapes
            cos = torch.empty(len(positions), self.cfg.head_dim, dtype=dtype, device="meta")
            return cos, torch.empty_like(cos)
        return rope_tables(positions, self.cfg.head_dim, self.cfg.rope_base, dtype)

    def step(self, h: Tensor, rot, t: int = 0, kv=None) -> Tensor:
        """One loop (0-based `t`) of the whole stack, then the final norm: h_{t+1}."""
        for j, layer in enumerate(self.layers):
            h = layer(h, rot, kv, t * self.cfg.n_layers + j if isinstance(kv, OuroCache) else j)
        return self.norm(h)

    def readout(self, h: Tensor, idx: Tensor | None = None, ctx=None) -> Tensor:
        """Logits (B, T, V) of a step's state h (B, T, d): the head (the state is already normed)."""
        return self.lm_head(h).float()

    def exit_gate(self, h: Tensor, t: int) -> Tensor:
        """λ_t (B, T): the probability of stopping after step t, read from that step's state h."""
        return torch.sigmoid(self.early_exit_gate(h).squeeze(-1).float())

    # ---- the contract -----------------------------------------------------------------------------

    def forward(self, idx: Tensor, loops: int = 4) -> Tensor:
        """Logits (B, T, V) after `loops` steps (the public code's default: the last step's)."""
        rot = self._rot(torch.arange(idx.shape[1], device=idx.device))
        h = self.embed_tokens(idx)
        for t in range(loops):
            h = self.step(h, rot, t)
        return self.readout(h)

    def states(self, idx: Tensor, loops: int, skip_round: int | None = None) -> list[Tensor]:
        rot = self._rot(torch.arange(idx.shape[1], device=idx.device))
        states = [self.embed_tokens(idx)]
        for t in range(loops):
            states.append(states[-1] if t == skip_round else self.step(states[-1], rot, t))
        return states

    @torch.no_grad()
    def round_states(self, idx: Tensor, loops: int, skip_round: int | None = None) -> Tensor:
        """h_0 .. h_loops (loops + 1, B, T, d); step `skip_round` (0-based) is the identity."""
        return torch.stack(self.states(idx, loops, skip_round))

    def exit_probabilities(self, idx: Tensor, loops: int) -> Tensor:
        """The exit distribution p (loops, B, T) over steps 1..loops."""
        lam = torch.stack([self.exit_gate(h, t + 1) for t, h in enumerate(self.states(idx, loops)[1:])])
        return exit_distribution(lam)

    def training_loss(self, idx: Tensor, targets: Tensor, loops: int) -> OuroOutput:
        """The train job's objective at `loops` steps (the config's `objective`; module docstring)."""
        cfg = self.cfg
        tuning = cfg.objective == "gate_tuning"
        with torch.set_grad_enabled(torch.is_grad_enabled() and not tuning):
            states = self.states(idx, loops)[1:]
            logits = [self.readout(h) for h in states]
        lam = torch.stack([self.exit_gate(h.detach() if tuning else h, t + 1) for t, h in enumerate(states)])
        gate = objective("entropy", cfg.entropy_coef, lam, logits, targets, 0.0, 0.0)
        if not tuning:
            return OuroOutput(gate.total, logits[-1], gate.task, gate.expected_rounds)
        ce = torch.stack([F.cross_entropy(y.transpose(1, 2), targets, reduction="none") for y in logits])
        gain = (ce[:-1] - ce[1:]).clamp_min(0)  # (loops - 1, B, T): what the next step improves
        stop = 1 - torch.sigmoid(cfg.gate_k * (gain - cfg.gate_gamma))
        loss = F.binary_cross_entropy(lam[:-1], stop) if loops > 1 else lam.sum() * 0
        return OuroOutput(loss, logits[-1], ce[-1].mean(), gate.expected_rounds)

    def run_rounds(self, idx: Tensor, ctx, positions: Tensor, counts, h0_seed=None, skip_round=None,
                   observe=None, keep=None) -> Tensor:  # fmt: skip
        """The contract's exit path (docs/own-model.md): steps 1..max(counts) from the embedding, a row
        holding its state after its count, `observe` handed h_0 and every step's output, `keep()` asked
        before every step which tokens run it; a token that does not run keeps its state and its last
        keys and values (`looplab.model.family_parts.LastKV`). In a decode step's context (`step_context`)
        it attends through the cache (`HeldThroughCache`). No randomness: `h0_seed` is not read."""
        rot, held, kv = (ctx.cos, ctx.sin), LastKV(), getattr(ctx, "kv", None)
        h = self.embed_tokens(idx)
        ran = torch.as_tensor([counts] * idx.shape[0] if isinstance(counts, int) else counts).to(idx.device)
        if observe is not None:
            observe(h)
        for t in range(int(ran.max())):
            running = None if keep is None else keep()
            if running is False:
                break
            rows = (ran > t)[:, None, None]
            running = rows if running is None else running & rows
            held.running = running[:, None]
            attend = held if kv is None else HeldThroughCache(kv, held, t, self.cfg.n_layers)
            new = h if t == skip_round else self.step(h, rot, t, attend)
            h = torch.where(running, new, h)
            if observe is not None:
                observe(h)
        return h

    def flops_per_token(self, loops: int) -> float:
        """Training FLOPs per token at `loops` steps and the config's context: matmuls (2 per
        multiply-add) plus dense attention (4 d T per layer), the head and gate read at every step (the
        objective reads them all), forward + backward (3x)."""
        c = self.cfg
        layer = 2 * (4 * c.d_model**2 + 3 * c.d_model * c.mlp) + 4 * c.d_model * c.seq_len
        per_step = c.n_layers * layer + 2 * c.d_model * c.vocab_size + 2 * c.d_model
        return float(3 * loops * per_step)

    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        table = {id(self.embed_tokens.weight), id(self.lm_head.weight)}
        params = list(self.parameters())
        matrix = [p for p in params if p.ndim == 2 and id(p) not in table and p.shape[0] > 1]
        rest = {id(p) for p in matrix}
        return {"matrix": matrix, "other": [p for p in params if id(p) not in rest]}

    def param_split(self) -> dict[str, list[nn.Parameter]]:
        tables = [self.embed_tokens.weight] + ([] if self.cfg.tie_embeddings else [self.lm_head.weight])
        once = [*self.norm.parameters(), *self.early_exit_gate.parameters()]
        return {"once": once, "recurrent": list(self.layers.parameters()), "embedding": tables}

    # ---- the KV cache: a slot per (loop, layer) ---------------------------------------------------

    def kv_strategies(self) -> tuple[str, ...]:
        """One strategy, `full`: a slot per (loop, layer); an exited token's skipped slots hold its latest."""
        return ("full",)

    def step_context(self, cache: OuroCache) -> StepContext:
        """The exit path's context of one decode step at the cache's position (the caller advances it)."""
        positions = torch.tensor([cache.pos], device=self.embed_tokens.weight.device)
        return StepContext(*self._rot(positions), positions, cache)

    def kv_cache_bytes(self, batch: int, max_len: int, loops: int | None = None, strategy: str = "full",
                       dtype=None) -> int:  # fmt: skip
        c = self.cfg
        item = torch.empty((), dtype=dtype or self.embed_tokens.weight.dtype).element_size()
        return 2 * (loops or c.max_loops) * c.n_layers * batch * c.n_heads * max_len * c.head_dim * item

    def setup_cache(self, batch: int, max_len: int, dtype=None, device=None, loops: int | None = None,
                    **_) -> OuroCache:  # fmt: skip
        w = self.embed_tokens.weight
        return OuroCache(
            self.cfg, batch, max_len, loops or self.cfg.max_loops, dtype or w.dtype, device or w.device
        )

    def _cached(self, idx: Tensor, cache: OuroCache) -> Tensor:
        rot = self._rot(torch.arange(cache.pos, cache.pos + idx.shape[1], device=idx.device))
        h = self.embed_tokens(idx)
        for t in range(cache.loops):
            h = self.step(h, rot, t, cache)
        cache.pos += idx.shape[1]
        return self.readout(h)
