"""Per-token exit rules: each token stops looping when a criterion says it has converged.

After round t (1-based) of a forward with at most R = `max_rounds` rounds, a token that still runs
stops when t >= `min_rounds` and (comparisons strict, so a threshold of 0 never fires):
- `state`:   ||h_t - h_{t-1}|| / ||h_{t-1}|| < eps   (the depth sweep's state-change measure);
- `kl`:      KL(p_t || p_{t-1}) < eps, p_t the next-token distribution read out of h_t through the
             readout C, the coda and the head; clamped at >= 0 (in floats it can dip below);
- `entropy`: |H(p_t) - H(p_{t-1})| < eps;
- `argmax`:  the top-1 token of p_t has not changed for k consecutive rounds (k = `threshold`, an
             integer or infinity; infinity never fires, 0 always does);
- `gate`:    a learned exit (`model.exit_gate`, a model trained with `exit_gate`): the cumulative
             exit mass of rounds 1..t reaches q (q = `threshold` in (0, 1]); the mass accumulates
             from round 1, the decision from `min_rounds` as for every rule. q = 1 never stops a token
             early, by definition (not by comparing a mass a saturated sigmoid could bring to 1).
The first comparison is between rounds 1 and 2 (round 1's change from the random h0 says nothing about
convergence), so `min_rounds` >= 2; at round R every token stops. The readout rules read p_t out from
round `first_decision - 1` on (the first round a comparison needs), and argmax stability is counted
from there. An eps of infinity (k = 0 for argmax) stops every token at `min_rounds`.

A token that stopped keeps its state, and for the rounds after its exit the keys and values later
tokens read for it are those of its last computed round (`model.contexts.HeldKV`; no recompute). The
forward stays dense: every round runs for every token, stopped rows are masked (`torch.where`, the
loop's `keep` hook in `families.looped.model`), shapes never change. So threshold 0 is exactly the fixed-depth
forward at R and an infinite threshold exactly the forward at `min_rounds`, bit for bit.

The readout at round t runs the coda over every token's state at round t (a stopped token's held
state): in the full forward a later token's decision sees earlier tokens mid-flight, while in decoding
earlier tokens are final. So a rule re-decided token by token can flip near the threshold; decoding
is given the full forward's exit rounds (`exits=`) to reproduce it (`exit_prefill`,
`exit_decode_step`), or decides on its own (`rule=`) when only the latency matters.

The rule names are `model.exit_names.ExitRuleName` (torch-free, for the analysis and the dashboard).
KV strategies across rounds (per_round, latest, first, last_m) are `model.kv_cache`'s; `kv_view`
gives the model under one of them (shared weights). Everything here is pure PyTorch, for any recipe
and loop-design variant.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import Tensor

from looplab.model import fields
from looplab.model.contexts import ExitSeqContext, ExitStepContext, HeldKV
from looplab.model.errors import ConfigError
from looplab.model.exit_names import ExitRuleName
from looplab.model.geometry import EPS
from looplab.model.kv_cache import KVCache, LayerKey, strategy_config

if TYPE_CHECKING:
    from looplab.families.looped.model import LoopedLM


@dataclass(frozen=True)
class ExitRule:
    """One exit rule with its threshold (eps, or k for argmax) and round bounds (module docstring)."""

    rule: ExitRuleName
    threshold: float
    min_rounds: int = 2
    max_rounds: int = 8

    def __post_init__(self) -> None:
        rule = ExitRuleName(fields.choice("exit.rule", self.rule, tuple(ExitRuleName)))
        object.__setattr__(self, "rule", rule)
        threshold = fields.number("exit.threshold", self.threshold, lo=0.0)
        if rule is ExitRuleName.GATE and not 0.0 < threshold <= 1.0:
            raise ConfigError(
                f"exit.threshold: gate thresholds the cumulative exit mass: in (0, 1]; got {self.threshold!r}"
            )
        if rule is ExitRuleName.ARGMAX and math.isfinite(threshold) and not threshold.is_integer():
            raise ConfigError(
                f"exit.threshold: argmax counts rounds: an integer >= 0 or infinity; got {self.threshold!r}"
            )
        object.__setattr__(self, "threshold", threshold)
        lo = fields.integer("exit.min_rounds", self.min_rounds, lo=2)
        hi = fields.integer("exit.max_rounds", self.max_rounds, lo=1)
        if hi < lo:
            raise ConfigError(f"exit.max_rounds: must be >= min_rounds ({lo}), got {hi}")

    @property
    def reads_out(self) -> bool:
        return self.rule.reads_out

    @property
    def first_decision(self) -> int:
        """The first round after which a token may stop."""
        return self.min_rounds

    @property
    def label(self) -> str:
        """e.g. `state<0.03`, `argmax>=3`: the rule and its threshold as a person reads it."""
        op = ">=" if self.rule in (ExitRuleName.ARGMAX, ExitRuleName.GATE) else "<"
        value = "inf" if math.isinf(self.threshold) else f"{self.threshold:g}"
        return f"{self.rule}{op}{value}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": str(self.rule),
            "threshold": self.threshold,
            "min_rounds": self.min_rounds,
            "max_rounds": self.max_rounds,
        }


def readouts_per_token(rule: ExitRule, exit_round: int) -> int:
    """Readouts a token that stops after `exit_round` spends on the rule beyond its output. It is read
    out after rounds first_decision - 1 .. exit_round when it stops early (the last readout is its
    output, token by token), after rounds first_decision - 1 .. R - 1 when it runs to R (whose output
    is the ordinary tail): exit_round - first_decision + 1 either way. 0 for `state`, and when no
    decision is possible (R = min_rounds)."""
    if not rule.reads_out or rule.max_rounds <= rule.first_decision:
        return 0
    return exit_round - rule.first_decision + 1


# ---- the criteria: pure functions of the current and previous round ------------------------------


def relative_change(h: Tensor, prev: Tensor) -> Tensor:
    """(..., d) states -> (...): ||h - prev|| / ||prev|| in fp32 (the norm clamped at model.geometry.EPS)."""
    h, prev = h.float(), prev.float()
    return (h - prev).norm(dim=-1) / prev.norm(dim=-1).clamp_min(EPS)


def kl_divergence(logp: Tensor, prev_logp: Tensor) -> Tensor:
    """(..., V) log-probabilities -> (...): KL(p || prev) = sum p (log p - log prev), clamped at >= 0."""
    p = logp.exp()
    return (p * (logp - prev_logp)).sum(-1).clamp_min(0.0)


def entropy(logp: Tensor) -> Tensor:
    """(..., V) log-probabilities -> (...): H(p) = -sum p log p (0 log 0 = 0)."""
    p = logp.exp()
    return -torch.where(p > 0, p * logp, 0.0).sum(-1)


def stable_count(top1: Tensor, prev_top1: Tensor, count: Tensor) -> Tensor:
    """Rounds the top-1 token has stayed the same: count + 1 where it did not change, else 0."""
    return torch.where(top1 == prev_top1, count + 1, torch.zeros_like(count))


# ---- the tracker: the rule applied round by round inside the model's loop ------------------------


class ExitTracker:
    """The exit state of one forward over (B, T) tokens, driven by the model's round loop:
    `observe(h)` is handed the initial state and every round's output, `keep()` is asked before every
    round which tokens run it. With `exits` (B, T) given, token b, t runs rounds 1..exits[b, t] and no
    rule is evaluated. `stop`: end the rounds once no token runs (one host sync per round)."""

    def __init__(
        self,
        rule: ExitRule | None,
        exits: Tensor | None,
        max_rounds: int,
        shape: tuple[int, int],
        device,
        readout: Callable[[Tensor], Tensor] | None = None,
        held: HeldKV | None = None,
        stop: bool = False,
        gate: Callable[[Tensor, int], Tensor] | None = None,
    ) -> None:
        if (rule is None) == (exits is None):
            raise ValueError("give an exit rule or the exit rounds, not both or neither")
        if (
            exits is not None
            and exits.numel()
            and not (1 <= int(exits.min()) and int(exits.max()) <= max_rounds)
        ):
            raise ValueError(
                f"exits: expected rounds in 1..{max_rounds}, got {int(exits.min())}..{int(exits.max())}"
            )
        self.rule, self.exits, self.max_rounds = rule, exits, max_rounds
        self.readout, self.held, self.stop = readout, held, stop
        self.gate = gate  # the `gate` rule: (h, t) -> cumulative exit mass (B, T) after round t
        self.t = 0  # rounds observed (the initial state is round 0)
        self.rounds_run = 0
        self.running = torch.ones(shape, dtype=torch.bool, device=device)  # (B, T)
        self.exit_round = (
            exits.to(device=device, dtype=torch.long).clone()
            if exits is not None
            else torch.full(shape, max_rounds, dtype=torch.long, device=device)
        )
        self.prev: Tensor | None = None
        self.count: Tensor | None = None  # argmax: rounds the top-1 has been stable

    def observe(self, h: Tensor) -> None:
        t, rule = self.t, self.rule  # h is round t's output (t = 0: the initial state)
        self.t += 1
        if rule is None or self.max_rounds <= rule.first_decision:
            return  # given exits, or no decision possible
        if rule.rule is ExitRuleName.GATE:
            self._gate_decision(h, t)
            return
        if not rule.first_decision - 1 <= t < self.max_rounds:
            return  # before the first measurement, or at R where every token stops anyway
        now = self._measure(h)
        if t == rule.first_decision - 1:
            self.count = torch.zeros_like(now) if rule.rule is ExitRuleName.ARGMAX else None
        else:
            newly = self.running & self._converged(now)
            self.exit_round = torch.where(newly, t, self.exit_round)
            self.running = self.running & ~newly
        self.prev = now

    def keep(self):
        """The (B, T, 1) mask of tokens that run the coming round, or False when none does and `stop`."""
        upcoming = self.t  # 1-based index of the round about to run
        running = self.running if self.exits is None else self.exit_round >= upcoming
        if self.stop and not bool(running.any()):
            return False
        self.rounds_run = upcoming
        if self.held is not None:
            self.held.running = running[:, None, :, None]  # (B, 1, T, 1) against keys (B, H, T, D)
        return running[..., None]

    def _gate_decision(self, h: Tensor, t: int) -> None:
        """The `gate` rule after round t: the mass accumulates from round 1, tokens stop from
        first_decision on once it reaches q; q = 1 never stops early (and skips the gate's work)."""
        rule = self.rule
        if not 1 <= t < self.max_rounds or rule.threshold >= 1.0:
            return
        mass = self.gate(h, t)
        if t >= rule.first_decision:
            newly = self.running & (mass >= rule.threshold)
            self.exit_round = torch.where(newly, t, self.exit_round)
            self.running = self.running & ~newly

    def _measure(self, h: Tensor) -> Tensor:
        if self.rule.rule is ExitRuleName.STATE:
            return h.float()
        logp = F.log_softmax(self.readout(h).float(), dim=-1)  # (B, T, V)
        if self.rule.rule is ExitRuleName.ARGMAX:
            return logp.argmax(-1)
        return logp

    def _converged(self, now: Tensor) -> Tensor:
        rule, eps = self.rule.rule, self.rule.threshold
        if rule is ExitRuleName.STATE:
            return relative_change(now, self.prev) < eps
        if rule is ExitRuleName.KL:
            return kl_divergence(now, self.prev) < eps
        if rule is ExitRuleName.ENTROPY:
            return (entropy(now) - entropy(self.prev)).abs() < eps
        self.count = stable_count(now, self.prev, self.count)
        return self.count >= eps


# ---- forwards with exits ---------------------------------------------------------------------------


@dataclass
class ExitOutput:
    logits: Tensor  # (B, T, V) fp32 (decode step: (B, V))
    exit_round: Tensor  # (B, T) long, 1-based: the last round each token computed (decode step: (B,))
    rounds_run: int  # rounds the loop ran (fewer than max_rounds only with stop)


def kv_view(model: LoopedLM, strategy: str, max_rounds: int, m: int | None = None) -> LoopedLM:
    """`model` under KV strategy `strategy` for forwards of up to `max_rounds` rounds: the model itself
    for per_round and latest, else a shallow copy with the same parameter tensors (no copy of the
    weights) and the config of `model.kv_cache.strategy_config`."""
    cfg = strategy_config(model.cfg, strategy, max_rounds, m)
    if cfg == model.cfg:
        return model
    view = copy.copy(model)  # a new module object whose submodules and parameters are model's
    view.cfg = cfg
    return view


def _run(model, idx, ctx, positions, max_rounds, h0_seed, rule, exits, stop) -> ExitOutput:
    """The rounds with exits and the tail, in context `ctx` (whole sequence or one decode step)."""
    if rule is not None and rule.max_rounds != max_rounds:
        raise ValueError(f"exit.max_rounds {rule.max_rounds} != the forward's {max_rounds} rounds")

    def readout(h: Tensor) -> Tensor:
        return model.readout(h, idx, ctx)

    tracker = ExitTracker(
        rule, exits, max_rounds, tuple(idx.shape), idx.device, readout=readout, held=ctx.held, stop=stop
    )
    tracker.gate = _gate_mass(model, rule)
    h = model.run_rounds(idx, ctx, positions, max_rounds, h0_seed, observe=tracker.observe, keep=tracker.keep)
    if ctx.cache is not None and tracker.rounds_run < max_rounds:
        _fill_rounds_not_run(ctx, tracker.rounds_run, max_rounds, positions)
    return ExitOutput(model.readout(h, idx, ctx), tracker.exit_round, tracker.rounds_run)


def _gate_mass(model, rule: ExitRule | None):
    """The `gate` rule's cumulative exit mass round by round (`model.exit_gate.GateMass`), else None;
    read as `model.contract.gate_reading` says for looplab's model or a family's (`FamilyLM`). A model
    without the contract's exit_gate is refused (ConfigError naming the rule)."""
    if rule is None or rule.rule is not ExitRuleName.GATE:
        return None
    from looplab.model.contract import capabilities, gate_reading
    from looplab.model.exit_gate import GateMass

    if not capabilities(model).exit_gate:
        raise ConfigError(
            f"exit.rule: {rule.rule} needs a model with an exit gate (looplab's trained with exit_gate, or "
            "a family with the contract's exit_gate); this one has none"
        )
    return GateMass(model.exit_gate, *gate_reading(model))


def _fill_rounds_not_run(ctx, first: int, max_rounds: int, positions: Tensor) -> None:
    """After a stop at round `first` (every token done): the cached rounds first+1..R get each token's
    last keys/values, as the dense forward would have written them."""
    for r in range(first, max_rounds):
        for layer, (k, v) in ctx.held.last.items():
            slots = ctx.cache.sets.get(LayerKey.recurrent(r, layer))
            if slots is None:
                continue  # MLP-only or a round that reads round 1's
            heads = slots.k.shape[1]
            if positions.numel() == 1:
                slots.write(k[:, :heads], v[:, :heads], positions.view(()))
            else:
                slots.write_many(k[:, :heads], v[:, :heads])


@torch.no_grad()
def exit_forward(
    model: LoopedLM,
    idx: Tensor,
    rule: ExitRule | None = None,
    *,
    h0_seed,
    exits: Tensor | None = None,
    max_rounds: int | None = None,
    stop: bool = False,
) -> ExitOutput:
    """Forward over idx (B, T) with per-token exits by `rule`, or with the given exit rounds `exits`
    (B, T) in 1..max_rounds. `stop`: end the rounds when every token has stopped (the same result,
    fewer rounds run; one host sync per round)."""
    T = idx.shape[1]
    cos, sin = model.rope(T)
    rounds = rule.max_rounds if max_rounds is None and rule is not None else max_rounds
    return _run(
        model,
        idx,
        ExitSeqContext(cos, sin),
        torch.arange(T, device=idx.device),
        rounds,
        h0_seed,
        rule,
        exits,
        stop,
    )


@torch.no_grad()
def exit_prefill(
    model: LoopedLM, idx: Tensor, cache: KVCache, rule: ExitRule | None = None, exits=None, stop=False
) -> ExitOutput:
    """`LoopedLM.prefill` with exits: the cache (of `cache.loops` = max rounds) receives what the
    dense forward computes, an exited token's last keys/values in the rounds after its exit."""
    T = idx.shape[1]
    if T > cache.max_len:
        raise ValueError(f"prompt of {T} tokens does not fit a cache of {cache.max_len}")
    cache.reset()
    cos, sin = model.rope(T)
    ctx = ExitSeqContext(cos, sin, cache)
    out = _run(
        model, idx, ctx, torch.arange(T, device=idx.device), cache.loops, cache.h0_seed, rule, exits, stop
    )
    cache.pos.fill_(T)
    return out


@torch.no_grad()
def exit_decode_step(
    model: LoopedLM, tokens: Tensor, cache: KVCache, rule: ExitRule | None = None, exits=None, stop=False
) -> ExitOutput:
    """`LoopedLM.decode_step` with exits: tokens (B,) at cache.pos -> logits (B, V) and each row's exit
    round (B,); `exits` (B,) gives them. Without `stop` the step has static shapes and no host sync
    (exited rows are masked); with it the step ends once every row has stopped (a sync per round)."""
    pos = cache.pos.view(1)
    cos_all, sin_all = model.rope(cache.max_len)
    cos, sin = cos_all.index_select(0, pos), sin_all.index_select(0, pos)  # (1, D/2)
    ctx = ExitStepContext(cache, cos, sin)
    forced = None if exits is None else exits.view(-1, 1)
    out = _run(model, tokens.view(-1, 1), ctx, pos, cache.loops, cache.h0_seed, rule, forced, stop)
    cache.pos.add_(1)
    return ExitOutput(out.logits[:, 0], out.exit_round[:, 0], out.rounds_run)


@torch.no_grad()
def family_exit_forward(
    model, idx: Tensor, rule: ExitRule | None = None, *, h0_seed, exits=None, max_rounds, stop=False,
    strategy: str,
) -> ExitOutput:  # fmt: skip
    """`exit_forward` decoded token by token through a family's own KV cache under its `strategy`
    (the contract's KV strategies with exits: `kv_strategies`, `setup_cache(..., strategy=)` and
    `step_context(cache)`, a decode step's context for `run_rounds` and `readout`): each token's rule
    is decided inside its step, and later tokens read what the strategy keeps of it, which a parallel
    forward over the sequence cannot give for a strategy such as Huginn's `latest_per_slot`. `model`
    may be a `model.contract.FamilyLM` (its family's module is used). `stop` has no effect here: a
    step runs every round its rows need. Each token's initial state is the family's for `h0_seed` at
    its position, as in the parallel forward."""
    inner = getattr(model, "inner", model)
    B, T = idx.shape
    cache = inner.setup_cache(B, T, device=idx.device, loops=max_rounds, strategy=strategy)
    logits, rounds = [], []
    for t in range(T):
        ctx = inner.step_context(cache)
        forced = None if exits is None else exits[:, t : t + 1]
        out = _run(inner, idx[:, t : t + 1], ctx, ctx.positions, max_rounds, h0_seed, rule, forced, False)
        cache.pos += 1
        logits.append(out.logits[:, 0].float())
        rounds.append(out.exit_round[:, 0])
    return ExitOutput(torch.stack(logits, 1), torch.stack(rounds, 1), max_rounds)
