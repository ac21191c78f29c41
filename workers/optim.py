"""Optimizers and the learning-rate schedule of a training run.

Muon (`torch.optim.Muon`) for the 2-D weight matrices and AdamW for embeddings, norms and the injection
parameters, as the reference recipe does; `optimizer="adamw"` uses AdamW for everything. Every param
group remembers its `initial_lr`; the schedule multiplies it by `lr_factor(step, ...)` each step.

The schedule is a constant learning rate, an optional linear warmup, and a linear cooldown over the last
`cooldown_frac` of the steps that reaches exactly zero on the last step, for any number of steps, so a
run always completes its decay within its budget.
"""

from __future__ import annotations

import torch
from torch.optim import _muon

DEFAULT_LR = {"muon": 0.02, "adamw": 3e-3}

_newtonschulz_bf16 = _muon._zeropower_via_newtonschulz


def _newtonschulz_fp32_on_cpu(grad, ns_coefficients, ns_steps, eps):
    """torch.optim.Muon's orthogonalisation, run in fp32 when the gradient is on the CPU.

    PyTorch's version casts to bf16, right for GPUs; CPUs without bf16 matrix units run those matmuls
    ~10x slower than fp32 (measured here: 2.5 s vs 0.23 s per step of the `small` model). Same quintic
    iteration and coefficients; on CUDA the original runs unchanged."""
    if grad.device.type != "cpu":
        return _newtonschulz_bf16(grad, ns_coefficients, ns_steps, eps)
    a, b, c = ns_coefficients
    x = grad.float()
    if grad.size(0) > grad.size(1):
        x = x.T
    x = x / x.norm().clamp(min=eps)
    for _ in range(ns_steps):
        gram = x @ x.T
        x = torch.addmm(x, torch.addmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    return x.T if grad.size(0) > grad.size(1) else x


# torch.optim.Muon looks the function up in its module at every step: one swap serves every instance.
_muon._zeropower_via_newtonschulz = _newtonschulz_fp32_on_cpu
DEFAULT_ADAM_LR = 3e-3
ADAM_BETAS = (0.9, 0.95)


def lr_factor(step: int, total_steps: int, warmup_steps: int = 0, cooldown_frac: float = 0.5) -> float:
    """Multiplier of the base learning rate at 0-based `step` of `total_steps`; 0.0 at the last step."""
    if total_steps <= 1:
        return 0.0
    cooldown = max(1, round(cooldown_frac * total_steps))
    start = total_steps - cooldown  # first step of the cooldown, where the factor is still 1
    if step >= start:
        span = total_steps - 1 - start
        f = 0.0 if span == 0 else (total_steps - 1 - step) / span
    else:
        f = 1.0
    if warmup_steps > 0 and step < warmup_steps:
        f = min(f, (step + 1) / warmup_steps)
    return max(0.0, f)


def build_optimizers(
    model, optimizer: str, lr: float | None, adam_lr: float | None, weight_decay: float
) -> list[torch.optim.Optimizer]:
    """`model.param_groups()` splits parameters into "matrix" (2-D, for Muon) and "other"."""
    groups = model.param_groups()
    matrix = [p for p in groups["matrix"] if p.requires_grad]
    other = [p for p in groups["other"] if p.requires_grad]
    base = DEFAULT_LR[optimizer] if lr is None else lr
    a_lr = (DEFAULT_ADAM_LR if optimizer == "muon" else base) if adam_lr is None else adam_lr
    if optimizer == "adamw":
        opt = torch.optim.AdamW(
            [{"params": matrix, "lr": base}, {"params": other, "lr": a_lr}],
            lr=base,
            betas=ADAM_BETAS,
            weight_decay=weight_decay,
        )
        opts: list[torch.optim.Optimizer] = [opt]
    else:
        opts = [
            torch.optim.Muon(matrix, lr=base, weight_decay=weight_decay, momentum=0.95),
            torch.optim.AdamW(other, lr=a_lr, betas=ADAM_BETAS, weight_decay=0.0),
        ]
    for o in opts:
        for g in o.param_groups:
            g["initial_lr"] = g["lr"]
    return opts


def set_lr(opts: list[torch.optim.Optimizer], factor: float) -> float:
    """Scale every group to `factor` × its initial lr; returns the first (matrix) group's lr."""
    for o in opts:
        for g in o.param_groups:
            g["lr"] = g["initial_lr"] * factor
    return float(opts[0].param_groups[0]["lr"])
