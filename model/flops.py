"""Training FLOPs of a looped LM per token, counted from the config alone (no model is built).

What is counted: every matrix multiply (2 FLOPs per multiply-add) and the attention scores and
weighted values (Q K^T and P V, 2 * 2 * head_dim per (query, key) pair and head). Left out: norms,
RoPE, softmax, activations, the value-embedding add, the loss and the optimizer (elementwise, small
next to the matmuls), and embedding lookups (no arithmetic). `torch.utils.flop_counter.FlopCounterMode`
counts the same things; tests/model/test_flops.py checks the two agree on real training steps.

Per token and layer application with h heads of head_dim D, m MLP units, model width d:
    q, k, v, o   2 d (h D) each; a reuse_kv round computes q and o only (round 1's keys and values)
    ve gate      2 * 32 h on layers with a value embedding (not in reuse_kv rounds)
    attention    2 * 2 h D * pairs / T, with `pairs` the (query, key) pairs of a T-token sequence
    MLP          2 d m + 2 m d (an MLP-only round has only this)
plus once per forward the injection's B and C (2 d^2 each; the dense injection's W e: 2 d^2) and the
head (2 d V). Backward costs twice the forward (the gradients of both operands of every matmul,
including P V and Q K^T). The scalar/channel injections, the history maps and the timestep
conditioning are elementwise: no FLOPs counted.

Attention conventions (`attention=`):
- "dense" (default): every (query, key) pair handed to the attention call, masked or not. Full context
  counts T x T (what FlopCounterMode counts for SDPA, and the 6N + 12 L T d convention of MFU figures);
  a windowed round counts what the CPU path of `model.attention.attention` lays out: the dense band
  (T x T) below the block-local threshold, blocks of S queries against 2S keys above it. (Fused causal
  kernels skip key blocks past the diagonal, the CPU flash kernel too: they compute about half of a
  causal T x T; GPU FlexAttention computes the 128-key tiles that touch the window. Neither is modelled.)
- "causal": only the pairs the mask lets through, T(T+1)/2 causal, sum of min(t+1, window) windowed:
  the least any kernel must compute.

Loop counts and truncated backprop follow `model.rounds` exactly: every global round of a forward
runs for all its rows (a forward with per-sequence counts runs max(count) rounds, the padded ones
included); only the rounds `plan_rounds` runs with autograd cost a backward. `training_flops` takes the
expectation over the loop sampler for a batch size; `step_flops` counts one step with given counts.
`padding_waste` = the fraction of recurrent-round FLOPs (forward + backward) spent on rounds outside a
sequence's own: 0 for fixed and per-batch sampling. From `training_flops` it is an expectation, a
planning figure; `step_flops` with a step's real counts and forwards measures it (the trainer reports
that one, per step), and `useful` (each row's own rounds) is what MFU counts, `total` what HFU counts.

Micro-batches: a step whose rows run in several forwards (`model.rounds.forward_sizes`) pads each
forward to its own largest count only. `step_flops(..., forwards=)` counts a given split exactly (the
row indices of each forward); `training_flops(..., micro_batch_size=, bucketing=, ranks=)` takes the
expectation of the trainer's split (workers/train/batching.py): without bucketing a forward holds s rows
drawn independently, whose largest count has CDF F^s; with bucketing the rows are sorted by count and
cut in order, so the forward holding sorted positions a+1..a+s (1 = the largest count) has the
(a+1)-th largest count of the batch as its own largest: P(it runs round g) = P(N_g >= a+1), N_g ~
Binomial(B, 1 - F(g)) the number of rows with more than g rounds (`_sorted_forward`).

Per-token exits (`model.exits`): `readout_flops` is what the kl / entropy / argmax rules spend per
compared round (readout C, coda, head), `exit_flops` the forward FLOPs per token of an exit-round
distribution with the rule's readouts, and `equivalent_rounds` the fixed depth that spends as much.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from looplab.model import fields
from looplab.model.attention import cpu_block_size, use_block_local
from looplab.model.config import VE_GATE_CHANNELS, ModelConfig, RoundSettings
from looplab.model.rounds import forward_sizes, loop_counts, plan_rounds

ATTENTION_CONVENTIONS = ("dense", "causal")
BACKWARD_FACTOR = 2.0  # backward = gradients of both operands of every matmul = 2x the forward
_TAIL = 1e-15  # the loop-count distribution is summed until P(more rounds) falls below this


# ---- forward FLOPs per token of each part ---------------------------------------------------------


def attention_pairs(seq_len: int, window: int | None, attention: str = "dense") -> float:
    """(query, key) pairs scored for one head over a `seq_len`-token sequence (see the module docstring)."""
    fields.choice("attention", attention, ATTENTION_CONVENTIONS)
    T = seq_len
    full = window is None or window >= T  # `attention` runs full causal SDPA then
    if attention == "causal":
        return T * (T + 1) / 2 if full else window * (window + 1) / 2 + (T - window) * window
    if full or not use_block_local(T, window):
        return float(T * T)
    block = cpu_block_size(window)
    return -(-T // block) * block * 2 * block  # ceil(T / S) blocks (the tail padded) of S x 2S


def layer_flops(
    cfg: ModelConfig, settings: RoundSettings, value_embed: bool, seq_len: int, attention: str = "dense"
) -> float:
    """Forward FLOPs per token of one layer application with `settings` (module docstring)."""
    d, head_dim = cfg.d_model, cfg.head_dim
    width = settings.heads * head_dim  # channels of the heads used
    flops = 4.0 * d * settings.hidden  # MLP fc + proj
    round_cfg = settings.round
    if round_cfg.attention:
        flops += 2 * 2 * d * width  # q, o
        if not round_cfg.reuse_kv:
            flops += 2 * 2 * d * width  # k, v
            if value_embed:
                flops += 2 * min(VE_GATE_CHANNELS, d) * settings.heads
        window = round_cfg.window
        flops += 4.0 * width * attention_pairs(seq_len, window, attention) / seq_len
    return flops


def _value_embed_flags(cfg: ModelConfig) -> list[bool]:
    ve = set(cfg.value_embed_layers())
    return [i in ve for i in range(cfg.n_layers)]


def prelude_flops(cfg: ModelConfig, seq_len: int, attention: str = "dense") -> float:
    ve = _value_embed_flags(cfg)
    return sum(layer_flops(cfg, cfg.full_settings, ve[i], seq_len, attention) for i in range(cfg.n_prelude))


def coda_flops(cfg: ModelConfig, seq_len: int, attention: str = "dense") -> float:
    ve, first = _value_embed_flags(cfg), cfg.n_prelude + cfg.n_recurrent
    return sum(
        layer_flops(cfg, cfg.full_settings, ve[first + i], seq_len, attention) for i in range(cfg.n_coda)
    )


def round_flops(cfg: ModelConfig, round_index: int, seq_len: int, attention: str = "dense") -> float:
    """Forward FLOPs per token of one application of the recurrent block with round `round_index`'s
    settings (0-based)."""
    ve, settings = _value_embed_flags(cfg), cfg.round_settings(round_index)
    return sum(
        layer_flops(cfg, settings, ve[cfg.n_prelude + j], seq_len, attention) for j in range(cfg.n_recurrent)
    )


def injection_flops(cfg: ModelConfig) -> float:
    """B e' before the rounds and the readout C h after them (once per forward each); the dense
    injection's W e once; the other injections are elementwise (0)."""
    matrices = {"diagonal": 2, "dense": 1}.get(cfg.injection, 0)
    return matrices * 2.0 * cfg.d_model**2


def head_flops(cfg: ModelConfig) -> float:
    return 2.0 * cfg.d_model * cfg.vocab_size


# ---- the breakdown ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PartFlops:
    forward: float
    backward: float

    @property
    def total(self) -> float:
        return self.forward + self.backward


@dataclass(frozen=True)
class FlopBreakdown:
    """Training FLOPs per token (forward + backward) by part; `rounds[g]` is global round g (expected
    over the sampler for `training_flops`: P(it runs) x its FLOPs)."""

    prelude: PartFlops
    injection: PartFlops
    rounds: tuple[PartFlops, ...]
    coda: PartFlops
    head: PartFlops
    padding_waste: float
    mean_rounds: float  # global rounds run forward per step (a row-weighted mean over its forwards)
    mean_grad_rounds: float  # of which with autograd
    gate: PartFlops = PartFlops(0.0, 0.0)  # a learned exit's extra readouts and gate heads (`gate_flops`)

    def parts(self) -> list[PartFlops]:
        return [self.prelude, self.injection, *self.rounds, self.coda, self.head, self.gate]

    @property
    def forward(self) -> float:
        return sum(part.forward for part in self.parts())

    @property
    def backward(self) -> float:
        return sum(part.backward for part in self.parts())

    @property
    def total(self) -> float:
        return self.forward + self.backward

    @property
    def recurrent(self) -> float:
        return sum(part.total for part in self.rounds)

    @property
    def padded(self) -> float:
        """Recurrent FLOPs spent on rounds outside a row's own count (the padding)."""
        return self.padding_waste * self.recurrent

    @property
    def useful(self) -> float:
        """FLOPs of each row's own rounds, the padding left out: what model-FLOPs utilisation counts
        (`total`, padding included, is what the hardware computed)."""
        return self.total - self.padded


def _breakdown(
    cfg: ModelConfig,
    seq_len: int,
    attention: str,
    run: Sequence[float],
    grad: Sequence[float],
    own: tuple[Sequence[float], Sequence[float]] | None,
    prelude_grad: float,
) -> FlopBreakdown:
    """Assemble per-token FLOPs from the schedule: `run[g]` / `grad[g]` = fraction of the batch's
    sequences for which global round g runs forward / backward (the whole batch when it runs at all);
    `own` = the same two for a sequence's own j-th round (the useful part), None when they equal
    `run` and `grad` (no padding); `prelude_grad` = probability that the gradient reaches the prelude."""
    distinct = [round_flops(cfg, r, seq_len, attention) for r in range(len(cfg.rounds))]  # the last repeats
    per_round = [distinct[min(g, len(distinct) - 1)] for g in range(len(run))]
    rounds = tuple(PartFlops(p * f, BACKWARD_FACTOR * q * f) for p, q, f in zip(run, grad, per_round))
    waste = 0.0
    if own is not None:
        computed = sum(part.total for part in rounds)
        useful = sum((p + BACKWARD_FACTOR * q) * f for p, q, f in zip(*own, per_round, strict=False))
        waste = max(0.0, (computed - useful) / computed) if computed > 0 else 0.0

    def once(forward: float, backward_probability: float) -> PartFlops:
        return PartFlops(forward, BACKWARD_FACTOR * backward_probability * forward)

    return FlopBreakdown(
        prelude=once(prelude_flops(cfg, seq_len, attention), prelude_grad),
        injection=once(injection_flops(cfg), 1.0),
        rounds=rounds,
        coda=once(coda_flops(cfg, seq_len, attention), 1.0),
        head=once(head_flops(cfg), 1.0),
        padding_waste=waste,
        mean_rounds=float(sum(run)),
        mean_grad_rounds=float(sum(grad)),
        gate=once(gate_flops(cfg, seq_len, attention), 1.0),
    )


def gate_flops(cfg: ModelConfig, seq_len: int, attention: str = "dense") -> float:
    """Forward FLOPs per token a learned exit adds to a training forward (`model.exit_gate`): rounds
    1..R-1 read out (R's readout is the forward's own output), each a `readout_flops` (about a round
    at small widths), and the gate head on every round's state (2 d each). 0 without a gate."""
    if cfg.exit_gate == "none":
        return 0.0
    R = cfg.loops
    return (R - 1) * readout_flops(cfg, seq_len, attention) + R * 2.0 * cfg.d_model


def _resolved_seq_len(cfg: ModelConfig, seq_len: int | None, attention: str) -> int:
    fields.choice("attention", attention, ATTENTION_CONVENTIONS)
    return cfg.seq_len if seq_len is None else fields.integer("seq_len", seq_len, lo=1)


def step_flops(
    cfg: ModelConfig,
    counts,
    seq_len: int | None = None,
    attention: str = "dense",
    forwards: Sequence[Sequence[int]] | None = None,
) -> FlopBreakdown:
    """FLOPs per token of one training step whose sequences run `counts` rounds (an int for the whole
    batch or one count per sequence), scheduled by `model.rounds.plan_rounds` as the model does.
    `forwards`: the row indices of each forward the step runs (micro-batches; every row once), None =
    one forward of the whole batch; each forward pads its rows to its own largest count."""
    seq_len = _resolved_seq_len(cfg, seq_len, attention)
    batch = len(counts) if isinstance(counts, list | tuple) else 1
    counts = loop_counts(counts, batch)
    per_seq = [counts] * batch if isinstance(counts, int) else counts
    if forwards is None:
        forwards = [range(batch)]
    if sorted(r for rows in forwards for r in rows) != list(range(batch)):
        raise ValueError(f"forwards: expected every row 0..{batch - 1} exactly once")
    k = cfg.grad_rounds
    n = max(per_seq)
    run_rows, grad_rows = [0] * n, [0] * n  # rows whose forward runs global round g (with autograd)
    prelude = 0.0
    for rows in forwards:
        part = loop_counts([per_seq[r] for r in rows], len(rows))
        plan = plan_rounds(part, k, True, rounds_share_settings=cfg.rounds_alike)
        for g in range(plan.n_rounds):
            run_rows[g] += len(rows)
            grad_rows[g] += len(rows) if plan.grad[g] else 0
        prelude += len(rows) / batch * _prelude_gets_grad(cfg, plan)
    run, grad = [r / batch for r in run_rows], [r / batch for r in grad_rows]
    own_run = [sum(c > j for c in per_seq) / batch for j in range(n)]
    own_grad = [sum(c > j and (k is None or j >= c - k) for c in per_seq) / batch for j in range(n)]
    own = None if (own_run, own_grad) == (run, grad) else (own_run, own_grad)
    return _breakdown(cfg, seq_len, attention, run, grad, own, prelude)


def _prelude_gets_grad(cfg: ModelConfig, plan) -> float:
    """Whether backward reaches the prelude. With an injection always (B e' or a e enters every round).
    Without one the prelude output is the state h: gradient reaches it only if h still depends on it (with
    autograd) at the first round run with autograd. A round without autograd replaces h by its output,
    except for the sequences it holds still (`torch.where` keeps their h and its graph)."""
    if cfg.injection != "none":
        return 1.0
    alive = True
    for g in range(plan.n_rounds):
        if plan.grad[g]:
            return 1.0 if alive else 0.0
        alive = alive and plan.active is not None and not plan.all_active[g]
    return 0.0


def _clamped_poisson_cdf(mean: float, upto: int) -> list[float]:
    """P(count <= j) for j = 0..upto, count = max(1, Poisson(mean)) as `LoopedLM.sample_loops` draws."""
    cdf, total = [], 0.0
    for j in range(upto + 1):
        total += math.exp(-mean + j * math.log(mean) - math.lgamma(j + 1))
        cdf.append(0.0 if j == 0 else min(total, 1.0))
    return cdf


def training_flops(
    cfg: ModelConfig,
    batch_size: int,
    seq_len: int | None = None,
    attention: str = "dense",
    micro_batch_size: int | None = None,
    bucketing: bool = False,
    ranks: int = 1,
) -> FlopBreakdown:
    """Training FLOPs per token expected over the loop sampler at `batch_size` sequences per step, run
    in the forwards `model.rounds.forward_sizes(batch_size, micro_batch_size, ranks)` (default: one
    forward of the whole batch), the rows sorted by loop count first with `bucketing`.

    With c the loop count (CDF F) and n a forward's max (CDF F^s for s rows sampled per sequence, one
    draw per step for per-batch sampling), global round g runs forward with P(n > g). With gradient
    through the last k rounds: the aligned schedule (one round setting) runs g with autograd when
    g < n <= g + k; the staggered one when some sequence has c in [g+1, g+k], P = 1 - (1 - F(g+k) +
    F(g))^s. A sequence's own round j runs with P(c > j) and needs gradient with probability
    F(j+k) - F(j). Sorted forwards: the same events for order statistics (`_sorted_forward`)."""
    seq_len = _resolved_seq_len(cfg, seq_len, attention)
    batch_size = fields.integer("batch_size", batch_size, lo=1)
    sizes = forward_sizes(batch_size, micro_batch_size, ranks)
    if cfg.loop_sampler == "fixed":
        return step_flops(cfg, cfg.loops, seq_len, attention)
    sequences = batch_size if cfg.loop_sampler == "poisson_seq" else 1  # independent draws per step
    mean, k = float(cfg.loops), cfg.grad_rounds
    upto = int(mean + 40 * math.sqrt(mean) + 60)
    cdf = _clamped_poisson_cdf(mean, upto + (k or 0))

    def cdf_at(j: int) -> float:
        return cdf[min(j, len(cdf) - 1)]

    def in_window(j: int) -> float:  # P(a sequence's own round j is in its gradient window)
        return 1.0 - cdf_at(j) if k is None else cdf_at(j + k) - cdf_at(j)

    n_rounds = next((g for g in range(upto) if 1.0 - cdf_at(g) ** sequences < _TAIL), upto)
    own_run = [1.0 - cdf_at(j) for j in range(n_rounds)]
    own_grad = [in_window(j) for j in range(n_rounds)]
    if sequences == 1:  # the whole batch runs one count: no padding
        return _breakdown(cfg, seq_len, attention, own_run, own_grad, None, _prelude_grad(cfg, cdf_at, 1))

    def drawn_forward(s: int) -> tuple[list[float], list[float], float]:
        """(run, grad, prelude) of a forward of s independently drawn rows."""
        run = [1.0 - cdf_at(g) ** s for g in range(n_rounds)]
        if k is None:
            grad = run
        elif cfg.rounds_alike:  # aligned: the last k global rounds
            grad = [cdf_at(g + k) ** s - cdf_at(g) ** s for g in range(n_rounds)]
        else:
            grad = [1.0 - (1.0 - in_window(g)) ** s for g in range(n_rounds)]
        return run, grad, _prelude_grad(cfg, cdf_at, s)

    if bucketing and len(sizes) > 1:
        starts = [sum(sizes[:i]) for i in range(len(sizes))]
        tails = [_binomial_tail(batch_size, 1.0 - cdf_at(g)) for g in range(n_rounds + (k or 0) + 1)]
        parts = [_sorted_forward(cfg, cdf_at, tails, n_rounds, a, s) for a, s in zip(starts, sizes)]
    else:
        drawn = {s: drawn_forward(s) for s in set(sizes)}
        parts = [drawn[s] for s in sizes]
    run, grad, prelude = [0.0] * n_rounds, [0.0] * n_rounds, 0.0
    for s, (part_run, part_grad, part_prelude) in zip(sizes, parts):
        share = s / batch_size
        run = [r + share * p for r, p in zip(run, part_run)]
        grad = [r + share * p for r, p in zip(grad, part_grad)]
        prelude += share * part_prelude
    return _breakdown(cfg, seq_len, attention, run, grad, (own_run, own_grad), prelude)


def _binomial_tail(n: int, p: float) -> list[float]:
    """P(N >= j) for j = 0..n+1, N ~ Binomial(n, p)."""
    if p <= 0.0 or p >= 1.0:
        return [1.0] * (1 if p <= 0.0 else n + 1) + [0.0] * (n + 1 if p <= 0.0 else 1)
    log_p, log_q, log_n = math.log(p), math.log1p(-p), math.lgamma(n + 1)
    pmf = [
        math.exp(log_n - math.lgamma(t + 1) - math.lgamma(n - t + 1) + t * log_p + (n - t) * log_q)
        for t in range(n + 1)
    ]
    tail = [0.0] * (n + 2)
    for t in range(n, -1, -1):
        tail[t] = tail[t + 1] + pmf[t]
    return tail


def _sorted_forward(cfg: ModelConfig, cdf_at, tails, n_rounds: int, a: int, s: int):
    """(run, grad, prelude) of the forward holding sorted positions a+1..a+s of a bucketed batch of B
    rows (1 = the largest count). tails[g][j] = P(N_g >= j), N_g = rows with more than g rounds.

    It runs round g when its largest count (the (a+1)-th largest) exceeds g: P(N_g >= a+1). Aligned
    gradient: that count in (g, g+k]. Staggered: some of its rows has c in [g+1, g+k]; with A = N_{g+k}
    rows above the window and C = N_g - A in it, sorted positions A+1..A+C fall in the window, so none
    of a+1..a+s does iff A + C <= a, or A >= a + s, or C = 0 (disjoint when C = 0 is taken with
    a < A < a + s: P(C = 0, A = t) = C(B, t) (1 - F(g+k))^t F(g)^(B-t)). The prelude gets gradient
    (no injection) when its smallest count, the (a+s)-th largest, is at most k: P(N_k <= a+s-1)."""
    k, batch = cfg.grad_rounds, len(tails[0]) - 2
    run = [tails[g][a + 1] for g in range(n_rounds)]
    if k is None:
        grad = run
    elif cfg.rounds_alike:
        grad = [tails[g][a + 1] - tails[g + k][a + 1] for g in range(n_rounds)]
    else:
        grad = []
        for g in range(n_rounds):
            above, below = 1.0 - cdf_at(g + k), cdf_at(g)
            held = sum(_binomial_term(batch, t, above, below) for t in range(a + 1, a + s))
            grad.append(max(0.0, 1.0 - ((1.0 - tails[g][a + 1]) + tails[g + k][a + s] + held)))
    if cfg.injection != "none" or k is None:
        return run, grad, 1.0
    return run, grad, 1.0 - tails[k][a + s]


def _binomial_term(n: int, t: int, p: float, q: float) -> float:
    """C(n, t) p^t q^(n - t) (p + q need not be 1), 0 when a zero base has a positive power."""
    if (p <= 0.0 and t > 0) or (q <= 0.0 and n - t > 0):
        return 0.0
    log = math.lgamma(n + 1) - math.lgamma(t + 1) - math.lgamma(n - t + 1)
    return math.exp(log + (t * math.log(p) if t else 0.0) + ((n - t) * math.log(q) if n - t else 0.0))


def _prelude_grad(cfg: ModelConfig, cdf_at, sequences: int) -> float:
    """Probability that backward reaches the prelude (see `_prelude_gets_grad`): always with the
    injection; without it when some sequence of the step has c <= k."""
    k = cfg.grad_rounds
    if cfg.injection != "none" or k is None:
        return 1.0
    return 1.0 - (1.0 - cdf_at(k)) ** sequences


# ---- adaptive compute: per-token exits (model.exits) -------------------------------------------------


def readout_flops(cfg: ModelConfig, seq_len: int, attention: str = "dense") -> float:
    """Forward FLOPs per token of reading a state out as next-token logits: the readout C (diagonal
    injection), the coda and the head. The kl, entropy and argmax exit rules spend one per round they
    compare (at 86m and 2,048 tokens about 2.6 recurrent rounds' worth)."""
    readout = 2.0 * cfg.d_model**2 if cfg.injection == "diagonal" else 0.0
    return readout + coda_flops(cfg, seq_len, attention) + head_flops(cfg)


@dataclass(frozen=True)
class ExitFlops:
    """Forward FLOPs per token of a forward with per-token exits, as a token-by-token implementation
    spends them (each token its own rounds and its rule's readouts; the dense emulation of
    `model.exits` computes every round for every token and spends more)."""

    rounds: float  # recurrent rounds, mean over tokens
    rule: float  # the exit rule's readouts beyond the output, mean over tokens
    total: float  # prelude, injection, rounds, rule, readout C, coda, head
    fixed: float  # the same forward at a fixed max_rounds, no rule
    equivalent_rounds: float  # the fixed depth of `reference` (interpolated) that spends `total`


def fixed_depth_flops(cfg: ModelConfig, rounds: float, seq_len: int, attention: str = "dense") -> float:
    """Forward FLOPs per token at a fixed depth of `rounds` (a fraction interpolates the next round)."""
    whole = math.floor(rounds)
    per_round = [round_flops(cfg, r, seq_len, attention) for r in range(whole + 1)]
    rest = prelude_flops(cfg, seq_len, attention) + injection_flops(cfg) + coda_flops(cfg, seq_len, attention)
    return rest + head_flops(cfg) + sum(per_round[:whole]) + (rounds - whole) * per_round[whole]


def equivalent_rounds(cfg: ModelConfig, flops: float, seq_len: int, attention: str = "dense") -> float:
    """The fixed depth n (a real number: linear within a round) at which `cfg`'s forward spends `flops`
    per token; 0 below the cost of the forward without rounds."""
    remaining = flops - fixed_depth_flops(cfg, 0, seq_len, attention)
    n = 0
    while remaining > 0:
        cost = round_flops(cfg, n, seq_len, attention)
        if remaining <= cost:
            return n + remaining / cost
        remaining -= cost
        n += 1
    return float(n)


def exit_flops(
    cfg: ModelConfig,
    exit_share: dict[int, float],
    rule,
    seq_len: int,
    reference: ModelConfig | None = None,
    attention: str = "dense",
) -> ExitFlops:
    """FLOPs per token of `cfg` (the model under its KV strategy) when a fraction `exit_share[e]` of the
    tokens stops after round e (1-based; the fractions sum to 1), under `rule` (a `model.exits.ExitRule`:
    its readouts per token are `model.exits.readouts_per_token`). `equivalent_rounds` is measured
    against `reference` (default `cfg`): the trained model, whose fixed-depth curve is the depth sweep's."""
    from looplab.model.exits import readouts_per_token

    R = rule.max_rounds
    per_round = [round_flops(cfg, r, seq_len, attention) for r in range(R)]
    rounds = sum(share * sum(per_round[:e]) for e, share in exit_share.items())
    readouts = sum(share * readouts_per_token(rule, e) for e, share in exit_share.items())
    rule_flops = readouts * readout_flops(cfg, seq_len, attention)
    total = fixed_depth_flops(cfg, 0, seq_len, attention) + rounds + rule_flops
    return ExitFlops(
        rounds=rounds,
        rule=rule_flops,
        total=total,
        fixed=fixed_depth_flops(cfg, R, seq_len, attention),
        equivalent_rounds=equivalent_rounds(reference or cfg, total, seq_len, attention),
    )
