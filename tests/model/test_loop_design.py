"""The loop-design variants (injection strengths, history, timestep conditioning) and the layout presets
(base_loop, core_loop, non_loop): every variant builds from a dict, decodes equal to its forward, runs
mixed loop counts like solo runs, truncates backprop exactly, counts its parameters and FLOPs exactly
and runs deeper than its trained rounds; the formulas hold on hand-built cases (identity blocks)."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from looplab.families.looped.model import LoopedLM
from looplab.model.config import ModelConfig
from looplab.model.contexts import SeqContext
from looplab.model.counts import arch_summary, once_and_recurrent_params, param_count, timestep_params
from looplab.model.errors import ConfigError
from looplab.model.flops import training_flops
from looplab.model.presets import LOOP_LAYOUTS, loop_layout, loop_layout_overrides, preset
from tests.model.conftest import randomize
from tests.model.test_decode import assert_decode_equals_forward
from tests.model.test_flops import SMALL, assert_flop_model_matches_counter

VARIANTS: dict[str, dict] = {
    "injection none": {"injection": "none"},
    "injection scalar": {"injection": "scalar"},
    "injection channel": {"injection": "channel"},
    "injection dense": {"injection": "dense"},
    "injection diagonal": {"injection": "diagonal"},
    "history 1": {"history": 1},
    "history 2": {"history": 2},
    "loop_gate": {"timestep": "loop_gate"},
    "branch_gate": {"timestep": "branch_gate"},
    "adaln": {"timestep": "adaln"},
    "history 1 + loop_gate": {"history": 1, "timestep": "loop_gate"},
    "dense + history 2 + adaln": {"injection": "dense", "history": 2, "timestep": "adaln"},
}
LAYOUTS = ("base_loop", "core_loop")
CASES = [(layout, name) for layout in LAYOUTS for name in VARIANTS]


def _cfg(layout: str, name: str, **extra) -> ModelConfig:
    return loop_layout(layout, 2, 4, **{**VARIANTS[name], **extra})


def _model(cfg: ModelConfig, seed: int = 0) -> LoopedLM:
    torch.manual_seed(seed)
    return randomize(LoopedLM(cfg), seed)


def _idx(B: int = 2, T: int = 24, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 256, (B, T), generator=torch.Generator().manual_seed(seed))


def _reference_states(m: LoopedLM, idx, n: int, h0_seed: int, skip=None, grad_window=None):
    """The rounds written out from the formulas, apart from `LoopedLM._loop` and `round_states`:
    every state difference kept (oldest first), round r reads the newest cfg.history of them; a skipped
    round is the identity; rounds before the last `grad_window` are cut from the graph (state and
    differences detached). -> (states h_0..h_n, ctx)."""
    cfg = m.cfg
    ctx = SeqContext(*m._rope(idx.shape[1]))
    x, inj = m._stem(idx, ctx)
    h = m._h0(idx.shape[0], torch.arange(idx.shape[1]), h0_seed, x) if cfg.injection == "diagonal" else x
    states, diffs = [h], []
    for r in range(n):
        past = tuple(reversed(diffs[-cfg.history :])) if cfg.history else ()
        timestep = (
            () if m.timestep is None else m.timestep.round_tensors(min(r, cfg.timestep_round_count - 1))
        )
        new = h if r == skip else m._round(h, inj, idx, ctx, r, past, timestep)
        diffs.append(new - h)
        h = new
        if grad_window is not None and r < n - grad_window:
            h, diffs = h.detach(), [d.detach() for d in diffs]
        states.append(h)
    return states, ctx


# ---- every variant ------------------------------------------------------------------------------


@pytest.mark.parametrize("layout, name", CASES)
def test_builds_from_a_dict_and_round_trips(layout, name):
    cfg = _cfg(layout, name)
    assert ModelConfig.from_dict(json.loads(cfg.to_json())) == cfg
    assert ModelConfig.from_dict({**preset(layout).to_dict(), **VARIANTS[name]}) == cfg
    assert preset(layout, **VARIANTS[name]) == cfg
    for key, value in VARIANTS[name].items():
        assert cfg.to_dict()[key] == value


@pytest.mark.parametrize("layout, name", CASES)
def test_decode_equals_full_forward_also_beyond_the_trained_rounds(layout, name):
    m = _model(_cfg(layout, name), seed=1).eval()
    idx = _idx(T=16, seed=1)
    assert_decode_equals_forward(m, idx, h0_seed=3, prefill=5)
    assert_decode_equals_forward(m, idx, loops=7, h0_seed=3)  # 3 rounds past timestep_rounds = 4


@pytest.mark.parametrize("layout, name", CASES)
def test_mixed_loop_counts_equal_solo_runs(layout, name):
    m = _model(_cfg(layout, name)).eval()
    idx = _idx(B=3)
    counts = torch.tensor([2, 6, 1])
    with torch.no_grad():
        out = m(idx, loops=counts, h0_seed=4)
        for b, n in enumerate(counts.tolist()):
            solo = m(idx[b : b + 1], loops=n, h0_seed=4)
            torch.testing.assert_close(out.logits[b], solo.logits[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("layout, name", CASES)
def test_truncated_backprop_equals_the_detached_reference(layout, name):
    """grad_rounds = 2 of 4: the gradients equal the reference's, which cuts the graph before the last
    two rounds; per-round timestep parameters of the first two rounds get none."""
    m = _model(_cfg(layout, name, grad_rounds=2))
    idx = _idx()
    m(idx, targets=idx, h0_seed=2).loss.backward()
    got = {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}
    m.zero_grad(set_to_none=True)
    states, ctx = _reference_states(m, idx, 4, 2, grad_window=2)
    logits = m._tail(states[-1], idx, ctx)
    F.cross_entropy(logits.view(-1, logits.shape[-1]), idx.view(-1)).backward()
    want = {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}
    assert got.keys() == want.keys()
    for key in want:
        torch.testing.assert_close(got[key], want[key], atol=1e-5, rtol=1e-4, msg=key)
    if m.history is not None:
        assert got["history.weight"].abs().sum() > 0
    for key, grad in got.items():
        if key.startswith("timestep."):
            per_round = grad.reshape(4, -1).abs().sum(1)  # rows = rounds 1..4
            assert per_round[:2].eq(0).all() and per_round[2:].gt(0).all(), (key, per_round)


@pytest.mark.parametrize("layout, name", CASES)
def test_param_count_groups_and_the_once_recurrent_split(layout, name):
    cfg = _cfg(layout, name)
    m = LoopedLM(cfg)
    total = sum(p.numel() for p in m.parameters())
    tables = sum(p.numel() for p in m.embedding_params())
    assert param_count(cfg) == {"total": total, "non_embedding": total - tables}
    ids = [id(p) for group in m.param_groups().values() for p in group]
    assert len(ids) == len(set(ids)) == len(list(m.parameters()))
    assert len(m.param_groups()["matrix"]) == 6 * cfg.n_layers  # the new parameters go to "other"
    split = once_and_recurrent_params(cfg)
    timestep = sum(p.numel() for n, p in m.named_parameters() if n.startswith("timestep."))
    assert timestep == timestep_params(cfg)
    assert split["n_rec"] == sum(p.numel() for p in m.recurrent.parameters()) + timestep
    assert split["n_once"] + split["n_rec"] == total - tables
    summary = arch_summary(cfg, 4)
    assert (summary["n_once"], summary["n_rec"]) == (split["n_once"], split["n_rec"])


FLOP_CASES = {
    **{f"{layout} {name}": (_cfg(layout, name, **SMALL), 4) for layout, name in CASES},
    "history 2 + branch_gate, truncated": (
        _cfg("core_loop", "history 2", **SMALL, timestep="branch_gate", grad_rounds=2),
        4,
    ),
    "dense + loop_gate, mixed counts (staggered)": (
        _cfg("core_loop", "history 1 + loop_gate", **SMALL, injection="dense", loop_sampler="poisson_seq"),
        [2, 5, 3],
    ),
    "history 2, mixed counts (aligned), truncated": (
        _cfg("base_loop", "history 2", **SMALL, loop_sampler="poisson_seq", grad_rounds=2),
        [2, 5, 3],
    ),
}


@pytest.mark.parametrize("name", list(FLOP_CASES))
def test_flop_model_matches_flop_counter_mode(name):
    assert_flop_model_matches_counter(*FLOP_CASES[name], name)


def test_sampler_expectation_of_a_timestep_variant_matches_the_staggered_scheduler():
    """Per-round parameters force the staggered schedule; the expected FLOPs follow it."""
    from tests.model.test_flops import _monte_carlo

    cfg = _cfg("core_loop", "loop_gate", **SMALL, loop_sampler="poisson_seq", grad_rounds=2)
    expected = training_flops(cfg, 8)
    total, rounds, grads, _ = _monte_carlo(cfg, 8, 2000)
    assert expected.mean_rounds == pytest.approx(rounds, rel=0.02)
    assert expected.mean_grad_rounds == pytest.approx(grads, rel=0.02)
    assert expected.total == pytest.approx(total, rel=0.01)
    aligned = training_flops(
        _cfg("core_loop", "history 1", **SMALL, loop_sampler="poisson_seq", grad_rounds=2), 8
    )
    assert aligned.mean_grad_rounds < expected.mean_grad_rounds  # at most 2 rounds with autograd there


@pytest.mark.parametrize("layout, name", CASES)
def test_round_states_end_in_the_forward_and_follow_the_reference(layout, name):
    m = _model(_cfg(layout, name), seed=2).eval()
    idx = _idx()
    with torch.no_grad():
        states = m.round_states(idx, 6, h0_seed=1)
        assert states.shape == (7, 2, 24, m.cfg.d_model)
        logits = m._tail(states[-1], idx, SeqContext(*m._rope(24)))
        torch.testing.assert_close(logits, m(idx, loops=6, h0_seed=1).logits, atol=1e-5, rtol=1e-5)
        skipped = m.round_states(idx, 6, h0_seed=1, skip_round=2)
        reference, _ = _reference_states(m, idx, 6, 1, skip=2)
    assert torch.equal(skipped[3], skipped[2])  # round 3 is the identity
    torch.testing.assert_close(skipped, torch.stack(reference), atol=1e-5, rtol=1e-5)
    assert not torch.allclose(skipped[-1], states[-1], atol=1e-4)


# ---- the formulas on identity blocks (the init: every output projection zero) ---------------------


def _identity_block_states(cfg: ModelConfig, params: dict) -> torch.Tensor:
    """round_states of an untrained model (every block the identity) with `params` (name -> value)
    copied in."""
    m = LoopedLM(cfg)
    with torch.no_grad():
        for key, value in params.items():
            m.get_parameter(key).copy_(value)
        return m.round_states(_idx(B=1, T=8), 4)


@pytest.mark.parametrize("kind", ["scalar", "channel", "dense"])
def test_injection_formulas_with_identity_blocks(kind):
    """h_0 = e, x_t = h_{t-1} + a e (a scalar, a channel vector, or W e): the identity block keeps x_t."""
    d = 64
    weight = {
        "scalar": torch.tensor(0.5),
        "channel": torch.linspace(-1, 1, d),
        "dense": torch.randn(d, d, generator=torch.Generator().manual_seed(0)) / 8,
    }[kind]
    cfg = loop_layout("base_loop", 2, 4, injection=kind)
    states = _identity_block_states(cfg, {"input_injection.weight": weight})
    e = states[0]
    drive = e @ weight.T if kind == "dense" else weight * e
    for t in range(5):
        torch.testing.assert_close(states[t], e + t * drive, atol=1e-5, rtol=1e-5)


def test_history_formula_with_identity_blocks():
    """x_t = h_{t-1} + a e + m_1 (h_{t-1} - h_{t-2}) + m_2 (h_{t-2} - h_{t-3}); missing differences are 0."""
    d = 64
    m1, m2 = torch.linspace(0, 1, d), torch.full((d,), -0.25)
    cfg = loop_layout("base_loop", 2, 4, injection="scalar", history=2)
    states = _identity_block_states(cfg, {"history.weight": torch.stack([m1, m2])})
    e = states[0]
    want = [e]
    for t in range(1, 5):
        x = want[-1] + e
        if t >= 2:
            x = x + m1 * (want[-1] - want[-2])
        if t >= 3:
            x = x + m2 * (want[-2] - want[-3])
        want.append(x)
    torch.testing.assert_close(states, torch.stack(want), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "kind, key, off",
    [
        ("loop_gate", "timestep.gate", 0.0),  # g_t = 0: h_t = x_t
        ("branch_gate", "timestep.gate", 0.0),  # both branches closed
        ("adaln", "timestep.scale", -1.0),  # norm(x) * (1 - 1) = 0: attention and MLP of zero are zero
    ],
)
def test_a_round_whose_timestep_parameters_switch_it_off_passes_its_input(kind, key, off):
    """Random blocks, timestep_rounds 3: switching round 2's parameters off makes round 2 the identity on
    its input x_2 = h_1 + e; switching round 3's off does it for every round from 3 on (the rule beyond)."""
    cfg = loop_layout("core_loop", 2, 4, injection="scalar", timestep=kind, timestep_rounds=3)
    m = _model(cfg)
    idx = _idx(B=1, T=8)
    with torch.no_grad():
        m.input_injection.weight.fill_(1.0)
        e = m.round_states(idx, 0)[0]
        param = m.get_parameter(key)
        param.fill_(1.0 if kind != "adaln" else 0.0)
        if kind == "adaln":
            m.timestep.shift.zero_()
        param[1] = off
        states = m.round_states(idx, 5)
        assert torch.allclose(states[2], states[1] + e, atol=1e-6)
        assert not torch.allclose(states[3], states[2] + e, atol=1e-3)
        param[1], param[2] = param[0], off
        states = m.round_states(idx, 5)
    assert not torch.allclose(states[2], states[1] + e, atol=1e-3)
    for t in (3, 4, 5):
        assert torch.allclose(states[t], states[t - 1] + e, atol=1e-6), t


def test_beyond_the_trained_rounds_the_last_trained_parameters_repeat():
    """timestep_rounds 2 at 5 rounds equals timestep_rounds 5 whose rounds 3..5 copy round 2's."""
    short = _model(loop_layout("core_loop", 2, 2, timestep="adaln", history=1, timestep_rounds=2))
    long = LoopedLM(loop_layout("core_loop", 2, 2, timestep="adaln", history=1, timestep_rounds=5))
    state = short.state_dict()
    for key in ("timestep.scale", "timestep.shift"):
        state[key] = torch.cat([state[key], state[key][1:].expand(3, -1, -1, -1)])
    long.load_state_dict(state)
    idx = _idx()
    with torch.no_grad():
        torch.testing.assert_close(
            short(idx, loops=5, h0_seed=0).logits, long(idx, loops=5, h0_seed=0).logits
        )
        assert not torch.allclose(
            short(idx, loops=5, h0_seed=0).logits, short(idx, loops=2, h0_seed=0).logits
        )


@pytest.mark.parametrize("layout", LAYOUTS)
def test_at_init_the_variants_equal_their_plain_forms(layout):
    """scalar, channel and dense are h + e at init; history (m = 0) and branch_gate / adaln (gates one,
    scale and shift zero) change nothing; loop_gate (g = 1) only the rounding."""
    idx = _idx()

    def logits(**over):
        torch.manual_seed(5)  # equal draws: the new parameters are deterministic at init
        m = LoopedLM(loop_layout(layout, 2, 4, **over))
        with torch.no_grad():
            for blk in m.recurrent:  # non-zero outputs, so the blocks are not the identity
                blk.attn.o.weight.normal_(0, 0.1)
                blk.mlp.proj.weight.normal_(0, 0.1)
            return m(idx, h0_seed=0).logits

    scalar = logits(injection="scalar")
    assert torch.equal(logits(injection="channel"), scalar)
    torch.testing.assert_close(logits(injection="dense"), scalar, atol=1e-6, rtol=1e-6)
    assert not torch.allclose(logits(injection="none"), scalar, atol=1e-3)
    plain = logits()
    assert torch.equal(logits(history=2), plain)
    assert torch.equal(logits(timestep="branch_gate"), plain)
    assert torch.equal(logits(timestep="adaln"), plain)
    torch.testing.assert_close(logits(timestep="loop_gate"), plain, atol=1e-6, rtol=1e-6)


# ---- config fields and the layout presets -----------------------------------------------------------


@pytest.mark.parametrize(
    "change, field",
    [
        ({"injection": "gated"}, "injection"),
        ({"history": -1}, "history"),
        ({"history": 1.5}, "history"),
        ({"timestep": "film"}, "timestep"),
        ({"timestep": "loop_gate", "timestep_rounds": 0}, "timestep_rounds"),
        ({"timestep_rounds": 4}, "timestep_rounds"),  # without a timestep it means nothing
    ],
)
def test_bad_loop_design_fields_name_the_field(change, field):
    with pytest.raises(ConfigError, match=field):
        preset("base_loop", **change)


def test_timestep_rounds_default_and_loops_one():
    assert preset("base_loop", timestep="adaln").timestep_round_count == 4
    assert preset("parcae", timestep="adaln").timestep_round_count == 16  # Poisson mean 8: 2 x 8
    assert preset("base_loop", timestep="adaln", timestep_rounds=6).timestep_round_count == 6
    assert preset("base_loop").timestep_round_count == 0
    assert not preset("base_loop", timestep="loop_gate").rounds_alike and preset("base_loop").rounds_alike
    one = _model(preset("non_loop", timestep="branch_gate"))  # a timestep with loops = 1 is fine
    with torch.no_grad():
        assert one(_idx(), loops=3).logits.isfinite().all()


def test_layouts_are_their_recipes_and_compare_at_equal_depth():
    for layout in LOOP_LAYOUTS:
        shared, loops = (8, 1) if layout == "non_loop" else (2, 4)
        assert loop_layout(layout, shared, loops) == preset(layout)
        for recipe in LOOP_LAYOUTS:  # the recipes differ only in the layout keys
            assert preset(recipe, **loop_layout_overrides(layout, shared, loops)) == preset(layout)
    core = preset("core_loop")
    assert (core.n_prelude, core.n_recurrent, core.n_coda, core.injection) == (2, 2, 2, "diagonal")
    base = preset("base_loop")
    assert (base.n_prelude, base.n_coda, base.injection, base.value_embeds) == (0, 0, "none", "none")
    members = [loop_layout("base_loop", 2, 4), loop_layout("base_loop", 4, 2), loop_layout("non_loop", 8, 1)]
    assert {arch_summary(cfg, 8)["effective_depth"] for cfg in members} == {8.0}
    assert len({training_flops(cfg, 8).total for cfg in members}) == 1  # equal compute per token
    params = [param_count(cfg)["non_embedding"] for cfg in members]
    assert params[0] < params[1] < params[2]
    custom = loop_layout("core_loop", 3, 2, prelude=1, coda=0, injection="channel")
    assert (custom.n_prelude, custom.n_recurrent, custom.n_coda, custom.injection) == (1, 3, 0, "channel")


@pytest.mark.parametrize(
    "args, kwargs, field",
    [
        (("loop", 2, 4), {}, "layout"),
        (("non_loop", 8, 2), {}, "loops"),
        (("base_loop", 0, 4), {}, "shared"),
        (("core_loop", 2, 4), {"prelude": -1}, "prelude"),
        (("base_loop", 2, 4), {"size": "huge"}, "size"),
        (("base_loop", 2, 4), {"n_recurrent": 3}, "n_recurrent"),
    ],
)
def test_bad_layout_arguments_name_the_field(args, kwargs, field):
    with pytest.raises(ConfigError, match=field):
        loop_layout(*args, **kwargs)


# ---- compiled training ----------------------------------------------------------------------------


@pytest.fixture
def fresh_compiler():
    from torch._dynamo.utils import counters

    from looplab.model.attention import clear_mask_cache

    torch._dynamo.reset()
    counters.clear()
    clear_mask_cache()
    yield
    torch._dynamo.reset()


@pytest.mark.slow  # docs/testing.md: one more compile, of the loop-design modules
def test_compiled_training_equals_eager_with_history_and_timestep(fresh_compiler):
    """History and per-round parameters reach the compiled round as tensors: no graph per round index;
    one per number of history differences (0..w) and autograd variant; none new for other loop counts."""
    from tests.model.test_compile import _graph_breaks, _graphs, _train_pair

    over = dict(n_prelude=1, n_recurrent=1, n_coda=1, history=2, timestep="loop_gate", injection="scalar")
    model, compiled, _ = _train_pair("core_loop", (0,), **over)
    warm = _graphs()
    assert _graph_breaks() == 0 and warm <= 2 + 3 * (model.cfg.history + 1)
    with torch._dynamo.config.patch(error_on_recompile=True):
        for loops in ([1, 1], [3, 9], 12):
            idx, targets = torch.randint(0, 256, (2, 2, 64))
            compiled(idx, targets=targets, loops=loops).loss.backward()
    assert _graphs() == warm and _graph_breaks() == 0
