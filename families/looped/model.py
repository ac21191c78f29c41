"""The looped language model: prelude -> injection -> recurrent block x T -> readout -> coda -> head.

    e   = prelude(embed(idx))                         run once
    e'  = RMSNorm(e)   (learnable weight)             the prelude-output norm
    Be  = B e'                                        B dense, identity at init
    h0  ~ truncated normal, std sqrt(2/(5 d))         fresh per forward, or from a seed (see below)
    h_t = R( exp(-dt*A) * h_{t-1} + dt * Be )         R = the recurrent layers, settings of round t
    y   = head(norm(coda(C h_T)))                     C dense readout, scaled orthogonal at init; tied head

This is the function of the public Parcae code (see `model.init` for its initialisation, parameter by
parameter, and `families.looped.layers` for its norms). `injection="none"` instead runs h_1 = R(e),
h_t = R(h_{t-1}), with no prelude-output norm, B, C or h0: the plain transformer.

Loop-design variants (`model.config` has the formulas, `families.looped.loop_design` the parameters): the
"scalar" / "channel" / "dense" injections start from h_0 = e and add a e / W e (computed once, in the
stem) to every round's input; `history` adds the last w state differences, which the loop carries
along with h (newest first; a sample held still adds a zero difference); `timestep` hands each round
its own parameters (`_timestep_tensors`; rounds past the trained ones reuse the last trained round's).

Loop counts: `loops` is an int for the whole batch, or per-sequence counts (B,) as a list of ints or
a CPU tensor. A batch with mixed counts runs max(count) rounds and holds each sample's state still
outside its own rounds, so every sample's output equals its solo run (rounds never mix samples).
Truncated backprop: when grad is enabled, a sample with n rounds gets gradient through its last
min(n, grad_rounds) rounds only; rounds that no sample needs gradient for run under `torch.no_grad()`
(no activations kept). See `model.rounds` for how the rounds of a mixed batch are scheduled.

h0 and seeds: `h0_seed=None` draws fresh from the global RNG, shape (B, T, d). Training passes a
`model.init.RowKey` (seed, step, global rows): each row's h0 is a pure function of (seed, step, global
row, position, channel), so splitting a step into micro-batches, reordering or sharding its rows
leaves every row's h0 as it was (a run whose checkpoint predates it passes its step's global-RNG draw
as a (B, T, d) tensor instead). An int seed gives a *deterministic function of (seed, position,
channel)* (a counter-based hash, no generator state), identical for every row of the batch, on any
device. That is what makes
token-by-token decoding (which needs h0 at position p only) equal the full forward at every position,
and a sample's result independent of the batch it runs in. A `torch.Generator` draws (B, T, d) from it
(reproducible, but decoding cannot reproduce it: decode with an int seed).

Compiling: `compile_parts(**torch_compile_kwargs)` returns a `CompiledLM`, called like the model. The
round loop (loop counts, which rounds get gradient, the per-sample masks, h0) stays in Python; three
static-shape parts are compiled: the stem (embedding, prelude, injection inputs), one round of the
recurrent block, and the tail (readout, coda, head, loss). A round compiles once per distinct round
setting (and autograd variant), never per round index or loop count, so the number of graphs does not
depend on the loop counts. Attention masks are built before the parts run, outside compiled code.

Decoding: `setup_cache` -> `prefill(idx, cache)` -> `decode_step(tokens, cache)` per token. The cache
and the attention contexts live in `model.kv_cache` / `model.contexts`; `families.looped.decode` (generation,
CUDA-graph capture) builds on this module and is never imported by it; `capture_decode_graph` offers
the capture (`model.decode_graph`) as a method, so a job reaches it through the model it holds.

Learned exit (`cfg.exit_gate`, `model.exit_gate`): a gate after every round gives the probability of
stopping there (`exit_gate(h, t)`). A training forward (module in train mode, targets given) then runs
the R rounds, reads every round out through the tail part (the readout path of the depth sweep and the
exit rules), and returns the gate's objective as `loss`, its task part as `task_loss` and the expected
exit round as `expected_rounds`; evaluation forwards are those of the model at its loop count. The
gate's parameters come from a generator of their own, so with the gate off nothing here changes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from looplab.families.looped.layers import Block, RMSNorm, rope_tables
from looplab.families.looped.loop_design import (
    HistoryMaps,
    InputInjection,
    TimestepConditioning,
    layer_conditions,
)
from looplab.model.attention import prepare_masks
from looplab.model.config import ModelConfig
from looplab.model.contexts import SeqContext, StepContext
from looplab.model.decode_graph import capture_decode_graph
from looplab.model.exit_gate import ExitGate, objective
from looplab.model.init import draw_h0, scaled_orthogonal_, small_init_std
from looplab.model.kv_cache import KVCache, LayerKey
from looplab.model.output import LMOutput  # the contract's output type, re-exported here
from looplab.model.rounds import loop_counts, plan_rounds


class SeqParts(NamedTuple):
    """The three static-shape parts of a forward over whole sequences, plain or compiled."""

    stem: Callable  # (idx, cos, sin) -> (x, decay | None, drive | None)
    # (h, decay, drive, past, timestep, idx, cos, sin, round1_kv, settings round) -> (h', round1_kv)
    round: Callable
    tail: Callable  # (h, idx, cos, sin, targets | None) -> (logits, loss | None)


class CompiledLM:
    """A `LoopedLM` whose forward runs through compiled parts (see `LoopedLM.compile_parts`): called
    like the model's forward, same parameters, same results (up to the compiler's rounding)."""

    def __init__(self, model: LoopedLM, parts: SeqParts) -> None:
        self.model, self.parts = model, parts

    def __call__(self, idx: Tensor, *args: Any, **kwargs: Any) -> LMOutput:
        """The arguments of `LoopedLM.forward`: idx (B, T), then targets, loops, h0_seed."""
        windows = {rc.window for rc in self.model.cfg.rounds if rc.attention}
        for window in windows:  # built here, not inside a compiled part (where a miss breaks the graph)
            prepare_masks(idx.shape[1], window, idx.device)
        return self.model.forward_parts(self.parts, idx, *args, **kwargs)


class LoopedLM(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d, ve = cfg.d_model, set(cfg.value_embed_layers())
        self.wte = nn.Embedding(cfg.vocab_size, d)
        layer_ids = iter(range(cfg.n_layers))
        self.prelude = nn.ModuleList(Block(cfg, next(layer_ids) in ve) for _ in range(cfg.n_prelude))
        self.recurrent = nn.ModuleList(Block(cfg, next(layer_ids) in ve) for _ in range(cfg.n_recurrent))
        self.coda = nn.ModuleList(Block(cfg, next(layer_ids) in ve) for _ in range(cfg.n_coda))
        if cfg.injection == "diagonal":
            self.prelude_norm = RMSNorm(d)  # on e before the injection
            self.A_log = nn.Parameter(torch.zeros(d))
            self.dt_bias = nn.Parameter(torch.zeros(d))
            self.B = nn.Parameter(torch.empty(d, d))
            self.C = nn.Parameter(torch.empty(d, d))
        # the loop-design parameters (families.looped.loop_design), each only when its variant is on
        self.input_injection = (
            InputInjection(cfg) if cfg.injection in ("scalar", "channel", "dense") else None
        )
        self.history = HistoryMaps(cfg) if cfg.history else None
        self.timestep = TimestepConditioning(cfg) if cfg.timestep != "none" else None
        self.norm_f = RMSNorm(d)
        self.lm_head = None if cfg.tie_embeddings else nn.Linear(d, cfg.vocab_size, bias=False)
        # RoPE tables live outside the module's buffers so `model.to(bfloat16)` cannot round them
        self._rope_tables: tuple[Tensor, Tensor] | None = None
        self.init_weights()
        # the learned exit, last: its parameters come from its own generator (model.exit_gate), so the
        # rest of the model draws what it drew without a gate
        self.gate = ExitGate(d, cfg.loops) if cfg.exit_gate != "none" else None

    # ---- initialisation & parameter bookkeeping -------------------------------------------------

    @torch.no_grad()
    def init_weights(self) -> None:
        """The reference initialisation; every parameter's rule is listed in `model.init`."""
        std = small_init_std(self.cfg.d_model)
        scaled_orthogonal_(self.wte.weight, std)
        for blk in self.blocks():
            blk.init_weights()
        self.norm_f.weight.fill_(1.0)
        if self.lm_head is not None:
            scaled_orthogonal_(self.lm_head.weight, std)
        if self.cfg.injection == "diagonal":
            self.prelude_norm.weight.fill_(1.0)
            dt = -math.log(self.cfg.init_decay)  # exp(-dt * A) = init_decay with A = exp(0) = 1
            self.A_log.zero_()
            self.dt_bias.fill_(math.log(math.expm1(dt)))  # softplus^-1(dt)
            self.B.copy_(torch.eye(self.cfg.d_model))
            scaled_orthogonal_(self.C, std)
        for part in (self.input_injection, self.history, self.timestep, getattr(self, "gate", None)):
            if part is not None:
                part.init_weights()

    def blocks(self) -> list[Block]:
        return [*self.prelude, *self.recurrent, *self.coda]

    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        """ "matrix": the 2-D attention/MLP weights q, k, v, o, fc, proj; "ve_gate": the value-embedding
        gate weights (the reference optimises them with the matrices); "other": embeddings, norms,
        injection (A_log, dt_bias, B, C, or the scalar/channel/dense injection's weight), the history
        maps, the timestep parameters, the exit gate and an untied head. Together: every parameter
        exactly once."""
        matrix, gates = [], []
        for blk in self.blocks():
            matrix += [blk.attn.q.weight, blk.attn.k.weight, blk.attn.v.weight, blk.attn.o.weight]
            matrix += [blk.mlp.fc.weight, blk.mlp.proj.weight]
            if blk.attn.ve_gate is not None:
                gates.append(blk.attn.ve_gate.weight)
        grouped = {id(p) for p in matrix + gates}
        other = [p for p in self.parameters() if id(p) not in grouped]
        return {"matrix": matrix, "ve_gate": gates, "other": other}

    def embedding_params(self) -> list[nn.Parameter]:
        """Vocabulary-sized tables: token embedding, value embeddings, untied head."""
        out = [self.wte.weight] + [b.attn.ve.weight for b in self.blocks() if b.attn.ve is not None]
        return out + ([self.lm_head.weight] if self.lm_head is not None else [])

    # ---- helpers --------------------------------------------------------------------------------

    def rope(self, n: int) -> tuple[Tensor, Tensor]:
        """fp32 cos, sin (n, head_dim/2) for positions 0..n-1, (re)built when too short or on another device.
        Public for the exit path (`model.exits`), which builds its own attention contexts."""
        dev, tables = self.wte.weight.device, self._rope_tables
        if tables is None or tables[0].shape[0] < n or tables[0].device != dev:
            tables = rope_tables(max(n, self.cfg.seq_len), self.cfg.head_dim, self.cfg.rope_base, device=dev)
            self._rope_tables = tables
        return tables[0][:n], tables[1][:n]

    def _final(self, x: Tensor) -> Tensor:
        """Final norm + head -> fp32 logits."""
        w = self.wte.weight if self.lm_head is None else self.lm_head.weight
        return F.linear(self.norm_f(x), w).float()

    def _h0(self, batch: int, positions: Tensor, h0_seed, like: Tensor) -> Tensor:
        return draw_h0(batch, positions, self.cfg.d_model, self.cfg.initial_state_std, h0_seed, like)

    def _timestep_tensors(self, g: int) -> tuple[Tensor, ...]:
        """Round g's (0-based) timestep parameters, () without timestep: plain tensors, so the round
        part never sees the round index (one compiled graph for every round of one setting)."""
        if self.timestep is None:
            return ()
        return self.timestep.round_tensors(self.cfg.timestep_index(g))

    def sample_loops(self, batch_size: int, step: int, seed: int = 0) -> Tensor:
        """Training loop counts (B,) int64 on CPU: a pure function of (seed, step) per the sampler.
        Pass it to `forward` as it is (on the CPU): the counts are read on the host, with no sync."""
        cfg = self.cfg
        if cfg.loop_sampler == "fixed":
            return torch.full((batch_size,), cfg.loops, dtype=torch.long)
        g = torch.Generator().manual_seed((seed * 1_000_003 + step) & 0x7FFFFFFFFFFFFFFF)
        n = batch_size if cfg.loop_sampler == "poisson_seq" else 1
        counts = torch.poisson(torch.full((n,), float(cfg.loops)), generator=g).long().clamp_min(1)
        return counts.expand(batch_size).clone()

    def exit_gate(self, h: Tensor, t: int) -> Tensor:
        """λ_t (B, T) fp32: the probability of stopping after round t (1-based), read from that round's
        state h (B, T, d): the contract's exit-gate capability (model/contract/). A model without a
        gate (`cfg.exit_gate` none) has none: ValueError."""
        if self.gate is None:
            raise ValueError("exit_gate: this model was built without an exit gate (exit_gate: none)")
        return self.gate(h, t)

    # ---- forward --------------------------------------------------------------------------------

    def forward(self, idx: Tensor, targets: Tensor | None = None, loops=None, h0_seed=None) -> LMOutput:
        """idx (B, T) -> logits (B, T, V). loops: None (cfg.loops), an int, or per-sequence counts as a
        list or CPU tensor (a device tensor costs one host sync per forward to read it)."""
        parts = SeqParts(self._stem_part, self._round_part, self._tail_part)
        return self.forward_parts(parts, idx, targets, loops, h0_seed)

    def compile_parts(self, **compile_kwargs) -> CompiledLM:
        """This model with the static-shape parts of its forward compiled, called like the model.

        `torch.compile(model)` would trace the round loop, whose length and gradient pattern change
        between training steps: the compiler either turns the round count into a symbol (and fails on
        `set_grad_enabled`) or recompiles per loop count until its limit, then runs uncompiled. Here
        the loop stays in Python and three parts are compiled (`dynamic=False` unless overridden):
        the stem (embedding, prelude, injection inputs), one round of the recurrent block, and the
        tail (readout, coda, final norm, head, loss). A round is compiled once per distinct round
        setting (see `settings_round`) and autograd variant (no_grad; grad from a state with or
        without gradient), never per round index or loop count: at most 2 + 3 x settings graphs.
        Parameters are shared with this model (graphs read the current weights; copies of the model
        reuse the graphs); the model itself is left uncompiled."""
        kwargs = {"dynamic": False, **compile_kwargs}
        parts = SeqParts(
            *(torch.compile(part, **kwargs) for part in (self._stem_part, self._round_part, self._tail_part))
        )
        return CompiledLM(self, parts)

    def settings_round(self, r: int) -> int:
        """The first round that runs with round r's settings: rounds with equal settings share one
        compiled graph of the round part (the round index only picks the settings)."""
        settings = self.cfg.round_settings(r)
        return next(i for i in range(r + 1) if self.cfg.round_settings(i) == settings)

    @property
    def reuses_kv(self) -> bool:
        return any(rc.reuse_kv for rc in self.cfg.rounds)

    def forward_parts(self, parts: SeqParts, idx: Tensor, targets=None, loops=None, h0_seed=None) -> LMOutput:
        """`forward` through `parts`: the model's own (plain) or `compile_parts`' (compiled), which is
        how `CompiledLM` runs. Everything that depends on the loop counts (the plan, masks, h0) runs
        here, outside the parts."""
        B, T = idx.shape
        counts = loop_counts(self.cfg.loops if loops is None else loops, B)
        cos, sin = self._rope(T)
        x, decay, drive = parts.stem(idx, cos, sin)
        if not self.cfg.random_h0:
            h = x
        else:  # contiguous: a seeded h0 is one row expanded over the batch (stride 0), which the
            # compiled round would otherwise treat as another input layout (one more graph)
            h = self._h0(B, torch.arange(T, device=idx.device), h0_seed, x).contiguous()
        round1_kv: tuple = ()  # round 1's (K, V) per recurrent layer, when a later round reuses them

        def one_round(h: Tensor, past: tuple[Tensor, ...], g: int) -> Tensor:
            nonlocal round1_kv
            timestep = self._timestep_tensors(g)
            new, kv = parts.round(
                h, decay, drive, past, timestep, idx, cos, sin, round1_kv, self.settings_round(g)
            )
            if g == 0:
                round1_kv = kv
            return new

        gated = self.gate is not None and targets is not None and self.training
        states: list[Tensor] = []
        h = self._loop(h, counts, one_round, states.append if gated else None)
        logits, loss = parts.tail(h, idx, cos, sin, targets)
        if gated:
            return self._gate_loss(parts, states, idx, cos, sin, targets, logits)
        return LMOutput(logits=logits, loss=loss)

    def _gate_loss(self, parts: SeqParts, states, idx, cos, sin, targets, logits) -> LMOutput:
        """The gate's objective over the R rounds' states (`model.exit_gate.objective`): every round read
        out through the tail part (the last one's logits are the forward's own)."""
        cfg = self.cfg
        if len(states) != cfg.loops:
            raise ValueError(
                f"loops: a model with an exit gate trains at its loop count {cfg.loops}; got {len(states)}"
            )
        readouts = [parts.tail(h, idx, cos, sin, None)[0] for h in states[:-1]] + [logits]
        lam = torch.stack([self.gate(h, t) for t, h in enumerate(states, start=1)])  # (R, B, T)
        got = objective(cfg.exit_gate, cfg.gate_coef, lam, readouts, targets, cfg.gate_prior, cfg.gate_eps)
        return LMOutput(
            logits=logits, loss=got.total, task_loss=got.task, expected_rounds=got.expected_rounds
        )

    # The three parts of a sequence forward: tensors and Python ints in, tensors out, so each compiles
    # to a graph of static shapes. Each builds its own attention context from the RoPE tables.

    def _stem_part(self, idx: Tensor, cos: Tensor, sin: Tensor):
        """-> x (B, T, d) after the prelude, and the injection's decay (d,) and drive dt*Be (B, T, d)
        (decay None for scalar/channel/dense, whose drive is a e or W e; both None without injection)."""
        x, inj = self._stem(idx, SeqContext(cos, sin))
        return (x, None, None) if inj is None else (x, *inj)

    def _round_part(
        self,
        h: Tensor,
        decay,
        drive,
        past,
        timestep,
        idx: Tensor,
        cos: Tensor,
        sin: Tensor,
        round1_kv,
        r: int,
    ):
        """One round with round r's settings (r from `settings_round`) -> (h', round1_kv): round 1's
        K, V per recurrent layer, returned by round 0 when later rounds reuse them (else ()). `past`:
        the history differences, `timestep`: this round's timestep tensors (see `_round`)."""
        ctx = SeqContext(cos, sin)
        ctx.round1_kv.update(enumerate(round1_kv))
        new = self._round(h, None if drive is None else (decay, drive), idx, ctx, r, past, timestep)
        if r == 0 and self.reuses_kv:
            return new, tuple(ctx.round1_kv[j] for j in range(len(self.recurrent)))
        return new, ()

    def _tail_part(self, h: Tensor, idx: Tensor, cos: Tensor, sin: Tensor, targets: Tensor | None):
        """-> logits (B, T, V) fp32, and the mean cross-entropy over targets != -1 (None without)."""
        logits = self._tail(h, idx, SeqContext(cos, sin))
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(
            logits.view(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-1
        )

    # The same pieces with an explicit context (where K, V go): shared by the parts and by decoding.

    def _stem(self, idx: Tensor, ctx):
        """Embedding + prelude -> x (B, T, d), and inj = (decay exp(-dt*A) (d,), dt*Be (B, T, d)) for the
        diagonal injection, (None, a e or W e (B, T, d)) for scalar/channel/dense, or None."""
        full = self.cfg.full_settings
        x = self.wte(idx)  # (B, T, d)
        for i, blk in enumerate(self.prelude):
            x = blk(x, idx, settings=full, ctx=ctx, key=LayerKey.prelude(i))
        if self.input_injection is not None:
            return x, (None, self.input_injection.drive(x))
        if self.cfg.injection != "diagonal":
            return x, None
        dt = F.softplus(self.dt_bias)  # (d,)
        return x, (torch.exp(-dt * torch.exp(self.A_log)), dt * F.linear(self.prelude_norm(x), self.B))

    def _round(
        self, h: Tensor, inj, idx: Tensor, ctx, r: int, past: tuple[Tensor, ...] = (), timestep: tuple = ()
    ) -> Tensor:
        """One application of the recurrent block with round r's settings. inj = (decay (d,) or None,
        drive (B, T, d)) or None (no injection); `past` = the history differences (B, T, d) each, newest
        first; `timestep` = this round's timestep tensors (`TimestepConditioning.round_tensors`)."""
        if inj is None:
            x = h
        elif inj[0] is None:  # scalar / channel / dense: h + a e
            x = h + inj[1]
        else:  # diagonal
            x = inj[0] * h + inj[1]
        if past:
            x = self.history.add(x, past)
        settings, kind = self.cfg.round_settings(r), self.cfg.timestep
        conditions = layer_conditions(kind, timestep, len(self.recurrent)) if timestep else None
        out = x
        for j, blk in enumerate(self.recurrent):
            cond = None if conditions is None else conditions[j]
            out = blk(out, idx, settings=settings, ctx=ctx, key=LayerKey.recurrent(r, j), cond=cond)
        if kind == "loop_gate":  # h_t = x_t + g_t (R(x_t) - x_t)
            out = x + timestep[0].to(x.dtype) * (out - x)
        return out

    def readout(self, h: Tensor, idx: Tensor, ctx=None) -> Tensor:
        """Readout C (with injection), coda, final norm and head -> logits (B, T, V) fp32, from the state
        h (B, T, d) after any round: the contract's readout capability (model/contract/), which the
        exit rules read. `ctx`: where the coda's K, V go (None: a plain context for positions 0..T-1)."""
        ctx = SeqContext(*self.rope(idx.shape[1])) if ctx is None else ctx
        x = h if self.cfg.injection != "diagonal" else F.linear(h, self.C)
        for i, blk in enumerate(self.coda):
            x = blk(x, idx, settings=self.cfg.full_settings, ctx=ctx, key=LayerKey.coda(i))
        return self._final(x)

    def _run(self, idx: Tensor, ctx, positions: Tensor, loops, h0_seed) -> Tensor:
        """Prefill and decode_step: a forward whose ctx decides where K, V go -> logits (B, T, V)."""
        counts = loop_counts(self.cfg.loops if loops is None else loops, idx.shape[0])
        return self._tail(self._rounds(idx, ctx, positions, counts, h0_seed), idx, ctx)

    def run_rounds(
        self, idx: Tensor, ctx, positions: Tensor, counts, h0_seed, skip_round=None, observe=None, keep=None
    ):
        """Stem, initial state and rounds with an explicit context -> the last state (B, T, d): the rounds
        with a `keep` mask, the capability the exit rules use (`model.exits`) with `readout`.
        `skip_round` = g runs global round g as the identity; `observe(h)` is handed the initial state,
        then every round's output; `keep()` says which tokens run each round (see `_loop`)."""
        x, inj = self._stem(idx, ctx)
        h = self._h0(idx.shape[0], positions, h0_seed, x) if self.cfg.random_h0 else x

        def one_round(h: Tensor, past: tuple[Tensor, ...], g: int) -> Tensor:
            if g == skip_round:
                return h
            return self._round(h, inj, idx, ctx, g, past, self._timestep_tensors(g))

        if observe is not None:
            observe(h)
        return self._loop(h, counts, one_round, observe, keep)

    def _loop(
        self, h: Tensor, counts, one_round, observe: Callable[[Tensor], None] | None = None, keep=None
    ) -> Tensor:
        """The rounds from the initial state h (B, T, d) -> the last state; `one_round(h, past, g)`
        applies global round g to h with the history differences `past` (newest first, at most
        cfg.history of them); `observe`, if given, is handed the state after every round. `keep`, if
        given, is asked before every round which tokens run it (per-token exits, `model.exits`): a
        (B, T, 1) bool mask (the others keep their state, as a held sample does), or False to stop
        the rounds there (no token runs; knowing that takes `keep` a host sync).
        Every decision is taken on the host from the Python plan; the per-sample masks (if any) go to
        the device once, so the loop itself never waits for the device."""
        cfg = self.cfg
        grad_on = torch.is_grad_enabled()
        plan = plan_rounds(counts, cfg.grad_rounds, grad_on, rounds_share_settings=cfg.rounds_alike)
        active, need = plan.device_masks(h.device)  # (n_rounds, B, 1, 1) bool each, or None
        all_active, need_is_active = plan.all_active, plan.need_is_active
        past: tuple[Tensor, ...] = ()  # history: h_t - h_{t-1} of the last rounds, newest first
        for g in range(plan.n_rounds):
            running = None if keep is None else keep()
            if running is False:
                break
            use_grad = plan.grad[g]
            with torch.set_grad_enabled(use_grad):
                # a round without autograd gets the state detached: the same values, and one compiled
                # graph for it whether or not the state carries gradient from earlier rounds
                h_in = h if use_grad else h.detach()
                new = one_round(h_in, past if use_grad else tuple(p.detach() for p in past), g)
                diff = new - h_in if cfg.history else None  # (B, T, d), with the round's autograd
            # outside the no_grad block: a sample held still must keep its state's graph
            if active is not None:
                if use_grad and not need_is_active[g]:  # samples outside their last k rounds: no gradient
                    new = torch.where(need[g], new, new.detach())
                    diff = None if diff is None else torch.where(need[g], diff, diff.detach())
                if not all_active[g]:
                    new = torch.where(active[g], new, h)
                    diff = None if diff is None else torch.where(active[g], diff, 0.0)  # held: no change
            if running is not None:
                new = torch.where(running, new, h)
                diff = None if diff is None else torch.where(running, diff, 0.0)
            if observe is not None:
                observe(new)
            if diff is not None:
                past = (diff, *past[: cfg.history - 1])
            h = new
        return h

    # the private names the model's own parts and older callers use
    _rope, _tail, _rounds = rope, readout, run_rounds

    @torch.no_grad()
    def round_states(self, idx: Tensor, loops: int, h0_seed=None, skip_round: int | None = None) -> Tensor:
        """The state after every round of an evaluation forward -> (loops + 1, B, T, d): entry 0 is the
        state the rounds start from (h0 with the diagonal injection, the prelude output otherwise),
        entry t the output of round t. `skip_round` = i (0-based) replaces round i by the identity
        (h_i = h_{i-1}); later rounds keep their own index, settings and timestep parameters, and the
        history sees the skipped round's difference as zero. For the loop-geometry metrics: the
        rounds of prefill and decoding (`_rounds`), watched."""
        if skip_round is not None and not 0 <= skip_round < loops:
            raise ValueError(f"skip_round: expected 0..{loops - 1}; got {skip_round}")
        if skip_round == 0 and self.reuses_kv:
            raise ValueError("skip_round: round 1 cannot be skipped when later rounds reuse its keys/values")
        T = idx.shape[1]
        states: list[Tensor] = []
        ctx, positions = SeqContext(*self._rope(T)), torch.arange(T, device=idx.device)
        self._rounds(idx, ctx, positions, loops, h0_seed, skip_round, states.append)
        return torch.stack(states)

    # ---- decoding ---------------------------------------------------------------------------------

    def setup_cache(
        self, batch: int, max_len: int, dtype=None, device=None, loops: int | None = None, h0_seed: int = 0
    ) -> KVCache:
        """A cache for `batch` sequences of up to `max_len` tokens, decoding at `loops` rounds."""
        self._rope(max_len)
        p = self.wte.weight
        return KVCache(self.cfg, batch, max_len, dtype or p.dtype, device or p.device, loops, h0_seed)

    @torch.no_grad()
    def prefill(self, idx: Tensor, cache: KVCache) -> Tensor:
        """Full forward over a prompt (B, T) from position 0 that fills the cache -> logits (B, T, V)."""
        T = idx.shape[1]
        if T > cache.max_len:
            raise ValueError(f"prompt of {T} tokens does not fit a cache of {cache.max_len}")
        cache.reset()
        cos, sin = self._rope(T)
        positions = torch.arange(T, device=idx.device)
        ctx = SeqContext(cos, sin, cache)
        logits = self._run(idx, ctx, positions, cache.loops, cache.h0_seed)
        cache.pos.fill_(T)
        return logits

    @torch.no_grad()
    def decode_step(self, tokens: Tensor, cache: KVCache) -> Tensor:
        """tokens (B,) at position cache.pos -> logits (B, V) fp32; advances cache.pos in place.
        Static shapes, no host sync (the position lives on the device): capturable in a CUDA graph."""
        pos = cache.pos.view(1)
        cos_all, sin_all = self._rope(cache.max_len)  # built by setup_cache: no allocation here
        cos, sin = cos_all.index_select(0, pos), sin_all.index_select(0, pos)  # (1, D/2)
        ctx = StepContext(cache, cos, sin)
        logits = self._run(tokens.view(-1, 1), ctx, pos, cache.loops, cache.h0_seed)
        cache.pos.add_(1)
        return logits[:, 0]

    def capture_decode_graph(self, cache: KVCache, tokens: Tensor, warmup: int = 3):
        """CUDA only: one `decode_step` captured in a CUDA graph -> (graph, static_tokens, static_logits)
        (`model.decode_graph`); the decode benchmark reaches it here, through the module it built."""
        return capture_decode_graph(self, cache, tokens, warmup)
