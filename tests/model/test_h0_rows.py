"""Training's row-addressed initial state (`model.init.RowKey`, `h0_rows`): its distribution is the
reference's truncated normal, and each row's state is a function of (seed, step, row) alone.

Tolerances come from the sample size n: 5 standard errors for the mean, the variance and a tail
fraction, and the Kolmogorov-Smirnov bound 1.95 / sqrt(n) (p ~ 0.001) for the whole distribution.
For a standard normal truncated to [-a, a], with Z = 2 Phi(a) - 1 and phi the density:
E[X^2] = 1 - 2 a phi(a) / Z and E[X^4] = 3 - 2 (a^3 + 3 a) phi(a) / Z.
"""

from __future__ import annotations

import math

import pytest
import torch

from looplab.model.init import RowKey, draw_h0, h0_from_seed, h0_rows

A = 3.0  # truncation at +-3 std
STD = 0.02
PHI_A = math.exp(-A * A / 2) / math.sqrt(2 * math.pi)
Z = math.erf(A / math.sqrt(2))  # 2 Phi(a) - 1
M2 = 1 - 2 * A * PHI_A / Z
M4 = 3 - 2 * (A**3 + 3 * A) * PHI_A / Z


def _cdf(x: torch.Tensor) -> torch.Tensor:
    """CDF of the truncated normal (std STD, bounds +-A STD) at x (float64)."""
    phi = 0.5 * (1 + torch.erf(x / (STD * math.sqrt(2))))
    lo = 0.5 * (1 + math.erf(-A / math.sqrt(2)))
    return (phi - lo) / Z


@pytest.fixture(scope="module")
def sample() -> torch.Tensor:
    key = RowKey(seed=3, step=7, rows=tuple(range(64)))
    return h0_rows(key, torch.arange(64), 64, STD).double()  # (64 rows, 64 positions, 64 channels)


def test_mean_std_and_truncation(sample):
    x, n = sample.flatten(), sample.numel()
    assert sample.shape == (64, 64, 64) and n == 2**18
    var = M2 * STD**2
    assert abs(x.mean().item()) < 5 * math.sqrt(var / n)
    se_var = math.sqrt((M4 - M2**2) / n) * STD**2
    assert abs(x.var().item() - var) < 5 * se_var
    assert x.abs().max().item() < A * STD  # truncated ...
    assert x.abs().max().item() > 0.99 * A * STD  # ... at the bounds, not before them
    beyond_2 = 2 * (0.5 * math.erf(A / math.sqrt(2)) - 0.5 * math.erf(2 / math.sqrt(2))) / Z  # P(|X| > 2 std)
    frac = (x.abs() > 2 * STD).double().mean().item()
    assert abs(frac - beyond_2) < 5 * math.sqrt(beyond_2 * (1 - beyond_2) / n)


def test_kolmogorov_smirnov(sample):
    x = sample.flatten().sort().values
    n = x.numel()
    cdf = _cdf(x)
    ranks = torch.arange(1, n + 1, dtype=torch.float64)
    ks = torch.maximum(ranks / n - cdf, cdf - (ranks - 1) / n).max().item()
    assert ks < 1.95 / math.sqrt(n)


def test_rows_positions_channels_and_steps_are_uncorrelated(sample):
    bound = 5 / math.sqrt(64 * 64)  # 5 standard errors of a correlation over one row's 4,096 values

    def corr(a: torch.Tensor, b: torch.Tensor) -> float:
        return torch.corrcoef(torch.stack([a.flatten(), b.flatten()]))[0, 1].item()

    assert abs(corr(sample[0], sample[1])) < bound  # neighbouring rows
    assert abs(corr(sample[:, :, 0], sample[:, :, 1])) < bound  # neighbouring channels
    assert abs(corr(sample[:, 0], sample[:, 1])) < bound  # neighbouring positions
    other_step = h0_rows(RowKey(3, 8, tuple(range(64))), torch.arange(64), 64, STD).double()
    assert abs(corr(sample[0], other_step[0])) < bound  # the same row one step later
    evaluation = h0_from_seed(3, torch.arange(64), 64, STD).double()  # the int-seed h0 of evaluation
    assert abs(corr(sample[0], evaluation)) < bound


def test_a_row_is_a_function_of_seed_step_and_row_alone(sample):
    part = h0_rows(RowKey(3, 7, (40, 2, 2)), torch.arange(64), 64, STD).double()
    assert torch.equal(part, sample[[40, 2, 2]])
    late = h0_rows(RowKey(3, 7, (2,)), torch.arange(32, 64), 64, STD).double()  # later positions only
    assert torch.equal(late[0], sample[2, 32:])


def test_draw_h0_checks_what_it_is_given():
    pos, like = torch.arange(4), torch.empty((), dtype=torch.bfloat16)
    assert draw_h0(2, pos, 8, STD, RowKey(0, 0, (0, 1)), like).dtype == torch.bfloat16
    with pytest.raises(ValueError, match="a RowKey of 3 rows for a batch of 2"):
        draw_h0(2, pos, 8, STD, RowKey(0, 0, (0, 1, 2)), like)
    given = torch.randn(2, 4, 8)
    assert torch.equal(draw_h0(2, pos, 8, STD, given, torch.empty(())), given)
    with pytest.raises(ValueError, match="states of shape"):
        draw_h0(2, pos, 8, STD, torch.randn(2, 4, 7), like)
