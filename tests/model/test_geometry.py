"""Loop geometry metrics on hand-built states with known answers, and on a real LoopedLM's rounds."""

from __future__ import annotations

import math

import pytest
import torch

from looplab.families.looped.model import LoopedLM
from looplab.model import geometry
from looplab.model.presets import preset
from tests.model.conftest import forward_states


def rollout(h0: torch.Tensor, step, n: int, skip: int | None = None) -> torch.Tensor:
    """States (n + 1, B, T, d) of applying `step` n times from h0; round `skip` (1-based) is the identity."""
    states = [h0]
    for t in range(1, n + 1):
        states.append(states[-1] if t == skip else step(states[-1]))
    return torch.stack(states)


def test_angle_is_zero_for_parallel_states_and_a_right_angle_for_orthogonal_ones():
    e1, e2 = torch.zeros(4), torch.zeros(4)
    e1[0], e2[1] = 1.0, 1.0
    parallel = torch.stack([e1, 3.0 * e1, 0.5 * e1]).view(3, 1, 1, 4)
    assert geometry.angle(parallel).tolist() == pytest.approx([0.0, 0.0], abs=1e-6)
    turn = torch.stack([e1, e2, -e2]).view(3, 1, 1, 4)  # a right angle, then a reversal
    assert geometry.angle(turn).tolist() == pytest.approx([math.pi / 2, math.pi], abs=1e-6)
    # mean over tokens: one token turns by π/2, the other not at all
    two = torch.stack([torch.stack([e1, e1]), torch.stack([e2, 2 * e1])]).view(2, 1, 2, 4)
    assert geometry.angle(two).item() == pytest.approx(math.pi / 4, abs=1e-6)


def test_state_variance_is_the_population_variance_across_channels():
    h1 = torch.tensor([[1.0, 2.0, 3.0, 4.0], [2.0, 2.0, 2.0, 2.0]]).view(1, 2, 4)  # B=1, T=2
    states = torch.stack([torch.zeros(1, 2, 4), h1])
    # [1, 2, 3, 4]: mean 2.5, variance (2.25 + 0.25 + 0.25 + 2.25) / 4 = 1.25; constant: 0; mean 0.625
    assert geometry.state_variance(states).tolist() == pytest.approx([0.625])
    # one value per round: the state after round 2 is twice round 1's, so four times the variance
    assert geometry.state_variance(torch.stack([states[0], h1, 2 * h1])).tolist() == pytest.approx(
        [0.625, 2.5]
    )


def test_rel_update_matches_the_forwards_definition():
    h0 = torch.tensor([3.0, 4.0]).view(1, 1, 2)  # norm 5
    h1 = h0 + torch.tensor([0.0, 5.0])  # (3, 9)
    states = torch.stack([h0, h1, h1 + torch.tensor([3.0, 4.0])])
    # round 1: ‖(0, 5)‖ / ‖(3, 4)‖ = 1; round 2: ‖(3, 4)‖ / ‖(3, 9)‖ = 5 / sqrt(90)
    assert geometry.rel_update(states).tolist() == pytest.approx([1.0, 5 / math.sqrt(90)])
    m = geometry.round_metrics(states)
    names = {"rel_change", "angle", "state_var", "update_norm", "bf16_resolution"}
    assert set(m) == names and all(v.shape == (2,) for v in m.values())


def test_a_contracting_rollout_has_its_ratio_and_reaches_bf16_resolution():
    """h_t = h* + q^t (h0 − h*): each update is q times the previous one, so every change ratio is q, and
    the relative change falls below the state's bf16 rounding error (about 2⁻⁹ per channel of a
    generic state) at the round the decay passes it; a state exact in bf16 has no rounding error."""
    torch.manual_seed(0)
    target, h0, q = torch.randn(1, 4, 64), torch.randn(1, 4, 64), 0.5
    states = rollout(h0, lambda h: target + q * (h - target), 16)
    norms = geometry.update_norm(states).tolist()
    ratios = geometry.change_ratio(norms)
    assert math.isnan(ratios[0]) and ratios[1:] == pytest.approx([q] * 15, rel=1e-3)
    resolution = geometry.bf16_resolution(states)
    assert 2**-12 < resolution.min().item() and resolution.max().item() < 2**-8
    rel = geometry.rel_update(states).tolist()
    first = geometry.bf16_round(rel, resolution.tolist())
    assert first is not None and rel[first - 1] < resolution[first - 1] <= rel[first - 2]
    exact = torch.ones(3, 1, 1, 8)  # 1.0 is exact in bf16, and nothing changes
    assert geometry.bf16_resolution(exact).tolist() == [0.0, 0.0]
    assert geometry.bf16_round([1.0, 0.5], [0.1, 0.1]) is None


def test_no_interaction_when_each_round_adds_a_constant():
    torch.manual_seed(0)
    h0, c = torch.randn(2, 3, 8), torch.randn(8)
    n = 5
    states = rollout(h0, lambda h: h + c, n)
    matrix = geometry.interaction(states, lambda i: rollout(h0, lambda h: h + c, n, skip=i))
    upper = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
    assert matrix[upper].abs().max().item() < 1e-6
    assert torch.isnan(matrix[~upper]).all()  # the diagonal and below are undefined


def test_interaction_of_a_scaling_round_is_one_minus_its_inverse_scale():
    """h_t = a·h_{t−1}: Δ_j = (a − 1) a^{j−1} h0, and with round i skipped (a − 1) a^{j−2} h0, so every
    pair i < j has interaction |1 − 1/a| (0.5 for a = 2)."""
    torch.manual_seed(1)
    h0 = torch.randn(1, 4, 6)
    n = 4
    states = rollout(h0, lambda h: 2 * h, n)
    matrix = geometry.interaction(states, lambda i: rollout(h0, lambda h: 2 * h, n, skip=i))
    for i in range(1, n):
        for j in range(i + 1, n + 1):
            assert matrix[i - 1, j - 1].item() == pytest.approx(0.5, rel=1e-5)


def test_interaction_with_a_subset_of_skipped_rounds_and_bad_input():
    h0 = torch.ones(1, 1, 2)
    states = rollout(h0, lambda h: 2 * h, 3)
    matrix = geometry.interaction(states, lambda i: rollout(h0, lambda h: 2 * h, 3, skip=i), skipped=[2])
    assert torch.isnan(matrix[0]).all() and matrix[1, 2].item() == pytest.approx(0.5)
    with pytest.raises(ValueError, match="skipped: round 3"):
        geometry.interaction(states, lambda i: states, skipped=[3])
    with pytest.raises(ValueError, match="skip_forward"):
        geometry.interaction(states, lambda i: states[:2])
    with pytest.raises(ValueError, match="states"):
        geometry.angle(torch.zeros(1, 1, 1, 2))


def test_a_looped_lm_has_interacting_rounds_and_round_states_are_its_forwards_states():
    torch.manual_seed(0)
    cfg = preset("fixed4", "tiny", d_model=32, n_heads=1, head_dim=32, seq_len=16)
    model = LoopedLM(cfg).eval()
    idx = torch.randint(0, cfg.vocab_size, (2, 16))
    states = model.round_states(idx, 4, h0_seed=3)
    with torch.no_grad():
        forward = forward_states(model, idx, loops=4, h0_seed=3)  # read from the forward's own rounds
    assert geometry.rel_update(states).tolist() == pytest.approx(
        geometry.rel_update(forward).tolist(), rel=1e-5
    )
    torch.testing.assert_close(states, forward)
    matrix = geometry.interaction(states, lambda i: model.round_states(idx, 4, h0_seed=3, skip_round=i - 1))
    upper = torch.triu(torch.ones(4, 4, dtype=torch.bool), diagonal=1)
    assert (matrix[upper] > 0).all() and torch.isfinite(matrix[upper]).all()
