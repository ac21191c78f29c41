"""The two Muon optimizers a training run can use.

- `ParcaeMuonAdamW` (`optimizer: "parcae"`): the Parcae reference's Muon+AdamW in one optimizer.
  Muon group, per 2-D parameter W (rows × cols), at the optimizer's k-th `step()` call (k from 0):
    momentum  μ_k = 0.85 + 0.10·min(k / 300, 1)                          (warm-up, counted in the state)
    M ← μ·M + (1 − μ)·G;  U = (1 − μ)·G + μ·M                           (Nesterov momentum)
    U ← polar_express(U)                                                 (orthogonalised)
    U ← row_normalise(U, V)                                              (NorMuon: per-row second moments)
    W ← W − lr'·U − lr'·wd·W·[U·W ≥ 0],  lr' = lr·sqrt(max(1, rows/cols)) (cautious weight decay)
  AdamW group: the reference's AdamW (bias-corrected, ε outside the square root), wd 0 by default.
  The very first `step()` call changes nothing (the reference skips its first optimizer step).
  `wd` is set from outside (`workers.train.optim.set_lr`: 0.2 falling linearly to 0 over training).
- `TorchMuon` (`optimizer: "torch_muon"`): `torch.optim.Muon`'s algorithm and state dict, with its
  Newton–Schulz run in fp32 on the CPU, without replacing anything inside torch.

Everything a resumed run needs (buffers, second moments, per-parameter step counts, the call counter
that drives the warm-up and the skipped first step, the current momentum and weight decay) is in
`state_dict()`: per-parameter state or param-group entries, plain numbers and tensors only.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch
from torch import Tensor

from looplab.workers.train.orthogonalise import newton_schulz, polar_express

MOMENTUM_START, MOMENTUM_END, MOMENTUM_WARMUP_STEPS = 0.85, 0.95, 300
SECOND_MOMENT_BETA = 0.95  # the NorMuon second-moment EMA (the reference's `beta2` default for Muon)
NORM_FLOOR = 1e-10  # the reference's clamp on second moments and norms before dividing by them


def momentum_at(calls: int, start: float, end: float, warmup_steps: int) -> float:
    """Muon momentum at the `calls`-th step() call (0-based): `start` → `end` linearly over `warmup_steps`."""
    if warmup_steps <= 0:
        return end
    return start + min(calls / warmup_steps, 1.0) * (end - start)


def aspect_lr(lr: float, shape: torch.Size) -> float:
    """Muon's learning rate for a (rows, cols) matrix: scaled up by sqrt(rows / cols) for tall ones."""
    rows, cols = shape[-2], shape[-1]
    return lr * math.sqrt(max(1.0, rows / cols))


def second_moment_shape(shape: torch.Size) -> tuple[int, int]:
    """One second moment per row of a tall-or-square matrix, per column of a wide one."""
    rows, cols = shape[-2], shape[-1]
    return (rows, 1) if rows >= cols else (1, cols)


def row_normalise(update: Tensor, second_moment: Tensor, beta2: float) -> Tensor:
    """NorMuon's normalisation of an orthogonalised `update` (rows, cols).

    Each row (each column of a wide matrix, the longer side's vectors) is divided by the square root
    of an EMA of its mean square, kept in `second_moment` ((rows, 1) or (1, cols), updated in place,
    no bias correction); the result is then rescaled to the Frobenius norm `update` had.
    """
    reduce_dim = -1 if update.size(-2) >= update.size(-1) else -2
    length = update.size(reduce_dim)  # entries averaged into each mean square
    mean_square = update.float().square().mean(dim=reduce_dim, keepdim=True)  # (rows, 1) or (1, cols)
    norm_before = (mean_square.sum(dim=(-2, -1), keepdim=True) * length).sqrt()  # ‖update‖_F, (1, 1)
    second_moment.lerp_(mean_square.to(second_moment.dtype), 1 - beta2)
    scale = second_moment.clamp_min(NORM_FLOOR).rsqrt()
    # ‖update · scale‖_F from the mean squares, without forming the scaled matrix
    norm_after = (mean_square * length * scale.float().square()).sum(dim=(-2, -1), keepdim=True).sqrt()
    return update * (scale * (norm_before / norm_after.clamp_min(NORM_FLOOR))).to(update.dtype)


def cautious_step_(param: Tensor, update: Tensor, lr: float, weight_decay: float) -> None:
    """param ← param − lr·update − lr·wd·param, the decay only where update·param >= 0.

    "Cautious" weight decay: decay an entry only where the update already moves it towards zero
    (update and parameter share a sign) or either is zero; elsewhere decay would fight the update."""
    decay_mask = (update * param) >= 0
    param.sub_(lr * update + lr * weight_decay * param * decay_mask)


def adamw_step_(
    param: Tensor, grad: Tensor, state: dict, lr: float, betas: tuple[float, float], eps: float, wd: float
) -> None:
    """The reference's AdamW on one parameter: decoupled decay, then m/(1−β1ᵗ) / (sqrt(v/(1−β2ᵗ)) + ε)."""
    if not state:
        state["step"] = 0
        state["exp_avg"] = torch.zeros_like(param)
        state["exp_avg_sq"] = torch.zeros_like(param)
    state["step"] += 1
    beta1, beta2 = betas
    param.mul_(1 - lr * wd)
    state["exp_avg"].lerp_(grad, 1 - beta1)
    state["exp_avg_sq"].lerp_(grad.square(), 1 - beta2)
    bias1, bias2 = 1 - beta1 ** state["step"], 1 - beta2 ** state["step"]
    param.add_(state["exp_avg"] / bias1 / ((state["exp_avg_sq"] / bias2).sqrt() + eps), alpha=-lr)


class ParcaeMuonAdamW(torch.optim.Optimizer):
    """Muon (Polar Express + NorMuon + cautious weight decay) for `muon_params`, AdamW for the rest.

    Group 0 is the Muon group (kind "muon"), group 1 the AdamW group (kind "adamw"); an empty list
    makes no group. Muon parameters must be 2-D. A parameter of the Muon group without a gradient is
    treated as having a zero gradient (momentum and decay still act), as in the reference; AdamW
    parameters without a gradient are left alone."""

    def __init__(
        self,
        muon_params: Iterable[Tensor],
        adamw_params: Iterable[Tensor],
        *,
        lr: float,
        adam_lr: float,
        weight_decay: float,
        momentum: float = MOMENTUM_END,
        momentum_start: float = MOMENTUM_START,
        momentum_warmup_steps: int = MOMENTUM_WARMUP_STEPS,
        beta2: float = SECOND_MOMENT_BETA,
        ns_steps: int = 5,
        adam_betas: tuple[float, float] = (0.8, 0.95),
        adam_eps: float = 1e-10,
        adam_weight_decay: float = 0.0,
        skip_first_step: bool = True,
    ) -> None:
        muon_params, adamw_params = list(muon_params), list(adamw_params)
        for p in muon_params:
            if p.ndim != 2:
                raise ValueError(f"Muon parameters must be 2-D matrices, got shape {tuple(p.shape)}")
        groups = []
        if muon_params:
            groups.append(
                {
                    "params": muon_params,
                    "kind": "muon",
                    "lr": lr,
                    "weight_decay": weight_decay,
                    "momentum": momentum_start,  # the current value, set at each step() from the warm-up
                    "momentum_start": momentum_start,
                    "momentum_end": momentum,
                    "momentum_warmup_steps": momentum_warmup_steps,
                    "beta2": beta2,
                    "ns_steps": ns_steps,
                }
            )
        if adamw_params:
            groups.append(
                {
                    "params": adamw_params,
                    "kind": "adamw",
                    "lr": adam_lr,
                    "betas": tuple(adam_betas),
                    "eps": adam_eps,
                    "weight_decay": adam_weight_decay,
                }
            )
        # `calls` counts step() calls, skipped or not: it lives in every group so it is checkpointed.
        super().__init__(groups, defaults={"calls": 0, "skip_first_step": skip_first_step})

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        loss = _evaluate(closure)
        for group in self.param_groups:
            calls = group["calls"]
            group["calls"] = calls + 1
            if group["kind"] == "muon":
                group["momentum"] = momentum_at(
                    calls, group["momentum_start"], group["momentum_end"], group["momentum_warmup_steps"]
                )
            if calls == 0 and group["skip_first_step"]:
                continue
            if group["kind"] == "muon":
                self._muon_group(group)
            else:
                self._adamw_group(group)
        return loss

    def _muon_group(self, group: dict) -> None:
        momentum, lr, wd = group["momentum"], group["lr"], group["weight_decay"]
        for param in group["params"]:
            grad = param.grad if param.grad is not None else torch.zeros_like(param)
            state = self.state[param]
            if not state:
                state["momentum_buffer"] = torch.zeros_like(param)
                state["second_moment"] = param.new_zeros(second_moment_shape(param.shape))
            buffer = state["momentum_buffer"]
            buffer.lerp_(grad, 1 - momentum)
            update = grad.lerp(buffer, momentum)  # Nesterov: (1 − μ)·G + μ·M
            update = polar_express(update, group["ns_steps"])
            update = row_normalise(update, state["second_moment"], group["beta2"]).to(param.dtype)
            cautious_step_(param, update, aspect_lr(lr, param.shape), wd)

    def _adamw_group(self, group: dict) -> None:
        for param in group["params"]:
            if param.grad is None:
                continue
            adamw_step_(
                param,
                param.grad,
                self.state[param],
                group["lr"],
                group["betas"],
                group["eps"],
                group["weight_decay"],
            )


def _evaluate(closure: Callable[[], float] | None) -> float | None:
    """The loss from an optimizer's optional closure, evaluated with gradients on (PyTorch's convention)."""
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()


class TorchMuon(torch.optim.Muon):
    """`torch.optim.Muon` (same arguments, algorithm and state dict), orthogonalising with our
    `newton_schulz`: fp32 on the CPU, bf16 elsewhere, like torch's own there."""

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        loss = _evaluate(closure)
        for group in self.param_groups:
            if group["adjust_lr_fn"] not in (None, "original"):
                raise ValueError(
                    f"adjust_lr_fn: only 'original' is supported here, got {group['adjust_lr_fn']!r}"
                )
            lr, wd, momentum = group["lr"], group["weight_decay"], group["momentum"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                state = self.state[param]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(param.grad)
                buffer = state["momentum_buffer"]
                buffer.lerp_(param.grad, 1 - momentum)
                update = param.grad.lerp(buffer, momentum) if group["nesterov"] else buffer
                update = newton_schulz(update, group["ns_coefficients"], group["ns_steps"], group["eps"])
                param.mul_(1 - lr * wd)
                param.add_(update, alpha=-aspect_lr(lr, param.shape))
        return loss
