"""The model configuration: one frozen dataclass that expresses every recipe and ablation of the study.

Architecture (the Parcae layout): `n_prelude` layers run once, the `n_recurrent` layers (the recurrent
block) run once per *round*, `n_coda` layers run once, then the tied LM head. Distinct layers are
numbered 0..L-1 in that order (prelude, recurrent, coda); `value_embeds` names which of them get a
value-embedding table.

Looping:
- `loop_sampler` picks the training loop count: "fixed" (always `loops`), "poisson_seq" (Poisson with
  mean `loops` per sequence, at least 1; a batch is padded to its largest count) or "poisson_batch"
  (one Poisson draw per batch: no padding waste). `loops` is also the default inference loop count.
- `grad_rounds` = k: only the last min(n, k) rounds get gradients; None = every round.
- `rounds`: per-round settings of the recurrent block. Entry i applies to round i+1; the LAST entry
  applies to every later round. So `(RoundConfig(),)` is "all rounds the same" and
  `(RoundConfig(), RoundConfig(window=64))` is "round 1 full, rounds 2+ windowed" (the lean recipe).

Loop design (R = the recurrent block with round t's settings, e = the prelude output, or the token
embedding when n_prelude = 0; x_t = round t's input, t = 1, 2, ...):
- `injection`: how e enters every round.
    "diagonal"  the Parcae form: h_0 ~ random (see `h0_std`), x_t = exp(-dt*A) * h_{t-1} + dt * (B e'),
                e' = RMSNorm(e), and a dense readout C h_T before the coda (see `families.looped.model`).
    "none"      h_0 = e, x_t = h_{t-1}: the block simply continues the residual stream; with
                `loops=1` a plain transformer.
    "scalar"    h_0 = e, x_t = h_{t-1} + a e, a one learned scalar, init 1.
    "channel"   h_0 = e, x_t = h_{t-1} + a * e, a a learned vector (d,), init ones.
    "dense"     h_0 = e, x_t = h_{t-1} + W e, W a learned (d, d) matrix, init identity.
  At init scalar, channel and dense are the same function (x_t = h_{t-1} + e). None of them has a
  readout: the coda reads h_T. a e / W e is computed once per forward, like the diagonal's B e'.
- `history` = w >= 0: x_t additionally gets sum_{k=1..w} m_k * (h_{t-k} - h_{t-k-1}), m_k a learned
  channel vector (d,) per lag, init zero (so at init history is off and the model equals w = 0);
  differences that do not exist yet (t-k-1 < 0) count as zero. Works with every injection.
- `timestep`: per-round learned parameters of the recurrent block (prelude and coda never):
    "none"
    "loop_gate"   h_t = x_t + g_t (R(x_t) - x_t), g_t a learned scalar per round, init 1.
    "branch_gate" per round and recurrent layer, a scalar gate on the attention branch and one on the
                  MLP branch: x <- x + ga_{t,j} attn(norm1(x)), x <- x + gm_{t,j} mlp(norm2(x)); init 1.
    "adaln"       per round and recurrent layer, norm(x) * (1 + s) + b on the attention and the MLP
                  pre-norm, s and b channel vectors (d,) each, init 0.
  At init every kind is the unconditioned block (up to rounding for loop_gate).
  `timestep_rounds` = the number of rounds with their own parameters: None = `loops` for the fixed
  sampler, 2 * `loops` for the Poisson samplers (whose counts pass `loops` often; P(count > 2 * mean)
  is 0.4% at mean 8). Round t > timestep_rounds reuses round timestep_rounds' parameters, so inference
  can run deeper than training. A timestep makes rounds differ by index, so mixed loop counts run the
  staggered schedule (`model.rounds`; `rounds_alike`).

Learned exit (`model.exit_gate` has the formulas): `exit_gate` names the objective that trains a gate
after every round ("none": no gate, the default; "entropy", "geometric", "act"); `gate_coef` is its
coefficient (β of entropy and geometric, τ of act; >= 0), `gate_prior` the geometric prior's λ_p (in
(0, 1)), `gate_eps` act's ε (in [0, 1)). A gate needs a fixed loop count R >= 2 (the fixed sampler):
per-row Poisson counts leave R, the support of the exit distribution, undefined. The gate's fields at
their defaults are left out of a variant's overrides, so a config without a gate keeps its identity.

Every bad value raises `ConfigError` naming the field and what is accepted, also through
`dataclasses.replace` (validation lives in `__post_init__`).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import Any

from looplab.model import fields
from looplab.model.errors import ConfigError
from looplab.model.exit_names import GATE_OBJECTIVES

SAMPLERS = ("fixed", "poisson_seq", "poisson_batch")
INJECTIONS = ("diagonal", "none", "scalar", "channel", "dense")
TIMESTEPS = ("none", "loop_gate", "branch_gate", "adaln")
VALUE_EMBED_RULES = ("alternate", "none", "all")
# the value-embedding gate reads the first 32 channels of the block input (the layer builds it, the
# parameter and FLOP counts count it: one constant for both)
VE_GATE_CHANNELS = 32
PARCAE_DECAY = math.sqrt(1.0 / 5.0)  # the reference's injection decay exp(-dt*A) at init (about 0.447)


@dataclass(frozen=True)
class RoundConfig:
    """Settings of the recurrent block for one round.

    window:    attention window in tokens (a query at t sees keys t-window+1..t); None = full context.
    width:     fraction of heads and MLP hidden units used (1.0 or 0.5, any fraction giving whole
               heads/units works); the narrow round uses the first heads/units of the same weights.
    attention: False = MLP-only round (the attention sub-block is skipped).
    reuse_kv:  reuse round 1's keys/values of the same layer instead of computing new ones (Q is new).
    """

    window: int | None = None
    width: float = 1.0
    attention: bool = True
    reuse_kv: bool = False

    def __post_init__(self) -> None:
        set_field = object.__setattr__  # frozen: store the normalised values
        set_field(self, "window", fields.integer("rounds.window", self.window, lo=1, allow_none=True))
        set_field(self, "width", fields.number("rounds.width", self.width, lo=0.0, lo_open=True, hi=1.0))
        fields.boolean("rounds.attention", self.attention)
        fields.boolean("rounds.reuse_kv", self.reuse_kv)
        if self.reuse_kv and not self.attention:
            raise ConfigError("rounds.reuse_kv: needs attention=true (an MLP-only round has no keys)")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any], name: str = "rounds") -> RoundConfig:
        return cls(**fields.known_keys(name, d, cls))


FULL_ROUND = RoundConfig()


@dataclass(frozen=True)
class RoundSettings:
    """One round's settings resolved against the model's size: everything a block needs to run it.
    Prelude and coda layers run with `ModelConfig.full_settings` (full round, every head and unit)."""

    round: RoundConfig
    heads: int  # attention heads used: the first `heads` of n_heads
    hidden: int  # MLP hidden units used: the first `hidden` of mlp_hidden


@dataclass(frozen=True)
class ModelConfig:
    """Architecture + looping of one looped LM. See the module docstring for the semantics."""

    vocab_size: int = 256
    d_model: int = 64
    n_heads: int = 2
    head_dim: int = 32
    mlp_ratio: int = 4
    n_prelude: int = 2
    n_recurrent: int = 2
    n_coda: int = 2
    # "alternate": every second distinct layer, counted so the last layer has one (nanochat's rule:
    # layers 1, 3, 5 of 6); "none"; "all"; or an explicit tuple of distinct-layer indices.
    value_embeds: str | tuple[int, ...] = "alternate"
    rope_base: float = 50000.0
    seq_len: int = 64
    tie_embeddings: bool = True
    injection: str = "diagonal"
    loop_sampler: str = "fixed"
    loops: int = 4
    grad_rounds: int | None = None
    rounds: tuple[RoundConfig, ...] = field(default_factory=lambda: (FULL_ROUND,))
    h0_std: float | None = None  # None = sqrt(2 / (5 d_model)), the reference's (see initial_state_std)
    init_decay: float = PARCAE_DECAY  # exp(-softplus(dt_bias)) at init, with A = exp(0) = 1
    history: int = 0  # w: recent state differences injected each round (0 = off)
    timestep: str = "none"
    timestep_rounds: int | None = None  # None = loops (fixed sampler) or 2 * loops (Poisson samplers)
    exit_gate: str = "none"  # the learned exit's objective: none, entropy, geometric, act
    gate_coef: float = 0.01  # β (entropy, geometric) or τ (act)
    gate_prior: float = 0.5  # geometric: λ_p of the prior
    gate_eps: float = 0.01  # act: halt once the summed stop probabilities reach 1 - ε

    def __post_init__(self) -> None:
        s = object.__setattr__
        for name in ("vocab_size", "d_model", "n_heads", "head_dim", "mlp_ratio", "n_recurrent", "seq_len"):
            s(self, name, fields.integer(name, getattr(self, name), lo=1))
        for name in ("n_prelude", "n_coda"):
            s(self, name, fields.integer(name, getattr(self, name), lo=0))
        if self.n_heads * self.head_dim != self.d_model:
            raise ConfigError(
                f"head_dim: n_heads * head_dim must equal d_model; got {self.n_heads} * {self.head_dim}"
                f" != {self.d_model}"
            )
        if self.head_dim % 2:
            raise ConfigError(f"head_dim: must be even (RoPE rotates pairs); got {self.head_dim}")
        s(self, "rope_base", fields.number("rope_base", self.rope_base, lo=0.0, lo_open=True))
        s(self, "h0_std", fields.number("h0_std", self.h0_std, lo=0.0, lo_open=True, allow_none=True))
        s(
            self,
            "init_decay",
            fields.number("init_decay", self.init_decay, lo=0.0, lo_open=True, hi=1.0, hi_open=True),
        )
        fields.boolean("tie_embeddings", self.tie_embeddings)
        fields.choice("injection", self.injection, INJECTIONS)
        fields.choice("loop_sampler", self.loop_sampler, SAMPLERS)
        s(self, "loops", fields.integer("loops", self.loops, lo=1))
        s(self, "grad_rounds", fields.integer("grad_rounds", self.grad_rounds, lo=1, allow_none=True))
        s(self, "history", fields.integer("history", self.history, lo=0))
        fields.choice("timestep", self.timestep, TIMESTEPS)
        s(
            self,
            "timestep_rounds",
            fields.integer("timestep_rounds", self.timestep_rounds, lo=1, allow_none=True),
        )
        if self.timestep == "none" and self.timestep_rounds is not None:
            raise ConfigError(
                f"timestep_rounds: only with a timestep conditioning (timestep one of "
                f"{', '.join(TIMESTEPS[1:])}); accepted with timestep none: null; got {self.timestep_rounds}"
            )
        self._check_value_embeds()
        self._check_rounds()
        self._check_gate()

    def _check_gate(self) -> None:
        s = object.__setattr__
        gate = fields.choice("exit_gate", self.exit_gate, GATE_OBJECTIVES)
        s(self, "gate_coef", fields.number("gate_coef", self.gate_coef, lo=0.0, hi=100.0))
        s(
            self,
            "gate_prior",
            fields.number("gate_prior", self.gate_prior, lo=0.0, lo_open=True, hi=1.0, hi_open=True),
        )
        s(self, "gate_eps", fields.number("gate_eps", self.gate_eps, lo=0.0, hi=1.0, hi_open=True))
        defaults = {f.name: f.default for f in dataclasses.fields(self) if f.name.startswith("gate_")}
        needs = {"gate_coef": GATE_OBJECTIVES[1:], "gate_prior": ("geometric",), "gate_eps": ("act",)}
        for name, default in defaults.items():
            if getattr(self, name) != default and gate not in needs[name]:
                raise ConfigError(
                    f"{name}: only with exit_gate {' or '.join(needs[name])}; with exit_gate {gate}: "
                    f"{default} (the default); got {getattr(self, name)}"
                )
        if gate == "none":
            return
        if self.loop_sampler != "fixed":
            raise ConfigError(
                f"exit_gate: needs a fixed loop count R (loop_sampler fixed): with {self.loop_sampler} the rows' "
                "counts differ, so R, the last round of the exit distribution, is undefined; accepted: none"
            )
        if self.loops < 2:
            raise ConfigError(
                f"exit_gate: needs a looped model (loops >= 2: rounds to exit from); with loops {self.loops} "
                "(a plain transformer) accepted: none"
            )

    def _check_value_embeds(self) -> None:
        ve = self.value_embeds
        if isinstance(ve, str):
            fields.choice("value_embeds", ve, VALUE_EMBED_RULES)
            return
        if not isinstance(ve, list | tuple):
            raise ConfigError(
                f"value_embeds: expected one of {', '.join(VALUE_EMBED_RULES)} or a list of layer indices;"
                f" got {ve!r}"
            )
        idx = tuple(fields.integer("value_embeds", i, lo=0) for i in ve)
        if any(i >= self.n_layers for i in idx) or len(set(idx)) != len(idx):
            raise ConfigError(
                f"value_embeds: indices must be distinct and in 0..{self.n_layers - 1}; got {list(idx)}"
            )
        object.__setattr__(self, "value_embeds", tuple(sorted(idx)))

    def _check_rounds(self) -> None:
        rs = self.rounds
        if isinstance(rs, RoundConfig):
            rs = (rs,)
        if not isinstance(rs, list | tuple) or not rs:
            raise ConfigError("rounds: expected a non-empty list of round settings (round 1, round 2, ...)")
        rs = tuple(
            r if isinstance(r, RoundConfig) else RoundConfig.from_dict(r, f"rounds[{i}]")
            for i, r in enumerate(rs)
        )
        first = rs[0]
        if first.reuse_kv:
            raise ConfigError(
                "rounds[0].reuse_kv: round 1 has no earlier keys/values to reuse; accepted: false"
            )
        for i, r in enumerate(rs):
            for n, what in ((self.n_heads, "heads"), (self.mlp_ratio * self.d_model, "MLP units")):
                if abs(r.width * n - round(r.width * n)) > 1e-9 or round(r.width * n) < 1:
                    raise ConfigError(
                        f"rounds[{i}].width: {r.width} of {n} {what} is not a whole number >= 1"
                    )
            if r.reuse_kv:
                if not first.attention:
                    raise ConfigError(f"rounds[{i}].reuse_kv: round 1 is MLP-only, so it has no keys/values")
                if r.width > first.width:
                    raise ConfigError(f"rounds[{i}].width: a reuse_kv round cannot be wider than round 1")
                if first.window is not None and (r.window is None or r.window > first.window):
                    raise ConfigError(
                        f"rounds[{i}].window: a reuse_kv round must not see further back than round 1's "
                        f"window ({first.window}); got {r.window}"
                    )
        object.__setattr__(self, "rounds", rs)

    # ---- derived -------------------------------------------------------------------------------

    @property
    def n_layers(self) -> int:
        """Distinct layers (prelude + recurrent + coda)."""
        return self.n_prelude + self.n_recurrent + self.n_coda

    @property
    def mlp_hidden(self) -> int:
        return self.mlp_ratio * self.d_model

    def round(self, r: int) -> RoundConfig:
        """Settings of round r (0-based): the last entry repeats for every later round."""
        return self.rounds[min(r, len(self.rounds) - 1)]

    def round_heads(self, r: int) -> int:
        return round(self.round(r).width * self.n_heads)

    def round_hidden(self, r: int) -> int:
        return round(self.round(r).width * self.mlp_hidden)

    def round_settings(self, r: int) -> RoundSettings:
        """Round r's settings (0-based) with its heads and hidden units resolved."""
        return RoundSettings(self.round(r), self.round_heads(r), self.round_hidden(r))

    @property
    def full_settings(self) -> RoundSettings:
        """What prelude and coda layers run with: full context, every head and hidden unit."""
        return RoundSettings(FULL_ROUND, self.n_heads, self.mlp_hidden)

    @property
    def timestep_round_count(self) -> int:
        """Rounds with their own timestep parameters (0 without timestep): `timestep_rounds`, or when
        None `loops` for the fixed sampler and 2 * `loops` for the Poisson samplers."""
        if self.timestep == "none":
            return 0
        if self.timestep_rounds is not None:
            return self.timestep_rounds
        return self.loops if self.loop_sampler == "fixed" else 2 * self.loops

    def timestep_index(self, r: int) -> int:
        """Which round's timestep parameters round r (0-based) uses: its own up to the last trained
        one, then the last one's (the rule beyond `timestep_round_count`)."""
        return min(r, self.timestep_round_count - 1)

    @property
    def rounds_alike(self) -> bool:
        """Every round runs the same function of its input: one round setting and no per-round
        parameters. Only then may a sample's rounds run at other global round indices (the aligned
        schedule of `model.rounds`)."""
        return len(self.rounds) == 1 and self.timestep == "none"

    @property
    def random_h0(self) -> bool:
        """The rounds start from a random state (the diagonal injection); else from e."""
        return self.injection == "diagonal"

    @property
    def initial_state_std(self) -> float:
        """Std of the initial state h0: `h0_std`, or sqrt(2 / (5 d_model)) (0.0228 at 768) when None,
        as the reference draws it (the "small init" std of its embedding)."""
        return self.h0_std if self.h0_std is not None else math.sqrt(2.0 / (5.0 * self.d_model))

    def value_embed_layers(self) -> tuple[int, ...]:
        """Distinct-layer indices (0..n_layers-1) that carry a value-embedding table."""
        ve, n = self.value_embeds, self.n_layers
        if ve == "none":
            return ()
        if ve == "all":
            return tuple(range(n))
        if ve == "alternate":
            return tuple(i for i in range(n) if i % 2 == (n - 1) % 2)
        return tuple(ve)

    # ---- serialisation -------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["rounds"] = [r.to_dict() for r in self.rounds]
        if isinstance(self.value_embeds, tuple):
            d["value_embeds"] = list(self.value_embeds)
        return d

    def to_json(self) -> str:
        """Canonical JSON: sorted keys, no whitespace. Equal configs give equal strings."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelConfig:
        return cls(**fields.known_keys("model", d, cls))

    @classmethod
    def from_json(cls, s: str) -> ModelConfig:
        return cls.from_dict(json.loads(s))
