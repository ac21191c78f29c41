"""Attention backends against the plain masked reference (values and gradients), window locality, the
backend rule, and the mask cache under torch.compile."""

from __future__ import annotations

import pytest
import torch

import looplab.model.attention as attn
from looplab.model.attention import (
    FLEX_BLOCK,
    attention,
    flex_windowed,
    reference_attention,
    sdpa_banded,
    sdpa_block_local,
    use_block_local,
)


def _qkv(T=96, seed=0, B=2, H=2, D=16, dtype=torch.float32, grad=False):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, T, D, generator=g).to(dtype).requires_grad_(grad) for _ in range(3)]


def _value_and_grads(fn, T, window, dtype=torch.float32):
    """Output and (q, k, v) gradients of sum(out * probe): a random probe so every output element
    contributes a distinct weight to the gradient."""
    q, k, v = _qkv(T=T, dtype=dtype, grad=True)
    out = fn(q, k, v, window)
    probe = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to(dtype)
    (out.float() * probe.float()).sum().backward()
    return out, q.grad, k.grad, v.grad


@pytest.mark.parametrize("window", [1, 7, 16, 40])
def test_windowed_backends_match_reference(window):
    q, k, v = _qkv()
    ref = reference_attention(q, k, v, window)
    torch.testing.assert_close(sdpa_banded(q, k, v, window), ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(sdpa_block_local(q, k, v, window), ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(flex_windowed(q, k, v, window, compiled=False), ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(attention(q, k, v, window), ref, atol=1e-5, rtol=1e-5)


# (T, window, block): T a multiple of the block and not, window 1, window == block, a single block
# (T < block), window >= T, and blocks wider than the window.
BLOCK_CASES = [
    (64, 16, 16),
    (100, 16, 16),
    (37, 1, 1),
    (37, 1, 8),
    (50, 7, 32),
    (20, 16, 32),
    (12, 40, 40),
    (130, 32, None),
    (97, 5, None),
]


@pytest.mark.parametrize("T,window,block", BLOCK_CASES)
def test_block_local_matches_reference_in_value_and_gradient(T, window, block):
    def local(q, k, v, w):
        return sdpa_block_local(q, k, v, w, block=block)

    got = _value_and_grads(local, T, window)
    want = _value_and_grads(reference_attention, T, window)
    for name, a, b in zip(("out", "dq", "dk", "dv"), got, want, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5, msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.parametrize("T,window", [(100, 16), (64, 1), (75, 32)])
def test_block_local_bf16_within_bf16_tolerance(T, window):
    got = _value_and_grads(sdpa_block_local, T, window, dtype=torch.bfloat16)
    want = _value_and_grads(reference_attention, T, window, dtype=torch.bfloat16)
    assert got[0].dtype == torch.bfloat16
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a.float(), b.float(), atol=3e-2, rtol=3e-2)


def test_block_smaller_than_window_is_refused():
    q, k, v = _qkv(T=32)
    with pytest.raises(ValueError, match="block: must be >= window"):
        sdpa_block_local(q, k, v, 16, block=8)


def test_backend_rule_picks_block_local_for_long_sequences_only():
    assert use_block_local(2048, 32) and use_block_local(1024, 128)
    assert not use_block_local(256, 32)  # short: the dense band is as fast
    assert not use_block_local(512, 128)  # T < 8 S
    assert use_block_local(512, 1)  # tiny windows still use 32-query blocks


def test_attention_takes_the_block_local_path_and_matches_reference(monkeypatch):
    """At a length where the rule picks blocks, `attention` equals the reference in value and gradient
    (and really went through the block-local function)."""
    calls = []
    real = attn.sdpa_block_local
    monkeypatch.setattr(attn, "sdpa_block_local", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    T, window = 520, 7
    assert use_block_local(T, window)
    got = _value_and_grads(attn.attention, T, window)
    want = _value_and_grads(reference_attention, T, window)
    assert calls
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_windowed_gradients_of_dense_band_match_reference():
    got = _value_and_grads(sdpa_banded, 80, 9)
    want = _value_and_grads(reference_attention, 80, 9)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_full_causal_matches_reference():
    q, k, v = _qkv()
    torch.testing.assert_close(
        attention(q, k, v, None), reference_attention(q, k, v, None), atol=1e-5, rtol=1e-5
    )
    # window >= T is full causal attention
    torch.testing.assert_close(
        attention(q, k, v, 96), reference_attention(q, k, v, None), atol=1e-5, rtol=1e-5
    )


@pytest.mark.parametrize("backend", ["sdpa", "block", "flex", "reference"])
def test_window_locality(backend):
    """Output at t must not depend on keys/values older than t-window+1, and must depend on the oldest
    key inside the window."""
    fn = {
        "sdpa": sdpa_banded,
        "block": sdpa_block_local,
        "flex": lambda q, k, v, w: flex_windowed(q, k, v, w, compiled=False),
        "reference": reference_attention,
    }[backend]
    W, t = 8, 50
    q, k, v = _qkv(T=64)
    base = fn(q, k, v, W)[:, :, t]
    k2, v2 = k.clone(), v.clone()
    k2[:, :, : t - W + 1] += 5.0  # everything before the window
    v2[:, :, : t - W + 1] -= 3.0
    assert torch.allclose(fn(q, k2, v2, W)[:, :, t], base, atol=1e-6)
    v3 = v.clone()
    v3[:, :, t - W + 1] += 1.0  # the oldest key still inside the window
    assert not torch.allclose(fn(q, k, v3, W)[:, :, t], base, atol=1e-4)


# ---- FlexAttention padding and the mask cache -------------------------------------------------------


@pytest.mark.parametrize("T", [FLEX_BLOCK, 200, 129])
def test_flex_padding_equals_unpadded(T):
    """Flex pads to a multiple of FLEX_BLOCK; the result equals the reference on the real tokens."""
    q, k, v = _qkv(T=T, B=1)
    out = flex_windowed(q, k, v, 16, compiled=False)
    assert out.shape == q.shape
    torch.testing.assert_close(out, reference_attention(q, k, v, 16), atol=1e-5, rtol=1e-5)


def test_flex_lengths_in_one_bucket_share_one_mask():
    attn.clear_mask_cache()
    for T in (130, 200, 256):
        q, k, v = _qkv(T=T, B=1, H=1)
        flex_windowed(q, k, v, 16, compiled=False)
    assert [key for key in attn._MASKS if key[0] == "flex"] == [("flex", 256, 16, "cpu")]


def _counting_builder(monkeypatch):
    """Wrap create_block_mask: record, per real build, whether it ran inside a compiled region."""
    import torch.nn.attention.flex_attention as flex_module

    builds: list[bool] = []
    real = flex_module.create_block_mask

    def counting(*args, **kwargs):
        builds.append(torch.compiler.is_compiling())
        return real(*args, **kwargs)

    monkeypatch.setattr(flex_module, "create_block_mask", counting)
    return builds


def test_block_mask_built_once_and_outside_the_compiled_region(monkeypatch):
    """Under torch.compile the Flex mask is built eagerly once, then served from the cache: the builder
    runs with is_compiling() False, once over three calls, and every call gets the same mask object."""
    attn.clear_mask_cache()
    builds = _counting_builder(monkeypatch)
    torch._dynamo.reset()
    masks = []

    def lookup(x):
        mask = attn.sliding_block_mask(x.shape[-2], 16, x.device)
        masks.append(mask)
        return x * 2

    compiled = torch.compile(lookup, backend="eager")
    x = torch.randn(1, 1, 256, 8)
    for _ in range(3):
        compiled(x)
    assert builds == [False]
    assert len(masks) == 3 and all(mask is attn._MASKS[("flex", 256, 16, "cpu")] for mask in masks)
    torch._dynamo.reset()


def test_compiled_flex_forward_matches_reference_with_cached_mask(monkeypatch):
    """The whole windowed path under an enclosing torch.compile (eager backend, CPU forward): Flex is
    called directly (compiled=True is not compiled twice), the result equals the reference, and the
    mask is built once for two lengths in one bucket."""
    attn.clear_mask_cache()
    builds = _counting_builder(monkeypatch)
    torch._dynamo.reset()
    fn = torch.compile(lambda q, k, v: flex_windowed(q, k, v, 16, compiled=True), backend="eager")
    for T in (150, 150, 180):
        q, k, v = _qkv(T=T, B=1)
        torch.testing.assert_close(fn(q, k, v), reference_attention(q, k, v, 16), atol=1e-5, rtol=1e-5)
    assert builds == [False]
    torch._dynamo.reset()


def test_mask_first_built_in_inference_mode_serves_training():
    attn.clear_mask_cache()
    q, k, v = _qkv(T=600, grad=True)
    with torch.inference_mode():
        sdpa_block_local(q.detach(), k.detach(), v.detach(), 8)
    sdpa_block_local(q, k, v, 8).sum().backward()  # the cached mask is a normal tensor
    assert q.grad is not None and torch.isfinite(q.grad).all()
