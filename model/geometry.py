"""Loop geometry: how the hidden state moves from round to round, measured on a stack of states.

The input is the state after every round of one forward, `states` (n + 1, B, T, d): h_0 is the state
the rounds start from, h_t the output of round t (t = 1..n, n = the inference depth in loops); this is
what `LoopedLM.round_states` returns. Δ_t = h_t − h_{t−1} is round t's update. Every metric is computed
per token (each of the B·T positions) and then averaged over the tokens, so each is one number per
round (or per pair of rounds):

- rel_update_t = ‖Δ_t‖ / ‖h_{t−1}‖ (the depth sweep's `rel_change`): how far round t moves the state,
  relative to its size.
- angle_t = arccos(cos_sim(h_t, h_{t−1})) in radians, in [0, π]: 0 when the round only rescales the
  state, π/2 when it turns it orthogonal. Computed as 2·atan2(‖u − v‖, ‖u + v‖) with u, v the unit
  vectors of h_t and h_{t−1}: the same angle, without arccos's loss of precision near 0 and π.
- state_var_t = the population variance of h_t across its d channels, (1/d) Σ_c (h_t,c − mean_c h_t)²:
  how spread out the state's channels are after round t.
- update_norm_t = ‖Δ_t‖, and from it change_ratio_t = mean ‖Δ_t‖ / mean ‖Δ_{t−1}‖ (t ≥ 2; a ratio of
  means over tokens, so a token whose update vanishes does not blow it up): how much of the previous
  round's change round t still makes. Below 1 the rounds converge geometrically.
- bf16_resolution_t = ‖bf16(h_{t−1}) − h_{t−1}‖ / ‖h_{t−1}‖: the relative rounding error of the state
  round t changes when it is held in bf16, measured on that state (≈ 2⁻⁹ for a state whose channels
  are not exact in bf16). `bf16_round` is the first round whose rel_update falls below it: from there
  on a bf16 forward could not represent the change the round makes.
- interaction(i, j) for rounds i < j: ‖Δ_j − Δ_j^(skip i)‖ / ‖Δ_j‖, where Δ_j^(skip i) is round j's
  update in a forward whose round i is the identity (h_i = h_{i−1}; every other round unchanged,
  `round_states(..., skip_round=i − 1)`). 0 when round j's update does not depend on what round i did
  (e.g. every round adds a constant); it grows as round j builds on round i's output. One matrix per
  depth n costs n − 1 extra forwards (skipping round n changes no later round), each holding n + 1
  states: callers keep n small (the depth sweep caps it at `MAX_INTERACTION_LOOPS`).

A norm in a denominator is clamped at 1e-12, so a zero state or a zero update
gives a large finite value, never a division by zero. Pure torch, no model code: a test builds the
states by hand.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch
from torch import Tensor

EPS = 1e-12
MAX_INTERACTION_LOOPS = 32  # n − 1 forwards of n + 1 states each per matrix: bounded work and memory


def _check(states: Tensor) -> Tensor:
    if states.dim() != 4 or states.shape[0] < 2:
        raise ValueError(
            f"states: expected (n + 1, B, T, d) with n >= 1 rounds, got shape {tuple(states.shape)}"
        )
    return states.float()


def _updates(s: Tensor) -> Tensor:
    """Δ_t = h_t − h_{t−1} for t = 1..n of checked states -> (n, B, T, d)."""
    return s[1:] - s[:-1]


def rel_update(states: Tensor) -> Tensor:
    """Mean over tokens of ‖Δ_t‖ / ‖h_{t−1}‖ -> (n,)."""
    s = _check(states)
    rel = _updates(s).norm(dim=-1) / s[:-1].norm(dim=-1).clamp_min(EPS)  # (n, B, T)
    return rel.flatten(1).mean(dim=1)


def angle(states: Tensor) -> Tensor:
    """Mean over tokens of the angle between h_t and h_{t−1}, radians in [0, π] -> (n,)."""
    s = _check(states)
    unit = s / s.norm(dim=-1, keepdim=True).clamp_min(EPS)  # (n + 1, B, T, d)
    after, before = unit[1:], unit[:-1]
    theta = 2 * torch.atan2((after - before).norm(dim=-1), (after + before).norm(dim=-1))  # (n, B, T)
    return theta.flatten(1).mean(dim=1)


def state_variance(states: Tensor) -> Tensor:
    """Mean over tokens of the population variance of h_t across channels, t = 1..n -> (n,)."""
    s = _check(states)
    return s[1:].var(dim=-1, unbiased=False).flatten(1).mean(dim=1)


def update_norm(states: Tensor) -> Tensor:
    """Mean over tokens of ‖Δ_t‖ -> (n,)."""
    return _updates(_check(states)).norm(dim=-1).flatten(1).mean(dim=1)


def bf16_resolution(states: Tensor) -> Tensor:
    """Mean over tokens of ‖bf16(h_{t−1}) − h_{t−1}‖ / ‖h_{t−1}‖ for t = 1..n -> (n,): the rounding error
    of each state a round starts from, relative to its size."""
    before = _check(states)[:-1]
    error = (before.bfloat16().float() - before).norm(dim=-1) / before.norm(dim=-1).clamp_min(EPS)
    return error.flatten(1).mean(dim=1)


def change_ratio(update_norms: list[float]) -> list[float]:
    """[NaN, u_2 / u_1, ..., u_n / u_{n−1}] from the mean update norms u_t (`update_norm`); NaN where the
    previous update is 0 (nothing to compare with)."""
    ratios = [math.nan]
    for before, after in zip(update_norms, update_norms[1:]):
        ratios.append(after / before if before > 0 else math.nan)
    return ratios


def bf16_round(rel_change: list[float], resolution: list[float]) -> int | None:
    """The first round t (1-based) whose relative change falls below the bf16 resolution of the state it
    changes (`bf16_resolution`), None when no round does."""
    for t, (change, floor) in enumerate(zip(rel_change, resolution), start=1):
        if change < floor:
            return t
    return None


def round_metrics(states: Tensor) -> dict[str, Tensor]:
    """rel_change, angle, state_var, update_norm and bf16_resolution per round, each (n,): the depth
    sweep's `round_deltas` columns (change_ratio is formed from update_norm over every token)."""
    return {
        "rel_change": rel_update(states),
        "angle": angle(states),
        "state_var": state_variance(states),
        "update_norm": update_norm(states),
        "bf16_resolution": bf16_resolution(states),
    }


def interaction(
    states: Tensor, skip_forward: Callable[[int], Tensor], skipped: Iterable[int] | None = None
) -> Tensor:
    """The interaction matrix -> (n, n): entry [i − 1, j − 1] = mean over tokens of
    ‖Δ_j − Δ_j^(skip i)‖ / ‖Δ_j‖ for 1 <= i < j <= n; NaN on and below the diagonal and in the rows of
    rounds not skipped.

    `skip_forward(i)` returns the states (n + 1, B, T, d) of the same forward with round i (1-based) made
    the identity. `skipped`: the rounds i to skip (default 1..n−1; a model that cannot skip round 1, e.g.
    one whose later rounds reuse round 1's keys and values, passes 2..n−1)."""
    s = _check(states)
    n = s.shape[0] - 1
    delta = _updates(s)  # (n, B, T, d)
    delta_norm = delta.norm(dim=-1).clamp_min(EPS)  # (n, B, T)
    out = torch.full((n, n), float("nan"))
    for i in range(1, n) if skipped is None else skipped:
        if not 1 <= i < n:
            raise ValueError(f"skipped: round {i} has no later round to change; expected 1..{n - 1}")
        other = skip_forward(i).float()
        if other.shape != s.shape:
            raise ValueError(f"skip_forward({i}): expected shape {tuple(s.shape)}, got {tuple(other.shape)}")
        later = slice(i, n)  # rounds j = i + 1..n (0-based rows i..n−1 of the updates)
        delta_skip = other[i + 1 :] - other[i:-1]  # (n − i, B, T, d)
        change = (delta[later] - delta_skip).norm(dim=-1) / delta_norm[later]  # (n − i, B, T)
        out[i - 1, i:] = change.flatten(1).mean(dim=1).cpu()
    return out
