"""Per-token exit rules and KV strategies across rounds (model/exits.py, model/kv_cache.py): the
limits of every rule are the fixed-depth forwards bit for bit, a constructed model exits exactly where
its state converges, decoding given the full forward's exits reproduces it under every KV strategy,
an exited token's later rounds hold its last keys/values, bad settings are refused by name, and the
KV bytes and FLOPs per strategy are what the cache allocates and what the rounds cost."""

from __future__ import annotations

import math

import pytest
import torch

from looplab.families.looped.model import LoopedLM
from looplab.model.config import RoundConfig
from looplab.model.counts import kv_strategy_bytes
from looplab.model.errors import ConfigError
from looplab.model.exit_names import POST_HOC_RULES
from looplab.model.exits import (
    ExitRule,
    entropy,
    exit_decode_step,
    exit_forward,
    exit_prefill,
    kl_divergence,
    kv_view,
    readouts_per_token,
    relative_change,
    stable_count,
)
from looplab.model.flops import exit_flops, fixed_depth_flops, readout_flops, round_flops, step_flops
from looplab.model.kv_cache import LayerKey, strategy_config
from looplab.model.presets import RECIPES, preset
from tests.model.conftest import randomize
from tests.tier import FAST_RECIPES

T = 32
# every recipe, and the loop-design variants on BaseLoop (history and timestep change the round loop)
VARIANTS = [(r, {}) for r in RECIPES] + [
    ("base_loop", {"history": 1}),
    ("base_loop", {"timestep": "loop_gate"}),
    ("base_loop", {"timestep": "branch_gate"}),
    ("base_loop", {"timestep": "adaln", "injection": "channel"}),
]
STRATEGIES = [("per_round", None), ("latest", None), ("first", None), ("last_m", 2)]


def never(rule: str, lo: int, hi: int) -> ExitRule:
    """The rule at the threshold that never fires: eps 0 (argmax: k infinite)."""
    return ExitRule(rule, math.inf if rule == "argmax" else 0.0, lo, hi)


def always(rule: str, lo: int, hi: int) -> ExitRule:
    """The rule at the threshold that always fires: eps infinite (argmax: k = 0)."""
    return ExitRule(rule, 0 if rule == "argmax" else math.inf, lo, hi)


def model_of(recipe: str, seed: int = 1, **overrides) -> LoopedLM:
    return randomize(LoopedLM(preset(recipe, "tiny", **overrides)), seed=seed).eval()


def tokens(batch: int = 2, length: int = T, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 256, (batch, length), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize(
    "recipe, overrides",
    # every recipe in the full suite; the fast tier keeps tests/tier.py's recipes and the loop designs
    [
        pytest.param(r, o, marks=() if o or r in FAST_RECIPES else pytest.mark.slow, id=f"{r}-{o}")
        for r, o in VARIANTS
    ],
)
def test_threshold_limits_are_the_fixed_depth_forwards_bit_for_bit(recipe, overrides):
    """Threshold 0 (argmax: k = inf) = the fixed-depth forward at max_rounds; an infinite threshold
    (argmax: k = 0) = the forward at min_rounds; under per_round and latest alike, exactly."""
    m, idx = model_of(recipe, **overrides), tokens()
    with torch.no_grad():
        at_max, at_min = m(idx, loops=5, h0_seed=3).logits, m(idx, loops=3, h0_seed=3).logits
    for rule in POST_HOC_RULES:  # `gate` needs a gate: tests/model/test_exit_gate.py
        for strategy in ("per_round", "latest"):
            view = kv_view(m, strategy, 5)
            out = exit_forward(view, idx, never(rule, 3, 5), h0_seed=3)
            assert torch.equal(out.logits, at_max), (rule, strategy)
            assert (out.exit_round == 5).all()
            out = exit_forward(view, idx, always(rule, 3, 5), h0_seed=3)
            assert torch.equal(out.logits, at_min), (rule, strategy)
            assert (out.exit_round == 3).all()


@pytest.mark.parametrize("strategy, m", STRATEGIES[2:])
@pytest.mark.parametrize("recipe", ["parcae", "lean", "half_width"])
def test_first_and_last_m_change_the_function_and_their_limit_is_their_own_fixed_forward(recipe, strategy, m):
    model, idx = model_of(recipe), tokens()
    view = kv_view(model, strategy, 5, m)
    with torch.no_grad():
        own, trained = view(idx, loops=5, h0_seed=3).logits, model(idx, loops=5, h0_seed=3).logits
    assert not torch.allclose(own, trained, atol=1e-3)  # even without exits
    assert torch.equal(exit_forward(view, idx, never("kl", 2, 5), h0_seed=3).logits, own)


def channel_model(gains: list[float]) -> LoopedLM:
    """BaseLoop 2x4 with the channel injection at init (every block the identity: o and proj are zero),
    no prelude: h_0 = e = the token's embedding, h_t = h_{t-1} + a * e = e * (1 + t a). Token i's
    embedding is the unit vector of channel i, with injection gain a_i = gains[i], so its relative
    change at round t is a_i / (1 + (t - 1) a_i): known exactly."""
    m = LoopedLM(preset("base_loop", "tiny", injection="channel")).eval()
    with torch.no_grad():
        m.wte.weight.zero_()
        for i, gain in enumerate(gains):
            m.wte.weight[i, i] = 1.0
            m.input_injection.weight[i] = gain
    return m


def test_a_model_whose_state_converges_at_a_known_round_exits_exactly_there():
    # token 0: a = 1, change 1/t; token 1: a = 0.5, change 1/(t + 1); token 2: a = 0.25, 1/(t + 3)
    m = channel_model([1.0, 0.5, 0.25])
    idx = torch.tensor([[0, 1, 2, 0, 2, 1]])
    want = {0.3: [4, 3, 1], 0.2: [6, 5, 3], 0.55: [2, 2, 2]}  # first t >= 2 with change < eps
    for eps, rounds in want.items():
        out = exit_forward(m, idx, ExitRule("state", eps, 2, 8), h0_seed=0)
        expected = [max(2, rounds[i]) for i in idx[0].tolist()]
        assert out.exit_round[0].tolist() == expected, eps
        for pos, e in enumerate(expected):  # each token's output is the fixed-depth forward at its round
            with torch.no_grad():
                fixed = m(idx, loops=e, h0_seed=0).logits[0, pos]
            torch.testing.assert_close(out.logits[0, pos], fixed, rtol=0, atol=1e-6)
    # argmax: h_t = e (1 + t a) keeps its direction, so the top-1 never changes: counted from round
    # min_rounds - 1 = 1, it has been stable k rounds after round 1 + k
    for k in (1, 3, 5):
        out = exit_forward(m, idx, ExitRule("argmax", k, 2, 8), h0_seed=0)
        assert (out.exit_round == 1 + k).all()


@pytest.mark.parametrize("strategy, m", STRATEGIES)
@pytest.mark.parametrize("recipe", ["parcae", "lean", "lean_all64", "half_width", "mlp_only", "reuse_kv"])
def test_decoding_given_the_full_forwards_exits_equals_it(recipe, strategy, m):
    """Prefill 37 tokens (the ring buffers of windowed rounds wrap), then decode the rest one token at
    a time with the full forward's exit rounds: every position's logits are the full forward's."""
    model = kv_view(model_of(recipe, seed=2), strategy, 6, m)
    idx = tokens(2, 64, seed=1)
    full = exit_forward(model, idx, ExitRule("kl", 0.05, 2, 6), h0_seed=5)
    assert 2 < full.exit_round.float().mean() < 6  # the rule really stops tokens at different rounds
    cache = model.setup_cache(2, 64, loops=6, h0_seed=5)
    pre = exit_prefill(model, idx[:, :37], cache, exits=full.exit_round[:, :37])
    torch.testing.assert_close(pre.logits, full.logits[:, :37], atol=1e-4, rtol=1e-4)
    for t in range(37, 64):
        step = exit_decode_step(model, idx[:, t], cache, exits=full.exit_round[:, t])
        torch.testing.assert_close(step.logits, full.logits[:, t], atol=1e-4, rtol=1e-4)
        assert torch.equal(step.exit_round, full.exit_round[:, t])


def test_an_exited_token_offers_later_rounds_its_last_computed_keys_and_values():
    """In the cache a prefill with exits fills, the slots of every round after a token's exit hold its
    last computed round's keys and values; before it, each round's own (which differ)."""
    model, idx = model_of("parcae", seed=3), tokens(1, 16)
    exits = torch.tensor([[6, 2, 3, 6, 4, 2, 6, 5, 2, 6, 3, 6, 6, 2, 4, 6]])
    cache = model.setup_cache(1, 16, loops=6, h0_seed=1)
    exit_prefill(model, idx, cache, exits=exits)
    for pos, e in enumerate(exits[0].tolist()):
        for layer in range(model.cfg.n_recurrent):
            last = cache.sets[LayerKey.recurrent(e - 1, layer)]
            for r in range(e, 6):
                later = cache.sets[LayerKey.recurrent(r, layer)]
                assert torch.equal(later.k[:, :, pos], last.k[:, :, pos])
                assert torch.equal(later.v[:, :, pos], last.v[:, :, pos])
            if e > 1:
                before = cache.sets[LayerKey.recurrent(e - 2, layer)]
                assert not torch.equal(before.k[:, :, pos], last.k[:, :, pos])


@pytest.mark.parametrize("rule", list(POST_HOC_RULES))
def test_stopping_when_every_token_exited_changes_nothing(rule):
    """`stop` ends the rounds once no token runs: the same logits and exits as the masked forward, and a
    cache whose skipped rounds got the tokens' last keys/values (decoding goes on identically)."""
    model, idx = model_of("lean", seed=4), tokens(2, 24)
    rule = ExitRule(rule, 2 if rule == "argmax" else 0.5, 2, 7)
    masked = exit_forward(model, idx[:, :1], rule, h0_seed=2)
    stopped = exit_forward(model, idx[:, :1], rule, h0_seed=2, stop=True)
    assert torch.equal(stopped.logits, masked.logits) and torch.equal(stopped.exit_round, masked.exit_round)
    assert stopped.rounds_run == int(masked.exit_round.max()) and masked.rounds_run == 7
    caches = [model.setup_cache(2, 24, loops=7, h0_seed=2) for _ in range(2)]
    for cache, stop in zip(caches, (False, True)):
        exit_prefill(model, idx[:, :10], cache, rule, stop=stop)
        for t in range(10, 24):
            exit_decode_step(model, idx[:, t], cache, rule, stop=stop)
    for key, slots in caches[0].sets.items():
        assert torch.equal(slots.k, caches[1].sets[key].k) and torch.equal(slots.v, caches[1].sets[key].v), (
            key
        )


def test_the_criteria_on_hand_worked_values():
    h, prev = torch.tensor([[3.0, 4.0]]), torch.tensor([[0.0, 4.0]])
    assert relative_change(h, prev).tolist() == [0.75]  # |(3, 0)| / |(0, 4)|
    p = torch.tensor([0.5, 0.25, 0.25])
    q = torch.tensor([0.25, 0.25, 0.5])
    kl = 0.5 * math.log(2) + 0.25 * math.log(0.5)  # sum p log(p / q)
    assert kl_divergence(p.log(), q.log()).item() == pytest.approx(kl)
    assert kl_divergence(p.log(), p.log()).item() == 0.0
    # a KL that floats push below zero is clamped: log-probabilities of a distribution that sums past 1
    assert kl_divergence(torch.tensor([0.0, -30.0]), torch.tensor([1e-7, -30.0])).item() == 0.0
    assert entropy(torch.full((4,), 0.25).log()).item() == pytest.approx(math.log(4))
    assert entropy(torch.tensor([0.0, -math.inf])).item() == 0.0  # 0 log 0 = 0
    count = stable_count(torch.tensor([3, 5, 7]), torch.tensor([3, 4, 7]), torch.tensor([2, 2, 0]))
    assert count.tolist() == [3, 0, 1]


def test_bad_rules_strategies_and_bounds_are_refused_by_name():
    cases = [
        (
            lambda: ExitRule("halt", 0.1),
            "exit.rule: unknown 'halt'; accepted: state, kl, entropy, argmax, gate",
        ),
        (lambda: ExitRule("kl", -0.1), "exit.threshold: must be >= 0.0"),
        (lambda: ExitRule("kl", float("nan")), "exit.threshold: expected a number"),
        (lambda: ExitRule("state", "0.1"), "exit.threshold: expected a number"),
        (lambda: ExitRule("argmax", 2.5), "exit.threshold: argmax counts rounds"),
        (lambda: ExitRule("state", 0.1, min_rounds=1), "exit.min_rounds: must be >= 2"),
        (
            lambda: ExitRule("state", 0.1, min_rounds=4, max_rounds=3),
            r"exit.max_rounds: must be >= min_rounds \(4\)",
        ),
        (
            lambda: strategy_config(preset("lean"), "paged", 4),
            "kv_strategy: unknown 'paged'; accepted: per_round",
        ),
        (lambda: strategy_config(preset("lean"), "last_m", 4), "kv_m: last_m needs m"),
        (lambda: strategy_config(preset("lean"), "last_m", 4, 0), "kv_m: must be >= 1"),
        (lambda: strategy_config(preset("lean"), "first", 4, 2), "kv_m: only with kv_strategy last_m"),
        (
            lambda: strategy_config(
                preset("fixed4", rounds=(RoundConfig(attention=False), RoundConfig())), "first", 4
            ),
            "kv_strategy: first cannot share round 1's keys/values here: rounds.* round 1 is MLP-only",
        ),
    ]
    for make, message in cases:
        with pytest.raises(ConfigError, match=message):
            make()


def test_strategy_configs_turn_the_right_rounds_into_round1_readers():
    cfg = preset("lean", "tiny")  # round 1 full context, rounds 2+ windowed
    first = strategy_config(cfg, "first", 5)
    assert [first.round(r).reuse_kv for r in range(8)] == [False] + [True] * 7
    assert [first.round(r).window for r in range(5)] == [None, 16, 16, 16, 16]
    last2 = strategy_config(cfg, "last_m", 5, 2)  # rounds 4 and 5 keep their own; 2 and 3 read round 1's
    assert [last2.round(r).reuse_kv for r in range(6)] == [False, True, True, False, False, False]
    assert strategy_config(cfg, "last_m", 5, 4) is cfg and strategy_config(cfg, "latest", 5) is cfg
    view = kv_view(LoopedLM(cfg), "first", 5)
    assert view.cfg == first and all(a is b for a, b in zip(view.parameters(), view.parameters()))


@pytest.mark.parametrize("strategy, m", STRATEGIES)
@pytest.mark.parametrize("recipe", ["parcae", "lean", "half_width", "mlp_only", "reuse_kv"])
def test_kv_bytes_per_strategy_equal_the_allocated_buffers(recipe, strategy, m):
    model = LoopedLM(preset(recipe, "tiny"))
    view = kv_view(model, strategy, 5, m)
    for ctx, batch, dtype in [(64, 2, torch.float32), (40, 3, torch.bfloat16)]:
        cache = view.setup_cache(batch, ctx, dtype=dtype, loops=5)
        allocated, needed = kv_strategy_bytes(model.cfg, ctx, batch, strategy, 5, m, dtype=dtype)
        assert cache.nbytes() == allocated == needed


def test_latest_needs_only_the_computed_rounds():
    """parcae tiny: 2 heads x 32 dims, 2 recurrent layers; per token and layer application K and V are
    2 x 2 x 32 fp32 values = 512 bytes. At 64 tokens, batch 1, 4 rounds: prelude + coda 4 applications,
    rounds 4 x 2; half the tokens stop after round 2, half after round 4: rounds 3 and 4 are needed for
    half of them."""
    cfg = preset("parcae", "tiny")
    per_application = 2 * 2 * 32 * 4 * 64
    allocated, needed = kv_strategy_bytes(
        cfg, 64, 1, "latest", 4, dtype=torch.float32, exit_share={2: 0.5, 4: 0.5}
    )
    assert allocated == (4 + 4 * 2) * per_application
    assert needed == (4 + 2 * 2 + 2 * 2 * 0.5) * per_application
    assert kv_strategy_bytes(cfg, 64, 1, "per_round", 4, dtype=torch.float32, exit_share={2: 1.0}) == (
        allocated,
        allocated,
    )


def test_rule_cost_and_flops_spent_by_hand():
    cfg = preset("parcae", "tiny")
    rounds = [round_flops(cfg, r, 64) for r in range(6)]
    assert fixed_depth_flops(cfg, 4, 64) == step_flops(cfg, 4, seq_len=64).forward
    assert fixed_depth_flops(cfg, 2.5, 64) == pytest.approx(fixed_depth_flops(cfg, 2, 64) + 0.5 * rounds[2])
    kl = ExitRule("kl", 0.1, 3, 6)  # readouts after rounds 2..e (e < 6), or 2..5 when e = 6
    assert [readouts_per_token(kl, e) for e in (3, 4, 6)] == [1, 2, 4]
    assert readouts_per_token(ExitRule("state", 0.1, 3, 6), 4) == 0
    assert readouts_per_token(ExitRule("kl", 0.1, 4, 4), 4) == 0  # min = max: nothing to decide
    share = {3: 0.5, 6: 0.5}
    state = exit_flops(cfg, share, ExitRule("state", 0.1, 3, 6), 64)
    assert state.rounds == pytest.approx(0.5 * sum(rounds[:3]) + 0.5 * sum(rounds))
    assert state.rule == 0 and state.total == pytest.approx(fixed_depth_flops(cfg, 4.5, 64))
    assert state.equivalent_rounds == pytest.approx(4.5) and state.fixed == fixed_depth_flops(cfg, 6, 64)
    spent = exit_flops(cfg, share, kl, 64)
    assert spent.rule == pytest.approx((0.5 * 1 + 0.5 * 4) * readout_flops(cfg, 64))
    assert spent.equivalent_rounds == pytest.approx(4.5 + spent.rule / rounds[0])  # every round alike
    # the figure: at 86m a readout (C, coda, head) costs about 2.6 recurrent rounds
    big = preset("parcae", "86m")
    assert readout_flops(big, 2048) / round_flops(big, 0, 2048) == pytest.approx(2.62, abs=0.01)


def test_rounds_of_other_widths_hold_the_heads_they_have():
    """A narrow round 1 then full rounds, and full / half / full: the limits stay the fixed forwards
    and decoding given the exits reproduces the full forward (a stopped token's heads come from its
    last round that computed them)."""
    for rounds in [
        (RoundConfig(width=0.5), RoundConfig()),
        (RoundConfig(), RoundConfig(width=0.5), RoundConfig()),
    ]:
        model = randomize(LoopedLM(preset("fixed4", "tiny", rounds=rounds)), seed=1).eval()
        idx = tokens(2, 40)
        with torch.no_grad():
            at_max, at_min = model(idx, loops=5, h0_seed=0).logits, model(idx, loops=2, h0_seed=0).logits
        assert torch.equal(exit_forward(model, idx, never("state", 2, 5), h0_seed=0).logits, at_max)
        assert torch.equal(exit_forward(model, idx, always("state", 2, 5), h0_seed=0).logits, at_min)
        full = exit_forward(model, idx, ExitRule("state", 0.2, 2, 5), h0_seed=0)
        cache = model.setup_cache(2, 40, loops=5, h0_seed=0)
        exit_prefill(model, idx[:, :20], cache, exits=full.exit_round[:, :20])
        for t in range(20, 40):
            step = exit_decode_step(model, idx[:, t], cache, exits=full.exit_round[:, t])
            torch.testing.assert_close(step.logits, full.logits[:, t], atol=1e-4, rtol=1e-4)
