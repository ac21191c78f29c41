"""Causal attention, with the backend chosen in this one file.

- full context           -> `F.scaled_dot_product_attention(is_causal=True)` (flash/memory-efficient).
- sliding window (GPU)   -> FlexAttention with a sliding-window block mask; `flex_attention` is compiled
                            with static shapes, so the sequence is padded to a multiple of FLEX_BLOCK
                            (new prompt lengths inside one block reuse the compiled kernel); inside
                            an enclosing `torch.compile` it is called plainly and compiled with it.
- sliding window (CPU)   -> block-local SDPA (`sdpa_block_local`): queries in blocks of S >= window,
                            each block attending to its own and the previous block's keys under one band
                            mask, so time and memory grow as T * S rather than T^2. For short sequences
                            (T < max(8 S, 512), see `use_block_local`) the dense banded mask
                            (`sdpa_banded`) is faster and is used instead. FlexAttention has no CPU
                            backward in current PyTorch, so CPU training cannot use it.
- `reference_attention`  -> plain masked softmax, the ground truth the tests compare every backend against.
- `cached_attention`     -> decoding: queries against a KV cache with an explicit validity mask.
  Footgun avoided: SDPA's `is_causal` aligns the mask top-left when there are fewer queries than keys,
  so decoding never uses it; the mask is built from the positions stored in each cache slot.

Masks are built once per shape and kept in one plain dict. Under `torch.compile` the lookup is a dict
read the compiler traces (no graph break, nothing rebuilt); a miss calls `_build_mask`, which is
excluded from compilation, so building never becomes part of a compiled graph. (`functools.lru_cache`
would not do: the compiler ignores the cache wrapper and traces the builder on every call.)

Window semantics everywhere: a query at position t sees keys at positions t-window+1 .. t.
All tensors are (B, H, T, D).
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

# FlexAttention's default sparse block size: the sequence is padded to a multiple of it on the Flex path.
FLEX_BLOCK = 128
# Smallest query block of the CPU block-local path: blocks of a few queries are batched matmuls too
# small to keep the CPU's vector units busy (a window of 1 or 8 would mean one tiny matmul per query),
# and 2 x 32 keys per query is still far below T.
CPU_BLOCK_MIN = 32

# (kind, length, window, ..., device) -> mask. See the module docstring for why a plain dict.
_MASKS: dict[tuple, Any] = {}


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


# ---- mask cache ---------------------------------------------------------------------------------


@torch.compiler.disable
def _build_mask(key: tuple, build: Callable[[], Any]) -> Any:
    """Build a missing mask eagerly (never traced) and keep it. Built as a normal tensor even when the
    first request comes from inside `torch.inference_mode()`, so later training steps may use it."""
    mask = _MASKS.get(key)
    if mask is None:
        with torch.inference_mode(False), torch.no_grad():
            mask = _MASKS[key] = build()
    return mask


def cached_mask(key: tuple, build: Callable[[], Any]) -> Any:
    """The mask stored under `key`, built by `build()` on the first request only."""
    mask = _MASKS.get(key)  # a plain dict read: traceable, so a hit under compile costs no graph break
    return mask if mask is not None else _build_mask(key, build)


def clear_mask_cache() -> None:
    _MASKS.clear()


# ---- dense banded SDPA (CPU, short sequences) -----------------------------------------------------


def banded_mask(T: int, window: int, device: torch.device) -> Tensor:
    """(T, T) bool, True where key j is visible from query i: i-window < j <= i."""

    def build() -> Tensor:
        i = torch.arange(T, device=device)[:, None]
        j = torch.arange(T, device=device)[None, :]
        return (j <= i) & (j > i - window)

    return cached_mask(("banded", T, window, str(device)), build)


def sdpa_banded(q: Tensor, k: Tensor, v: Tensor, window: int) -> Tensor:
    """Sliding-window attention as SDPA with a dense (T, T) band: T^2 work, but no reshaping."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=banded_mask(q.shape[-2], window, q.device))


# ---- block-local SDPA (CPU, long sequences) -------------------------------------------------------


def cpu_block_size(window: int) -> int:
    return max(window, CPU_BLOCK_MIN)


def use_block_local(T: int, window: int) -> bool:
    """Whether block-local beats the dense band on CPU. The band computes T^2 scores in one fused call;
    blocks compute 2 S T scores but pay for padding and copying every key twice. Measured (forward +
    backward, one thread, head_dim 64): about even at T = 8 S for windows 32..128 and clearly ahead
    above it (2-3x at T = 16 S, ~10x at T = 2048, S = 32); below 512 tokens the fixed per-call cost
    dominates either way, so the band stays."""
    return T >= max(8 * cpu_block_size(window), 512)


def block_band_mask(n_blocks: int, block: int, window: int, device: torch.device) -> Tensor:
    """(n_blocks, S, 2S) bool for `sdpa_block_local`. Query a of block i sits at position iS + a; key c
    of its key span (previous block then own block) at (i-1)S + c. Visible when the key is neither in
    the future (c <= S + a) nor outside the window (c > S + a - window). Block 0 has no previous block:
    its first S keys are zero padding and are hidden."""

    def build() -> Tensor:
        a = torch.arange(block, device=device)[:, None]  # (S, 1) query offset in its block
        c = torch.arange(2 * block, device=device)[None, :]  # (1, 2S) key offset in the span
        band = (c <= block + a) & (c > block + a - window)  # (S, 2S), the same for every block
        first = band & (c >= block)
        return torch.cat([first[None], band[None].expand(n_blocks - 1, block, 2 * block)])

    return cached_mask(("block_band", n_blocks, block, window, str(device)), build)


def sdpa_block_local(q: Tensor, k: Tensor, v: Tensor, window: int, block: int | None = None) -> Tensor:
    """Sliding-window attention in O(T * S): queries in blocks of S >= window, each block against its own
    and the previous block's keys (2S keys; every key a query may see lies in those two blocks since
    window <= S). T not a multiple of S: the tail is zero-padded; padded keys lie in the future of every
    real query, so the causal band hides them, and padded query rows are cut off."""
    B, H, T, D = q.shape
    S = cpu_block_size(window) if block is None else block
    if S < window:
        raise ValueError(f"block: must be >= window ({window}), got {S}")
    n = -(-T // S)  # number of blocks
    pad = n * S - T
    if pad:
        q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))  # (B, H, nS, D)
    qb = q.reshape(B, H, n, S, D)

    def span(x: Tensor) -> Tensor:
        xb = x.reshape(B, H, n, S, D)
        prev = F.pad(xb, (0, 0, 0, 0, 1, 0))[:, :, :-1]  # block i-1 (zeros before block 0)
        return torch.cat([prev, xb], dim=3)  # (B, H, n, 2S, D)

    mask = block_band_mask(n, S, window, q.device)  # (n, 2S) rows per block, broadcast over B, H
    out = F.scaled_dot_product_attention(qb, span(k), span(v), attn_mask=mask)  # (B, H, n, S, D)
    return out.reshape(B, H, n * S, D)[:, :, :T]


# ---- FlexAttention (GPU) ------------------------------------------------------------------------------


def flex_padded_len(T: int) -> int:
    return -(-T // FLEX_BLOCK) * FLEX_BLOCK


def sliding_block_mask(T: int, window: int, device: torch.device):
    """FlexAttention BlockMask for the sliding causal window over T tokens; built once per shape."""

    def build():
        from torch.nn.attention.flex_attention import create_block_mask

        def mask_mod(b, h, q_idx, kv_idx):
            return (kv_idx <= q_idx) & (kv_idx > q_idx - window)

        return create_block_mask(mask_mod, B=None, H=None, Q_LEN=T, KV_LEN=T, device=device)

    return cached_mask(("flex", T, window, str(device)), build)


@functools.cache
def _compiled_flex():
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False)


def flex_windowed(q: Tensor, k: Tensor, v: Tensor, window: int, compiled: bool | None = None) -> Tensor:
    """Sliding-window attention through FlexAttention. Compiled on GPU; eager (forward only) on CPU.

    The sequence is zero-padded to a multiple of FLEX_BLOCK: the compiled kernel has static shapes, so
    without padding every new prompt length would recompile (and past the compiler's recompile limit
    fall back to the unfused path); with it, lengths in one 128-token bucket share one kernel and one
    mask. Padded keys are in the future of every real query (hidden by the causal band) and padded
    query rows are cut off, so the result equals the unpadded one."""
    from torch.nn.attention.flex_attention import flex_attention

    compiled = q.is_cuda if compiled is None else compiled
    T = q.shape[-2]
    padded = flex_padded_len(T)
    if padded != T:
        q, k, v = (F.pad(x, (0, 0, 0, padded - T)) for x in (q, k, v))  # (B, H, padded, D)
    mask = sliding_block_mask(padded, window, q.device)
    if torch.compiler.is_compiling():  # inside an enclosing torch.compile, which compiles Flex itself
        out = flex_attention(q, k, v, block_mask=mask)
    elif compiled:
        out = _compiled_flex()(q, k, v, block_mask=mask)
    else:
        with warnings.catch_warnings():  # eager Flex is the unfused math path: fine for tests on CPU
            warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
            out = flex_attention(q, k, v, block_mask=mask)
    return out[:, :, :T]


# ---- the entry points ---------------------------------------------------------------------------------


def attention(q: Tensor, k: Tensor, v: Tensor, window: int | None) -> Tensor:
    """Causal self-attention over a whole sequence (training, evaluation, prefill). (B, H, T, D)."""
    T = q.shape[-2]
    if window is None or window >= T:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    if q.is_cuda:
        return flex_windowed(q, k, v, window)
    if use_block_local(T, window):
        return sdpa_block_local(q, k, v, window)
    return sdpa_banded(q, k, v, window)


def prepare_masks(T: int, window: int | None, device: torch.device) -> None:
    """Build now, eagerly, the mask `attention` will use for T tokens with `window` on `device`.
    Called before compiled code runs: a mask missing inside a compiled region is built through a
    graph break, which splits the graph around it. Mirrors the dispatch of `attention`."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:  # keyed like a tensor's device: "cuda:0"
        device = torch.device("cuda", torch.cuda.current_device())
    if window is None or window >= T:
        return
    if device.type == "cuda":
        sliding_block_mask(flex_padded_len(T), window, device)
    elif use_block_local(T, window):
        block = cpu_block_size(window)
        block_band_mask(-(-T // block), block, window, device)
    else:
        banded_mask(T, window, device)


def cached_attention(q: Tensor, k: Tensor, v: Tensor, visible: Tensor) -> Tensor:
    """Decoding: q (B, H, 1, D) against cache k, v (B, H, S, D); visible (S,) bool per slot."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=visible.view(1, 1, 1, -1))
