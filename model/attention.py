"""Causal attention, with the backend chosen in this one file.

- full context           -> `F.scaled_dot_product_attention(is_causal=True)` (flash/memory-efficient).
- sliding window (GPU)   -> FlexAttention with a sliding-window block mask, built once per
                            (length, window, device) and cached; `flex_attention` itself is compiled.
- sliding window (CPU)   -> SDPA with a banded boolean mask (also cached). FlexAttention has no CPU
                            backward in current PyTorch, so CPU training cannot use it.
- `reference_attention`  -> plain masked softmax, the ground truth the tests compare both against.
- `cached_attention`     -> decoding: queries against a KV cache with an explicit validity mask.
  Footgun avoided: SDPA's `is_causal` aligns the mask top-left when there are fewer queries than keys,
  so decoding never uses it; the mask is built from the positions stored in each cache slot.

Window semantics everywhere: a query at position t sees keys at positions t-window+1 .. t.
All tensors are (B, H, T, D).
"""

from __future__ import annotations

import functools
import math
import warnings

import torch
import torch.nn.functional as F
from torch import Tensor


def reference_attention(q: Tensor, k: Tensor, v: Tensor, window: int | None) -> Tensor:
    """Explicit masked softmax in fp32 (slow, obviously correct). q, k, v: (B, H, T, D)."""
    T = q.shape[-2]
    scores = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1])  # (B, H, T, T)
    i = torch.arange(T, device=q.device)[:, None]
    j = torch.arange(T, device=q.device)[None, :]
    allowed = j <= i
    if window is not None:
        allowed = allowed & (j > i - window)
    scores = scores.masked_fill(~allowed, float("-inf"))
    return (scores.softmax(-1) @ v.float()).to(q.dtype)


@functools.lru_cache(maxsize=32)
def banded_mask(T: int, window: int, device: torch.device) -> Tensor:
    """(T, T) bool, True where key j is visible from query i: i-window < j <= i."""
    i = torch.arange(T, device=device)[:, None]
    j = torch.arange(T, device=device)[None, :]
    return (j <= i) & (j > i - window)


def sdpa_banded(q: Tensor, k: Tensor, v: Tensor, window: int) -> Tensor:
    return F.scaled_dot_product_attention(q, k, v, attn_mask=banded_mask(q.shape[-2], window, q.device))


@functools.lru_cache(maxsize=32)
def sliding_block_mask(T: int, window: int, device: torch.device):
    """FlexAttention BlockMask for the sliding causal window; built once per shape and reused."""
    from torch.nn.attention.flex_attention import create_block_mask

    def mask_mod(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx) & (kv_idx > q_idx - window)

    return create_block_mask(mask_mod, B=None, H=None, Q_LEN=T, KV_LEN=T, device=device)


@functools.cache
def _compiled_flex():
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False)


def flex_windowed(q: Tensor, k: Tensor, v: Tensor, window: int, compiled: bool | None = None) -> Tensor:
    """Sliding-window attention through FlexAttention. Compiled on GPU; eager (forward only) on CPU."""
    from torch.nn.attention.flex_attention import flex_attention

    compiled = q.is_cuda if compiled is None else compiled
    mask = sliding_block_mask(q.shape[-2], window, q.device)
    if compiled:
        return _compiled_flex()(q, k, v, block_mask=mask)
    with warnings.catch_warnings():  # eager Flex is the unfused math path: fine for tests on CPU
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        return flex_attention(q, k, v, block_mask=mask)


def attention(q: Tensor, k: Tensor, v: Tensor, window: int | None) -> Tensor:
    """Causal self-attention over a whole sequence (training, evaluation, prefill). (B, H, T, D)."""
    T = q.shape[-2]
    if window is None or window >= T:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    if q.is_cuda:
        return flex_windowed(q, k, v, window)
    return sdpa_banded(q, k, v, window)


def cached_attention(q: Tensor, k: Tensor, v: Tensor, visible: Tensor) -> Tensor:
    """Decoding: q (B, H, 1, D) against cache k, v (B, H, S, D); visible (S,) bool per slot."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=visible.view(1, 1, 1, -1))
