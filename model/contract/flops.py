"""FLOPs a family's forward costs, measured with PyTorch's FlopCounterMode when the family does not
count its own (the CPU attention kernel counted as the fused kernel it is)."""

from __future__ import annotations

import torch
from torch import nn


def _cpu_attention_flops(query, key, value, *args, out_shape=None, **kwargs) -> int:
    """The CPU fused attention kernel counted as its matmuls (FlopCounterMode registers the CUDA ones)."""
    from torch.utils.flop_counter import sdpa_flop_count

    return sdpa_flop_count(query, key, value)


_CPU_ATTENTION = {torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _cpu_attention_flops}


def measure_activation_bytes(module: nn.Module, seq_len: int, loops: int) -> float:
    """Bytes autograd keeps for the backward of one sequence of `seq_len` tokens at `loops`, as the
    module's own dtype holds them: every tensor saved for backward (torch.autograd.graph's
    saved_tensors_hooks sees each), the parameters themselves (and views of them) left out, since the
    weights are counted apart. Counted, not guessed: on the meta device nothing is allocated. A tensor
    saved twice counts twice (a plan that errs high on memory is the safe one)."""
    params = {id(p) for p in module.parameters()}
    kept = [0]

    def pack(t: torch.Tensor) -> torch.Tensor:
        if id(t) not in params and (t._base is None or id(t._base) not in params):
            kept[0] += t.numel() * t.element_size()
        return t

    p = next(module.parameters(), None)
    device = p.device if p is not None else torch.device("cpu")
    idx = torch.zeros((1, seq_len), dtype=torch.long, device=device)
    was = module.training
    module.train()
    try:
        with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            module(idx, loops=loops)
    finally:
        module.train(was)
    return float(kept[0])


def measure_flops_per_token(module: nn.Module, vocab: int, seq_len: int, loops: int) -> float:
    """Training FLOPs per token at `loops` (3 x the forward's: forward + backward), measured once with
    torch.utils.flop_counter.FlopCounterMode on one sequence of `seq_len` tokens, in eval mode with
    autograd on (its graph is dropped). The counter sees matmuls and the scaled-dot-product attention
    kernels it registers (counted as their matmuls)."""
    from torch.utils.flop_counter import FlopCounterMode

    p = next(module.parameters(), None)
    device = p.device if p is not None else torch.device("cpu")
    idx = torch.zeros((1, seq_len), dtype=torch.long, device=device)
    was = module.training
    module.eval()
    counter = FlopCounterMode(display=False, custom_mapping=_CPU_ATTENTION)
    # with autograd on, as in training: a module's inference fast path (nn.TransformerEncoderLayer's
    # fused kernel without grad) is one op the counter cannot see, which would leave only the head
    try:
        with counter, torch.enable_grad():
            module(idx, loops=loops)
    finally:
        module.train(was)
    return 3.0 * counter.get_total_flops() / seq_len
