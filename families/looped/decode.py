"""Generation and CUDA-graph capture on top of the model's incremental decoding.

The pieces live elsewhere: the static KV cache (`model.kv_cache`), the attention contexts
(`model.contexts`), and `LoopedLM.setup_cache / prefill / decode_step` (`families.looped.model`). This module
only uses them; nothing in the model imports it.

`decode_step` has static shapes and no host sync (the position lives on the device and is advanced in
place), so on CUDA the whole step can be captured in a CUDA graph (`capture_decode_graph`). Decoding
runs a fixed loop count (the cache's `loops`) with an int h0 seed: h0 at position p is the same
deterministic draw the full forward uses at p (see `model.init.h0_from_seed`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from looplab.model.kv_cache import KVCache

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


def warm_up_without_trace(model: LoopedLM, cache: KVCache, tokens: Tensor, steps: int) -> None:
    """Run `steps` decode steps (to settle allocators before a capture) and undo them: every K, V and
    slot_pos buffer and the position are restored, so slots of a windowed ring buffer that are still
    inside the window are not left overwritten by the warm-up."""
    saved = cache.save_next_slots(steps)
    for _ in range(steps):
        model.decode_step(tokens, cache)
    cache.restore(saved)


def capture_decode_graph(model: LoopedLM, cache: KVCache, tokens: Tensor, warmup: int = 3):
    """CUDA only: capture one decode step in a CUDA graph. Returns (graph, static_tokens, static_logits);
    to step: static_tokens.copy_(next); graph.replay(). The cache is left as it was given (after a
    prefill, too): the warm-up and the capture leave no trace in it."""
    static_tokens = tokens.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        warm_up_without_trace(model, cache, static_tokens, warmup)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # records the step's kernels without running them: the cache is untouched
        static_logits = model.decode_step(static_tokens, cache)
    return graph, static_tokens, static_logits
