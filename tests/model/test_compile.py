"""Compiled training (`LoopedLM.compile_parts`): equal to eager for every recipe, with a bounded number
of compiled graphs however the loop counts change, and no graph breaks.

Most tests compile with `backend="aot_eager"`: the compiler's tracing and autograd split run in full
(the parts that decide which graphs exist and how gradients flow) without code generation, so they
take seconds. The `slow` ones run the default inductor backend; the CUDA ones live in tests/gpu/.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch._dynamo.utils import counters

from looplab.families.looped.model import LoopedLM
from looplab.model.attention import clear_mask_cache, prepare_masks
from looplab.model.geometry import rel_update
from looplab.model.presets import RECIPES, preset
from tests.model.conftest import forward_states, randomize
from tests.tier import fast_few

B, T = 2, 64  # the tiny size's sequence length


@pytest.fixture(autouse=True)
def _fresh_compiler():
    """Every test starts with an empty compile cache, zeroed counters and no attention masks: graph
    counts are per test, one test's graphs never count against another's recompile limit, and the
    compiled parts must find (or build) their masks themselves."""
    torch._dynamo.reset()
    counters.clear()
    clear_mask_cache()
    yield
    torch._dynamo.reset()


def _cfg(recipe: str, **overrides):
    """The tiny size with one layer per part: the recipes differ only in their rounds, and compile
    time grows with the number of traced operations."""
    return preset(recipe, "tiny", **{"n_prelude": 1, "n_recurrent": 1, "n_coda": 1, **overrides})


def _graphs() -> int:
    return counters["stats"]["unique_graphs"]


def _graph_breaks() -> int:
    return sum(counters["graph_break"].values())


def _graph_bound(model: LoopedLM) -> int:
    """stem + tail, and per distinct round setting at most three round graphs: no_grad, grad from a
    state without gradient (h0, or after truncated rounds), grad from a state with gradient."""
    return 2 + 3 * len({model.settings_round(r) for r in range(len(model.cfg.rounds))})


def _train_pair(recipe: str, steps, backend: str = "aot_eager", **cfg_overrides):
    """Train an eager model and a compiled copy side by side (plain SGD) on the same batches, loop
    counts and h0 draws; after every step assert equal losses and gradients. Returns (eager model,
    compiled copy, loop counts per step)."""
    eager = randomize(LoopedLM(_cfg(recipe, **cfg_overrides)), seed=0)
    twin = copy.deepcopy(eager)
    compiled = twin.compile_parts(backend=backend)
    gen = torch.Generator().manual_seed(1)
    rtol = 1e-5 if backend == "aot_eager" else 1e-4  # inductor reorders fp32 reductions
    seen = []
    for step in steps:
        tokens = torch.randint(0, eager.cfg.vocab_size, (B, T + 1), generator=gen)
        idx, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()  # as the trainer's batches
        loops = eager.sample_loops(B, step, seed=0)  # (B,) on the CPU, as the trainer passes them
        seen.append(loops.tolist())
        losses, grads = [], []
        # the compiled copy first: it must not depend on the eager run having built the masks
        for model, forward in ((twin, compiled), (eager, eager)):
            torch.manual_seed(step)  # h0 is drawn fresh from the global RNG, as in training
            loss = forward(idx, targets=targets, loops=loops).loss
            loss.backward()
            losses.append(loss.detach())
            grads.append({n: p.grad for n, p in model.named_parameters() if p.grad is not None})
        (got_loss, want_loss), (got_grads, want_grads) = losses, grads
        torch.testing.assert_close(got_loss, want_loss, rtol=rtol, atol=1e-6)
        assert got_grads.keys() == want_grads.keys()
        for name, want in want_grads.items():
            scale = want.abs().max().clamp_min(1e-8)  # relative to the tensor's largest entry
            err = (got_grads[name] - want).abs().max() / scale
            assert err < 10 * rtol, f"{recipe} step {step}: {name} differs by {err:.2e} of its max"
        with torch.no_grad():
            for model in (eager, twin):
                for p in model.parameters():
                    if p.grad is not None:
                        p.sub_(0.1 * p.grad)  # the next step's graphs must see the new weights
                model.zero_grad(set_to_none=True)
    return eager, compiled, seen


@pytest.mark.parametrize("recipe", fast_few(RECIPES))
def test_compiled_training_equals_eager_for_every_recipe(recipe):
    """Three steps equal to eager (changing loop counts for the Poisson samplers); then new loop
    counts (per batch and per sample), a mask built for another length (as evaluation does) and a
    second compiled copy of the model (as the time budget's calibration makes) compile nothing new."""
    steps = (0, 1, 2)
    model, compiled, seen = _train_pair(recipe, steps)
    if model.cfg.loop_sampler != "fixed":
        assert len({tuple(c) for c in seen}) == len(steps), seen  # the loop counts really changed
    warm = _graphs()
    assert 3 <= warm <= _graph_bound(model) and _graph_breaks() == 0
    for window in {rc.window for rc in model.cfg.rounds}:
        prepare_masks(T // 2, window, torch.device("cpu"))  # the mask cache changes: no guard may fail
    with torch._dynamo.config.patch(error_on_recompile=True):
        for loops, forward in (
            ([1, 1], compiled),
            ([3, 9], compiled),
            (12, copy.deepcopy(model).compile_parts(backend="aot_eager")),
        ):
            idx, targets = torch.randint(0, 256, (2, B, T))
            forward(idx, targets=targets, loops=loops).loss.backward()
    assert _graphs() == warm and _graph_breaks() == 0


@pytest.mark.slow  # docs/testing.md: a second recurrent layer doubles the traced graph
def test_reused_keys_of_every_recurrent_layer_flow_between_compiled_rounds():
    """reuse_kv with two recurrent layers: round 1 hands each layer's K, V to the later rounds' graph."""
    model, _, _ = _train_pair("reuse_kv", (0, 1), n_recurrent=2)
    assert _graph_breaks() == 0 and _graphs() <= _graph_bound(model)


@pytest.mark.parametrize(
    "T, window, device",
    [
        (64, 16, "cpu"),
        (1024, 32, "cpu"),
        (64, 64, "cpu"),
    ],
)
def test_prepare_masks_builds_what_attention_then_uses(T, window, device):
    """Dense band, block-local band, no mask (window >= T), Flex block mask: after `prepare_masks`,
    attention over T tokens finds its mask and builds nothing."""
    from looplab.model import attention as attn

    attn.prepare_masks(T, window, torch.device(device))
    prepared = set(attn._MASKS)
    q, k, v = torch.randn(3, 1, 2, T, 16, device=device)
    attn.attention(q, k, v, window)
    assert set(attn._MASKS) == prepared and len(prepared) == (window < T)


def test_compiled_round_states_and_eval_forward_equal_eager():
    """Outside training: no-grad forwards (every round without autograd), and the state after every
    round (the per-round geometry) equal to the eager forward's."""
    model = randomize(LoopedLM(_cfg("lean")), seed=3).eval()
    compiled = model.compile_parts(backend="aot_eager")
    idx = torch.randint(0, 256, (B, T))
    with torch.no_grad():
        want = model(idx, loops=[2, 5], h0_seed=4)
        got = compiled(idx, loops=[2, 5], h0_seed=4)
        want_states = forward_states(model, idx, loops=[2, 5], h0_seed=4)
        got_states = forward_states(model, idx, through=compiled, loops=[2, 5], h0_seed=4)
    torch.testing.assert_close(got.logits, want.logits, rtol=1e-5, atol=1e-5)
    assert got_states.shape == want_states.shape == (6, B, T, model.cfg.d_model)
    torch.testing.assert_close(rel_update(got_states), rel_update(want_states), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got_states, want_states, rtol=1e-5, atol=1e-5)


def test_rounds_with_equal_settings_share_one_graph():
    """fixed4's rounds 1 and 2+ have equal settings: both map to round 0's graph; lean's differ."""
    fixed = LoopedLM(_cfg("fixed4"))
    assert [fixed.settings_round(r) for r in range(6)] == [0] * 6
    lean = LoopedLM(_cfg("lean"))
    assert [lean.settings_round(r) for r in range(6)] == [0, 1, 1, 1, 1, 1]


def test_the_compiled_parts_are_what_runs(monkeypatch):
    """A stand-in compiler that records what it wraps: the three parts, with dynamic=False; the model
    itself is not compiled, and the model's forward stays uncompiled."""
    wrapped = []

    def fake_compile(fn, **kwargs):
        wrapped.append((fn.__name__, kwargs))
        return fn

    model = LoopedLM(_cfg("parcae"))
    monkeypatch.setattr(torch, "compile", fake_compile)
    compiled = model.compile_parts(mode="max-autotune")
    assert [name for name, _ in wrapped] == ["_stem_part", "_round_part", "_tail_part"]
    assert all(kw == {"dynamic": False, "mode": "max-autotune"} for _, kw in wrapped)
    assert compiled.model is model and model.forward.__func__ is LoopedLM.forward


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["lean", "parcae"])
def test_inductor_training_equals_eager(recipe):
    """The default backend (inductor, C++ code generation on CPU): a windowed and a per-sample recipe."""
    model, _, _ = _train_pair(recipe, (0, 1), backend="inductor", n_recurrent=2)
    assert _graph_breaks() == 0 and 3 <= _graphs() <= _graph_bound(model)
