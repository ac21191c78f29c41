"""Attention backends against the plain masked reference, and window locality."""

from __future__ import annotations

import pytest
import torch

from model.attention import attention, flex_windowed, reference_attention, sdpa_banded


def _qkv(T=96, seed=0, B=2, H=2, D=16):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, T, D, generator=g) for _ in range(3)]


@pytest.mark.parametrize("window", [1, 7, 16, 40])
def test_windowed_backends_match_reference(window):
    q, k, v = _qkv()
    ref = reference_attention(q, k, v, window)
    torch.testing.assert_close(sdpa_banded(q, k, v, window), ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(flex_windowed(q, k, v, window, compiled=False), ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(attention(q, k, v, window), ref, atol=1e-5, rtol=1e-5)


def test_full_causal_matches_reference():
    q, k, v = _qkv()
    torch.testing.assert_close(
        attention(q, k, v, None), reference_attention(q, k, v, None), atol=1e-5, rtol=1e-5
    )


@pytest.mark.parametrize("backend", ["sdpa", "flex", "reference"])
def test_window_locality(backend):
    """Output at t must not depend on keys/values older than t-window+1, and must depend on the oldest
    key inside the window."""
    fn = {
        "sdpa": sdpa_banded,
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


@pytest.mark.gpu
def test_compiled_flex_on_gpu_matches_reference():
    q, k, v = (x.cuda() for x in _qkv(T=256, D=64))
    out = flex_windowed(q, k, v, 64)
    torch.testing.assert_close(out, reference_attention(q, k, v, 64), atol=2e-3, rtol=2e-3)
