"""Incremental decoding equals the full forward; the cache holds exactly what kv_cache_bytes says."""

from __future__ import annotations

import pytest
import torch

from model.counts import kv_cache_bytes
from model.decode import generate
from model.looped import LoopedLM
from model.presets import RECIPES, preset
from tests.model.conftest import randomize

T = 64  # tiny windows are 16 and 32 tokens: the ring buffers wrap 4 and 2 times


@pytest.mark.parametrize("recipe", RECIPES)
def test_decode_equals_full_forward_at_every_position(recipe):
    cfg = preset(recipe, "tiny")
    m = randomize(LoopedLM(cfg), seed=1).eval()
    idx = torch.randint(0, cfg.vocab_size, (2, T), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        full = m(idx, h0_seed=7).logits  # (B, T, V)
    cache = m.setup_cache(2, T, h0_seed=7)
    for t in range(T):
        torch.testing.assert_close(m.decode_step(idx[:, t], cache), full[:, t], atol=1e-4, rtol=1e-4)
    assert int(cache.pos) == T


@pytest.mark.parametrize("recipe", ["lean", "lean_all64", "reuse_kv", "parcae"])
def test_prefill_then_decode_equals_full_forward(recipe):
    cfg = preset(recipe, "tiny")
    m = randomize(LoopedLM(cfg), seed=2).eval()
    idx = torch.randint(0, cfg.vocab_size, (3, T), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = m(idx, loops=3, h0_seed=0).logits
    cache = m.setup_cache(3, T, loops=3, h0_seed=0)
    torch.testing.assert_close(m.prefill(idx[:, :37], cache), full[:, :37], atol=1e-4, rtol=1e-4)
    for t in range(37, T):
        torch.testing.assert_close(m.decode_step(idx[:, t], cache), full[:, t], atol=1e-4, rtol=1e-4)


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
    assert lean[("r", 0, 0)].k.shape[2] == ctx and lean[("r", 3, 1)].k.shape[2] == 16
    assert ("r", 1, 0) not in sets("mlp_only") and ("r", 1, 0) not in sets("reuse_kv")
    assert sets("half_width")[("r", 2, 0)].k.shape[1] == 1
    fixed4, plain = (
        kv_cache_bytes(preset("fixed4", "144m"), 16000, 1),
        kv_cache_bytes(preset("plain", "144m"), 16000, 1),
    )
    assert fixed4 == 2 * plain  # 4 prelude/coda + 4 rounds x 2 = 12 vs 6 full layers


@pytest.mark.gpu
def test_cuda_graph_decode_matches_eager():
    from model.decode import capture_decode_graph

    m = randomize(LoopedLM(preset("lean", "tiny")), seed=4).cuda().eval()
    idx = torch.randint(0, 256, (2, T), device="cuda")
    with torch.no_grad():
        full = m(idx, h0_seed=0).logits
    cache = m.setup_cache(2, T, h0_seed=0)
    graph, tok, logits = capture_decode_graph(m, cache, idx[:, 0])
    for t in range(T):
        tok.copy_(idx[:, t])
        graph.replay()
        torch.testing.assert_close(logits, full[:, t], atol=1e-3, rtol=1e-3)
