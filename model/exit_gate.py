"""A learned exit: a gate after every round that gives the probability of stopping there, and the
objectives that train it (docs/adaptive.md, "Learned exits", has the formulas for people).

The gate (`ExitGate`, on when `ModelConfig.exit_gate` names an objective) reads round t's state h_t
(B, T, d), t = 1..R with R = `cfg.loops`, and gives

    λ_t = sigmoid(w · rmsnorm(h_t) + b_t)          one w (d,) shared by the rounds, a bias b_t per round

The exit distribution over rounds 1..R (`exit_distribution`):

    p(t) = λ_t ∏_{s<t} (1 − λ_s)   for t < R,      p(R) = ∏_{s<R} (1 − λ_s)   (the remaining mass)

At init w is small (drawn from a generator of its own: building the gate never moves the model's
random stream, so a model with the gate off is bit for bit the model of before) and b_t = logit(1 /
(R − t + 1)), which makes p uniform over 1..R.

The objectives (`objective`), L_t the per-token language-model loss read out at round t (the model's
readout: readout C, coda, head — the same code path as the depth sweep and the exit rules), all means
over the target tokens:

- `entropy` (Ouro):      Σ_t p(t) L_t − β H(p)                       β = `gate_coef` (= a KL to uniform)
- `geometric` (PonderNet): Σ_t p(t) L_t + β KL(p ‖ q),  q(t) = λ_p (1 − λ_p)^{t−1} for t < R and the
                         remaining mass (1 − λ_p)^{R−1} at R         β = `gate_coef`, λ_p = `gate_prior`
- `act` (Graves):        N = the first round where Σ_{s≤N} λ_s ≥ 1 − ε (else R), remainder
                         r = 1 − Σ_{s<N} λ_s; the output is the mixture Σ_{t<N} λ_t y_t + r y_N of the
                         rounds' logits y_t, its cross-entropy the task loss; plus τ (N + r)
                         τ = `gate_coef`, ε = `gate_eps`. Its exit distribution: λ_t for t < N, r at N.

The *task loss* (`GateLoss.task`) is the first term (Σ p L, or the mixture's cross-entropy for act);
`expected_rounds` is Σ_t t p(t). Training runs all R rounds with gradient (a `grad_rounds` truncation
applies as for any model: the earlier rounds' readouts then train the coda, head and gate only).
The cumulative exit mass (`cumulative_mass`) is what the `gate` exit rule thresholds at inference.
Pure PyTorch; the model calls `ExitGate` and `objective` (`families.looped.model`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

GATE_SEED = 0x6A7E  # the gate's own generator: its init never draws from the global one
GATE_INIT_STD = 0.02


class ExitGate(nn.Module):
    """λ_t = sigmoid(w · rmsnorm(h_t) + b_t): the stop probability after round t (module docstring)."""

    def __init__(self, d_model: int, rounds: int) -> None:
        super().__init__()
        # torch.empty draws nothing: the parameters are filled by init_weights from the gate's generator
        self.weight = nn.Parameter(torch.empty(d_model))
        self.bias = nn.Parameter(torch.empty(rounds))
        self.init_weights()

    @torch.no_grad()
    def init_weights(self) -> None:
        g = torch.Generator().manual_seed(GATE_SEED)
        self.weight.copy_(torch.randn(self.weight.shape, generator=g) * GATE_INIT_STD)
        R = self.bias.numel()
        uniform = [math.log(1.0 / (R - t - 1)) if t < R - 1 else 0.0 for t in range(R)]  # logit(1/(R-t))
        self.bias.copy_(torch.tensor(uniform))

    def forward(self, h: Tensor, t: int) -> Tensor:
        """h (B, T, d) after round t (1-based) -> λ_t (B, T) fp32. Rounds past R use round R's bias."""
        z = F.rms_norm(h.float(), (h.shape[-1],)) @ self.weight.float()
        return torch.sigmoid(z + self.bias[min(t, self.bias.numel()) - 1].float())


def exit_distribution(lam: Tensor) -> Tensor:
    """λ (R, ...) -> p (R, ...): p(t) = λ_t ∏_{s<t}(1 − λ_s) for t < R, the remaining mass at R."""
    survive = torch.cumprod(torch.cat([torch.ones_like(lam[:1]), 1.0 - lam[:-1]]), dim=0)  # ∏_{s<t}
    return torch.cat([lam[:-1] * survive[:-1], survive[-1:]])


def act_halting(lam: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """ACT's halting over λ (R, ...): (weights (R, ...), N (...) 1-based). N is the first round whose
    summed λ reaches 1 − eps (R if none does); weights are λ_t before N, the remainder 1 − Σ_{s<N} λ_s
    at N, 0 after. The selection of N carries no gradient; the weights do."""
    R = lam.shape[0]
    total = torch.cumsum(lam, dim=0)
    reached = torch.cat([(total[:-1] >= 1.0 - eps), torch.ones_like(total[-1:], dtype=torch.bool)])
    rounds = torch.arange(1, R + 1, device=lam.device).view(R, *([1] * (lam.dim() - 1)))
    n = torch.where(reached, rounds, R + 1).amin(dim=0)  # (...) the first round reached
    before = rounds < n
    remainder = 1.0 - torch.where(before, lam, 0.0).sum(0)
    weights = torch.where(before, lam, torch.where(rounds == n, remainder, 0.0))
    return weights, n


# How a gate's stop probabilities accumulate when no objective says otherwise (another family's
# `exit_gate`, model/contract/): as an exit distribution, 1 − ∏_{s≤t} (1 − λ_s), as for entropy and geometric.
STOP_PROBABILITIES = "stop_probabilities"


def cumulative_mass(lam: Tensor, objective: str, eps: float = 0.0) -> Tensor:
    """The exit distribution's mass at rounds <= t, for t = 1..len(λ) (R, ...): what the `gate` rule
    thresholds. For act the halting sum Σ_{s≤t} λ_s (capped at 1; with ε, reaching 1 − ε is full); for
    any other objective (and `STOP_PROBABILITIES`) 1 − ∏_{s≤t} (1 − λ_s)."""
    if objective == "act":
        total = torch.cumsum(lam, dim=0)
        return torch.where(total >= 1.0 - eps, 1.0, total.clamp(max=1.0))
    survive = torch.cumprod(1.0 - lam, dim=0)
    return 1.0 - survive


class GateMass:
    """The cumulative exit mass round by round, for the `gate` exit rule (`model.exits`): called with
    round t's state for t = 1, 2, ... in order, it returns the mass of rounds <= t (B, T), by
    `cumulative_mass`'s rule for the objective the gate was trained with."""

    def __init__(self, exit_gate, objective: str, eps: float) -> None:
        self.exit_gate, self.objective, self.eps = exit_gate, objective, eps
        self.lams: list[Tensor] = []

    def __call__(self, h: Tensor, t: int) -> Tensor:
        if t != len(self.lams) + 1:
            raise ValueError(
                f"gate: round {t} after {len(self.lams)} rounds; expected round {len(self.lams) + 1}"
            )
        self.lams.append(self.exit_gate(h, t))
        return cumulative_mass(torch.stack(self.lams), self.objective, self.eps)[-1]


@dataclass
class GateLoss:
    """One objective over a batch: `total` (what is minimised), `task` (its loss part), `regulariser`
    (β H, β KL or τ (N + r)) and `expected_rounds`, each a 0-d tensor (means over the target tokens)."""

    total: Tensor
    task: Tensor
    regulariser: Tensor
    expected_rounds: Tensor


def _mean(x: Tensor, mask: Tensor) -> Tensor:
    return (x * mask).sum() / mask.sum().clamp_min(1)


def geometric_prior(R: int, prior: float, like: Tensor) -> Tensor:
    """q (R,): λ_p (1 − λ_p)^{t−1} for t < R, the remaining mass (1 − λ_p)^{R−1} at R."""
    t = torch.arange(R, dtype=torch.float64)
    q = prior * (1.0 - prior) ** t
    q[-1] = (1.0 - prior) ** (R - 1)
    return q.to(device=like.device, dtype=like.dtype)


def objective(
    name: str, coef: float, lam: Tensor, logits: list[Tensor], targets: Tensor, prior: float, eps: float
) -> GateLoss:
    """The objective `name` (entropy, geometric, act) with coefficient `coef` (β or τ), for the stop
    probabilities λ (R, B, T) and the logits (B, T, V) read out at rounds 1..R, targets (B, T) (-1
    ignored). See the module docstring for the formulas."""
    R = lam.shape[0]
    mask = (targets != -1).float()
    safe = targets.clamp_min(0).reshape(-1)
    rounds = torch.arange(1, R + 1, device=lam.device, dtype=lam.dtype).view(R, 1, 1)

    def ce(y: Tensor) -> Tensor:  # per-token cross-entropy (B, T)
        return F.cross_entropy(y.reshape(-1, y.shape[-1]).float(), safe, reduction="none").view(targets.shape)

    if name == "act":
        weights, n = act_halting(lam, eps)
        mixture = sum(w[..., None] * y for w, y in zip(weights, logits))
        task = _mean(ce(mixture), mask)
        remainder = weights.gather(0, (n - 1)[None]).squeeze(0)
        reg = coef * _mean(n.to(lam.dtype) + remainder, mask)
        return GateLoss(task + reg, task, reg, _mean((rounds * weights).sum(0), mask))
    p = exit_distribution(lam)  # (R, B, T)
    losses = torch.stack([ce(y) for y in logits])  # (R, B, T)
    task = _mean((p * losses).sum(0), mask)
    logp = p.clamp_min(1e-12).log()
    if name == "entropy":
        reg = -coef * _mean(-(p * logp).sum(0), mask)  # − β H(p)
    else:
        q = geometric_prior(R, prior, p).view(R, 1, 1)
        reg = coef * _mean((p * (logp - q.log())).sum(0), mask)  # β KL(p ‖ q)
    return GateLoss(task + reg, task, reg, _mean((rounds * p).sum(0), mask))
