"""Validation loss on the fixed validation set, shared by training and the depth sweep.

Bits per byte: the summed cross-entropy of the predicted tokens in bits, divided by the UTF-8 bytes
those tokens stand for (`val_bpb = val_loss / ln 2 * tokens / bytes`), so runs with different
tokenizers compare. Each validation batch uses a fixed h0 seed (`h0_seed + batch index`) so two
evaluations of the same weights give the same number.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F


def autocast(device: torch.device):
    """bf16 autocast on CUDA only; CPU runs stay fp32 (and bit-reproducible)."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


@dataclass
class EvalResult:
    loss: float
    bpb: float
    far_copy_loss: float | None = None
    near_loss: float | None = None
    round_deltas: list[float] | None = None


def far_copy_mask(x: torch.Tensor, y: torch.Tensor, window: int) -> torch.Tensor:
    """(B, T) bool: the target y[b, t] occurs among the context tokens x[b, :t+1] at a distance greater
    than `window` (positions <= t - window) — a long-range copy a `window`-token attention cannot see."""
    B, T = x.shape
    eq = y[:, :, None] == x[:, None, :]  # (B, T_target, T_context)
    t = torch.arange(T, device=x.device)
    far = t[None, :] <= (t[:, None] - window)  # context position j is beyond the window of target t
    return (eq & far[None]).any(dim=-1)


@torch.no_grad()
def evaluate(
    model,
    chunks: torch.Tensor,
    batch_size: int,
    device: torch.device,
    token_bytes: torch.Tensor,
    loops=None,
    h0_seed: int = 0,
    far_window: int | None = None,
    deltas: bool = False,
    on_batch=None,
) -> EvalResult:
    """Mean CE over every predicted token of `chunks` (N, T+1); optional far-copy split and round deltas."""
    was_training = model.training
    model.eval()
    total = n = 0.0
    n_bytes = 0
    far_sum = far_n = 0.0
    delta_sum: torch.Tensor | None = None
    n_batches = 0
    for i, start in enumerate(range(0, len(chunks), batch_size)):
        c = chunks[start : start + batch_size].to(device)
        x, y = c[:, :-1], c[:, 1:]
        with autocast(device):
            out = model(x, loops=loops, h0_seed=h0_seed + i, return_deltas=deltas)
        ce = F.cross_entropy(out.logits.float().flatten(0, 1), y.flatten(), reduction="none").view_as(y)
        total += ce.sum().item()
        n += ce.numel()
        n_bytes += int(token_bytes[y.cpu()].sum())
        if far_window is not None:
            m = far_copy_mask(x, y, far_window)
            far_sum += ce[m].sum().item()
            far_n += int(m.sum())
        if deltas and out.round_deltas is not None:
            d = out.round_deltas.detach().float().cpu()
            delta_sum = d if delta_sum is None else delta_sum + d
        n_batches += 1
        if on_batch is not None:
            on_batch(n_batches)
    model.train(was_training)
    loss = total / n
    res = EvalResult(loss=loss, bpb=loss / math.log(2) * n / max(1, n_bytes))
    if far_window is not None:
        res.far_copy_loss = far_sum / far_n if far_n else None
        res.near_loss = (total - far_sum) / (n - far_n) if n > far_n else None
    if delta_sum is not None:
        res.round_deltas = (delta_sum / n_batches).tolist()
    return res
