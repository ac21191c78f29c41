"""Generation on top of the model's incremental decoding.

The pieces live elsewhere: the static KV cache (`model.kv_cache`), the attention contexts
(`model.contexts`), and `LoopedLM.setup_cache / prefill / decode_step` (`families.looped.model`). This module
only uses them; nothing in the model imports it.

`decode_step` has static shapes and no host sync (the position lives on the device and is advanced in
place), so on CUDA the whole step can be captured in a CUDA graph (`capture_decode_graph`, which lives
in `model.decode_graph`: a job reaches it through `LoopedLM.capture_decode_graph`, naming no family). Decoding
runs a fixed loop count (the cache's `loops`) with an int h0 seed: h0 at position p is the same
deterministic draw the full forward uses at p (see `model.init.h0_from_seed`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

if TYPE_CHECKING:
    from looplab.families.looped.model import LoopedLM


@torch.no_grad()
def generate(
    model: LoopedLM,
    prompt: Tensor,
    max_new_tokens: int,
    temperature: float = 0.0,
    top_k: int | None = None,
    loops: int | None = None,
    h0_seed: int = 0,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Prompt (B, T0) -> (B, T0 + max_new_tokens). temperature 0 = greedy. Sampling stays on device."""
    B, T0 = prompt.shape
    cache = model.setup_cache(B, T0 + max_new_tokens, loops=loops, h0_seed=h0_seed)
    logits = model.prefill(prompt, cache)[:, -1]
    out = [prompt]
    for i in range(max_new_tokens):
        if temperature <= 0:
            nxt = logits.argmax(-1)
        else:
            scaled = logits / temperature
            if top_k is not None:
                kth = torch.topk(scaled, min(top_k, scaled.shape[-1])).values[:, -1:]
                scaled = scaled.masked_fill(scaled < kth, float("-inf"))
            nxt = torch.multinomial(scaled.softmax(-1), 1, generator=generator).view(-1)
        out.append(nxt.view(B, 1))
        if i + 1 < max_new_tokens:
            logits = model.decode_step(nxt, cache)
    return torch.cat(out, dim=1)
