"""A decode step captured in a CUDA graph: `capture_decode_graph(model, cache, tokens)` over any module
whose `decode_step(tokens, cache)` has static shapes and no host sync, with a cache that can save and
restore the slots a warm-up writes (`model.kv_cache.KVCache`). looplab's own model offers it as
`LoopedLM.capture_decode_graph`; it lives here, with no family, so the decode benchmark reaches it
through the model it built and names no family."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from looplab.model.kv_cache import KVCache


def warm_up_without_trace(model: Any, cache: KVCache, tokens: Tensor, steps: int) -> None:
    """Run `steps` decode steps (to settle allocators before a capture) and undo them: every K, V and
    slot_pos buffer and the position are restored, so slots of a windowed ring buffer that are still
    inside the window are not left overwritten by the warm-up."""
    saved = cache.save_next_slots(steps)
    for _ in range(steps):
        model.decode_step(tokens, cache)
    cache.restore(saved)


def capture_decode_graph(model: Any, cache: KVCache, tokens: Tensor, warmup: int = 3):
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
