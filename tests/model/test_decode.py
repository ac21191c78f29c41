"""Incremental decoding equals the full forward; the cache holds exactly what kv_cache_bytes says."""

from __future__ import annotations

import pytest
import torch

from looplab.families.looped.decode import generate
from looplab.families.looped.model import LoopedLM
from looplab.model.counts import kv_cache_bytes
from looplab.model.kv_cache import LayerKey
from looplab.model.presets import RECIPES, preset
from tests.model.conftest import randomize
from tests.tier import fast_few

T = 64  # tiny windows are 16 and 32 tokens: the ring buffers wrap 4 and 2 times


def assert_decode_equals_forward(
    m: LoopedLM, idx: torch.Tensor, loops: int | None = None, h0_seed: int = 7, prefill: int = 0
) -> None:
    """Prefill the first `prefill` tokens (none: decode from position 0), then decode the rest one token
    at a time: every position's logits equal the full forward's at `loops` rounds (None: cfg.loops)."""
    B, length = idx.shape
    with torch.no_grad():
        full = m(idx, loops=loops, h0_seed=h0_seed).logits  # (B, T, V)
    cache = m.setup_cache(B, length, loops=loops, h0_seed=h0_seed)
    if prefill:
        torch.testing.assert_close(
            m.prefill(idx[:, :prefill], cache), full[:, :prefill], atol=1e-4, rtol=1e-4
        )
    for t in range(prefill, length):
        torch.testing.assert_close(m.decode_step(idx[:, t], cache), full[:, t], atol=1e-4, rtol=1e-4)
    assert int(cache.pos) == length


@pytest.mark.parametrize("recipe", fast_few(RECIPES))
def test_decode_equals_full_forward_at_every_position(recipe):
    cfg = preset(recipe, "tiny")
    m = randomize(LoopedLM(cfg), seed=1).eval()
    idx = torch.randint(0, cfg.vocab_size, (2, T), generator=torch.Generator().manual_seed(0))
    assert_decode_equals_forward(m, idx, h0_seed=7)


@pytest.mark.parametrize("recipe", ["lean", "lean_all64", "reuse_kv", "parcae"])
def test_prefill_then_decode_equals_full_forward(recipe):
    cfg = preset(recipe, "tiny")
    m = randomize(LoopedLM(cfg), seed=2).eval()
    idx = torch.randint(0, cfg.vocab_size, (3, T), generator=torch.Generator().manual_seed(1))
    assert_decode_equals_forward(m, idx, loops=3, h0_seed=0, prefill=37)


def test_generate_greedy_matches_argmax_of_full_forward():
    m = randomize(LoopedLM(preset("lean", "tiny")), seed=3).eval()
    prompt = torch.randint(0, 256, (2, 5), generator=torch.Generator().manual_seed(2))
    out = generate(m, prompt, max_new_tokens=20, h0_seed=0)
    assert out.shape == (2, 25) and torch.equal(out[:, :5], prompt)
    with torch.no_grad():
        logits = m(out, h0_seed=0).logits
    assert torch.equal(logits[:, 4:-1].argmax(-1), out[:, 5:])


@pytest.mark.parametrize("recipe", RECIPES)
def test_kv_cache_bytes_equals_allocated(recipe):
    cfg = preset(recipe, "tiny")
    m = LoopedLM(cfg)
    for ctx, batch, dtype, loops in [
        (64, 2, torch.float32, None),
        (40, 3, torch.bfloat16, 6),
        (8, 1, torch.float32, 2),
    ]:
        cache = m.setup_cache(batch, ctx, dtype=dtype, loops=loops)
        assert cache.nbytes() == kv_cache_bytes(cfg, ctx, batch, dtype, loops=loops)
        assert all(s.k.dtype == dtype for s in cache.sets.values())


def test_kv_cache_layout_follows_the_rounds():
    """Windowed rounds keep `window` slots; MLP-only and reuse rounds keep none; half width half the heads."""
    ctx = 64

    def sets(recipe):
        return LoopedLM(preset(recipe, "tiny")).setup_cache(1, ctx).sets

    lean = sets("lean")
    key = LayerKey.recurrent
    assert lean[key(0, 0)].k.shape[2] == ctx and lean[key(3, 1)].k.shape[2] == 16
    assert key(1, 0) not in sets("mlp_only") and key(1, 0) not in sets("reuse_kv")
    assert sets("half_width")[key(2, 0)].k.shape[1] == 1
    assert LayerKey.prelude(1) in lean and LayerKey.coda(0) in lean and LayerKey.prelude(2) not in lean
    fixed4, plain = (
        kv_cache_bytes(preset("fixed4", "144m"), 16000, 1),
        kv_cache_bytes(preset("plain", "144m"), 16000, 1),
    )
    assert fixed4 == 2 * plain  # 4 prelude/coda + 4 rounds x 2 = 12 vs 6 full layers


@pytest.mark.parametrize("recipe", ["lean", "lean_all64", "parcae"])
def test_warm_up_leaves_every_cache_slot_unchanged_after_a_prefill(recipe):
    """What the CUDA-graph capture does before capturing, on CPU: after a prefill that wraps the ring
    buffers of windowed rounds (37 tokens, windows 16 and 32), warm-up steps leave no trace."""
    from looplab.model.decode_graph import warm_up_without_trace

    cfg = preset(recipe, "tiny")
    m = randomize(LoopedLM(cfg), seed=5).eval()
    idx = torch.randint(0, cfg.vocab_size, (2, T), generator=torch.Generator().manual_seed(3))
    cache = m.setup_cache(2, T, h0_seed=0)
    m.prefill(idx[:, :37], cache)
    before = {key: (s.k.clone(), s.v.clone(), s.slot_pos.clone()) for key, s in cache.sets.items()}
    warm_up_without_trace(m, cache, idx[:, 37], steps=3)
    assert int(cache.pos) == 37
    for key, s in cache.sets.items():
        assert torch.equal(s.k, before[key][0]) and torch.equal(s.v, before[key][1]), key
        assert torch.equal(s.slot_pos, before[key][2]), key
    with torch.no_grad():
        full = m(idx, h0_seed=0).logits
    for t in range(37, T):  # and decoding goes on exactly as without the warm-up
        torch.testing.assert_close(m.decode_step(idx[:, t], cache), full[:, t], atol=1e-4, rtol=1e-4)


def test_decode_step_casts_into_a_cache_of_another_dtype():
    cfg = preset("lean", "tiny")
    m = randomize(LoopedLM(cfg), seed=6).eval()
    idx = torch.randint(0, cfg.vocab_size, (2, 24), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        full = m(idx, h0_seed=0).logits
    cache = m.setup_cache(2, 24, dtype=torch.bfloat16, h0_seed=0)  # fp32 model, bf16 cache
    for t in range(24):
        torch.testing.assert_close(m.decode_step(idx[:, t], cache), full[:, t], atol=0.1, rtol=0.05)


@pytest.mark.parametrize("recipe", RECIPES)
def test_decode_under_bf16_autocast_equals_the_forward(recipe):
    cfg = preset(recipe, "tiny")
    m = randomize(LoopedLM(cfg), seed=7).eval()
    idx = torch.randint(0, cfg.vocab_size, (2, 20), generator=torch.Generator().manual_seed(5))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        full = m(idx, h0_seed=0).logits
        cache = m.setup_cache(2, 20, dtype=torch.bfloat16, h0_seed=0)
        steps = torch.stack([m.decode_step(idx[:, t], cache) for t in range(20)], dim=1)
    assert steps.dtype == torch.float32 and torch.isfinite(steps).all()
    torch.testing.assert_close(steps, full, atol=0.15, rtol=0.05)
