"""Orthogonalisation of a Muon update: map a matrix G = U S Vᵀ to roughly U Vᵀ.

Two odd-polynomial iterations, both acting on the singular values only (for p(x) = a·x + b·x³ + c·x⁵,
a·X + b·(X Xᵀ) X + c·(X Xᵀ)² X has the singular vectors of X and singular values p(σ)):
- `newton_schulz`: the fixed quintic of `torch.optim.Muon` (one coefficient set for every iteration),
  which leaves the singular values spread over about [0.5, 1.5];
- `polar_express`: the Polar Express iteration (Amsel, Persson, Musco & Gower, 2025) that the Parcae
  reference uses: a different quintic per iteration, chosen so that 5 iterations map every singular value
  in [1e-3, 1] into about [0.86, 1.14].

Dtype rule, shared by both: bf16 matmuls on accelerators (as PyTorch and the reference do), fp32 on the
CPU, where chips without bf16 matrix units run bf16 matmuls ~10x slower than fp32 (measured here: 2.5 s
vs 0.23 s per step of the `small` model). Nothing here touches torch's own Muon.
"""

from __future__ import annotations

import torch
from torch import Tensor

# The Parcae reference's coefficients (a, b, c), one set per iteration: the published Polar Express
# sequence for 5 iterations (lower bound 1e-3, each polynomial widened by the paper's 1.01 safety factor).
POLAR_EXPRESS_COEFFICIENTS: tuple[tuple[float, float, float], ...] = (
    (8.156554524902461, -22.48329292557795, 15.878769915207462),
    (4.042929935166739, -2.808917465908714, 0.5000178451051316),
    (3.8916678022926607, -2.772484153217685, 0.5060648178503393),
    (3.285753657755655, -2.3681294933425376, 0.46449024233003106),
    (2.3465413258596377, -1.7097828382687081, 0.42323551169305323),
)
# Polar Express divides by the Frobenius norm times this margin, so the spectral norm is safely below 1.
POLAR_EXPRESS_NORM_MARGIN = 1.02
POLAR_EXPRESS_EPS = 1e-6

# torch.optim.Muon's defaults (Keller Jordan's quintic).
NEWTON_SCHULZ_COEFFICIENTS = (3.4445, -4.775, 2.0315)
NEWTON_SCHULZ_EPS = 1e-7


def orthogonalisation_dtype(device: torch.device) -> torch.dtype:
    """fp32 on the CPU (fast there and exact enough), bf16 elsewhere (fast on GPU matrix units)."""
    return torch.float32 if device.type == "cpu" else torch.bfloat16


def _odd_quintic(x: Tensor, a: float, b: float, c: float) -> Tensor:
    """a·X + (b·A + c·A²)·X with A = X Xᵀ; X (..., rows, cols) with rows <= cols, so A is the small side.

    Fused multiply-adds (addmm / baddbmm), as torch's Newton–Schulz uses: no temporaries for the scaled
    terms."""
    if x.ndim == 2:
        gram = x @ x.T  # (rows, rows)
        return torch.addmm(x, torch.addmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    batch = x.reshape(-1, *x.shape[-2:])  # (batch, rows, cols)
    gram = batch @ batch.mT  # (batch, rows, rows)
    out = torch.baddbmm(batch, torch.baddbmm(gram, gram, gram, beta=b, alpha=c), batch, beta=a)
    return out.reshape(x.shape)


def polar_express(update: Tensor, steps: int = len(POLAR_EXPRESS_COEFFICIENTS)) -> Tensor:
    """The reference's orthogonalisation of `update` (..., rows, cols); returned in the dtype of
    `orthogonalisation_dtype` with the input's shape. `steps` <= 5 uses the first `steps` sets."""
    if not 1 <= steps <= len(POLAR_EXPRESS_COEFFICIENTS):
        raise ValueError(f"ns_steps: must be in 1..{len(POLAR_EXPRESS_COEFFICIENTS)}, got {steps}")
    x = update.to(orthogonalisation_dtype(update.device))
    tall = x.size(-2) > x.size(-1)
    if tall:  # work on the wide orientation so the Gram matrix is the smaller one
        x = x.mT
    x = x / (x.norm(dim=(-2, -1), keepdim=True) * POLAR_EXPRESS_NORM_MARGIN + POLAR_EXPRESS_EPS)
    for a, b, c in POLAR_EXPRESS_COEFFICIENTS[:steps]:
        x = _odd_quintic(x, a, b, c)
    return x.mT if tall else x


def newton_schulz(
    update: Tensor,
    coefficients: tuple[float, float, float] = NEWTON_SCHULZ_COEFFICIENTS,
    steps: int = 5,
    eps: float = NEWTON_SCHULZ_EPS,
) -> Tensor:
    """`torch.optim.Muon`'s orthogonalisation of a 2-D `update` (same iteration, coefficients and
    normalisation), in the dtype of `orthogonalisation_dtype` instead of always bf16."""
    if update.ndim != 2:
        raise ValueError(f"Muon updates must be 2-D matrices, got shape {tuple(update.shape)}")
    a, b, c = coefficients
    x = update.to(orthogonalisation_dtype(update.device))
    tall = x.size(0) > x.size(1)
    if tall:
        x = x.T
    x = x / x.norm().clamp(min=eps)
    for _ in range(steps):
        gram = x @ x.T
        x = torch.addmm(x, torch.addmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    return x.T if tall else x
