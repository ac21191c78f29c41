"""The pieces of the Parcae reference optimizer, each on small matrices worked by hand.

Polar Express orthogonalisation, NorMuon row normalisation, cautious weight decay, the momentum
warm-up, the skipped first step, the reference AdamW, and one full Muon step composed from the pieces.
"""

from __future__ import annotations

import math

import pytest
import torch

from looplab.workers.train import muon
from looplab.workers.train.orthogonalise import (
    POLAR_EXPRESS_COEFFICIENTS,
    newton_schulz,
    orthogonalisation_dtype,
    polar_express,
)

# The reference's POLAR_COEFFS (recpre/optim/muon_adamw.py), one (a, b, c) per iteration.
REFERENCE_COEFFICIENTS = [
    (8.156554524902461, -22.48329292557795, 15.878769915207462),
    (4.042929935166739, -2.808917465908714, 0.5000178451051316),
    (3.8916678022926607, -2.772484153217685, 0.5060648178503393),
    (3.285753657755655, -2.3681294933425376, 0.46449024233003106),
    (2.3465413258596377, -1.7097828382687081, 0.42323551169305323),
]


def _compose(x: torch.Tensor, coefficients) -> torch.Tensor:
    """The scalar map the iteration applies to every singular value."""
    for a, b, c in coefficients:
        x = a * x + b * x**3 + c * x**5
    return x


# ------------------------------------------------------------------------------ orthogonalisation
def test_polar_express_coefficients_are_the_references():
    assert [tuple(c) for c in POLAR_EXPRESS_COEFFICIENTS] == REFERENCE_COEFFICIENTS


def test_polar_express_scalar_map_keeps_every_value_of_the_design_interval_near_one():
    # Designed for singular values in [1e-3, 1] after normalisation: 5 iterations land in [0.858, 1.142]
    sigma = torch.logspace(-3, 0, 20001, dtype=torch.float64)
    out = _compose(sigma, POLAR_EXPRESS_COEFFICIENTS)
    assert 0.858 < out.min() < 0.86 and 1.14 < out.max() < 1.142
    # ... while torch.optim.Muon's fixed quintic leaves its outputs much wider (and fails below ~1e-2)
    ns = _compose(sigma, [(3.4445, -4.775, 2.0315)] * 5)
    assert ns.max() > 1.2 and ns.min() < 0.5


@pytest.mark.parametrize("shape", [(16, 64), (64, 16), (24, 24)])
def test_polar_express_maps_each_singular_value_through_the_polynomials(shape):
    g = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    out = polar_express(g)
    assert out.dtype == torch.float32 and out.shape == g.shape
    sigma_in = torch.linalg.svdvals(g.double())
    # the iteration starts from g / (1.02 ‖g‖_F + 1e-6): every singular value is at most 1/1.02
    expected = _compose(sigma_in / (1.02 * torch.linalg.norm(g.double()) + 1e-6), POLAR_EXPRESS_COEFFICIENTS)
    sigma_out = torch.linalg.svdvals(out.double())  # sorted, and the map is not monotone: sort both
    torch.testing.assert_close(sigma_out, expected.sort(descending=True).values, rtol=1e-4, atol=1e-4)
    if shape != (24, 24):  # a random rectangular matrix is well conditioned: all values land near 1
        assert 0.85 < sigma_out.min() and sigma_out.max() < 1.15
    # and the singular vectors are kept: out = U·p(S)·Vᵀ
    u, s, vh = torch.linalg.svd(g.double(), full_matrices=False)
    torch.testing.assert_close(out.double(), u @ torch.diag(expected) @ vh, rtol=0, atol=1e-4)


def test_polar_express_works_on_a_batch_and_refuses_bad_step_counts(monkeypatch):
    """The batched path (baddbmm) applies the 2-D path's map (addmm) to each matrix, compared in float64.

    Why float64: the two kernels sum in different orders, and the 15 matmuls of 5 quintics whose terms
    reach |b| + |c| ~ 38x the result (iteration 1) carry float32's unit roundoff (6e-8) to a few 1e-6 on
    entries of size ~0.9 (1.7e-6 to 4.4e-6 on this VM over five seeds; 3.2e-6 elsewhere failed atol=1e-6):
    a size set by the machine's summation order, so no float32 tolerance holds by construction. The same
    computation in float64 rounds 2^29 ~ 5e8 times finer (measured here: 3.5e-15 to 7.8e-15), so 1e-10
    leaves a margin of 10^4 on any machine, and a batched formula that differs from the 2-D one shows far
    above it."""
    from looplab.workers.train import orthogonalise

    monkeypatch.setattr(orthogonalise, "orthogonalisation_dtype", lambda device: torch.float64)
    batch = torch.randn(3, 8, 5, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    together = polar_express(batch)
    assert together.dtype == torch.float64
    for i in range(3):
        torch.testing.assert_close(together[i], polar_express(batch[i]), rtol=0, atol=1e-10)
    with pytest.raises(ValueError, match="ns_steps"):
        polar_express(batch, steps=6)


def test_orthogonalisation_is_fp32_on_cpu_and_bf16_on_accelerators():
    assert orthogonalisation_dtype(torch.device("cpu")) == torch.float32
    assert orthogonalisation_dtype(torch.device("cuda")) == torch.bfloat16
    g = torch.randn(8, 4).bfloat16()  # even a bf16 input is orthogonalised in fp32 on the CPU
    assert polar_express(g).dtype == torch.float32 and newton_schulz(g).dtype == torch.float32


# ------------------------------------------------------------------------------ row normalisation
def test_row_normalise_3x2_by_hand():
    # rows have root-mean-squares 1, 2, 3; ‖g‖_F² = 2 + 8 + 18 = 28
    g = torch.tensor([[1.0, 1.0], [2.0, 2.0], [-3.0, 3.0]])
    v = torch.zeros(3, 1)
    out = muon.row_normalise(g, v, beta2=0.95)
    # first call: v = 0.05 · mean squares; every row then has rms 1, and the matrix keeps ‖g‖_F = √28
    torch.testing.assert_close(v, torch.tensor([[0.05], [0.2], [0.45]]))
    torch.testing.assert_close(out, math.sqrt(28 / 6) * torch.tensor([[1.0, 1.0], [1.0, 1.0], [-1.0, 1.0]]))
    # second call with every row's mean square 1: v = 0.95·v + 0.05 = (0.0975, 0.24, 0.4775)
    ones = torch.ones(3, 2)
    out2 = muon.row_normalise(ones, v, beta2=0.95)
    torch.testing.assert_close(v, torch.tensor([[0.0975], [0.24], [0.4775]]))
    inv_sqrt = torch.tensor([0.0975, 0.24, 0.4775]).rsqrt()
    rescale = math.sqrt(6) / math.sqrt(2 * (inv_sqrt**2).sum().item())  # keep ‖ones‖_F = √6
    torch.testing.assert_close(out2, (inv_sqrt * rescale)[:, None].expand(3, 2))
    assert math.isclose(out2.norm().item(), math.sqrt(6), rel_tol=1e-6)


def test_row_normalise_works_on_columns_of_a_wide_matrix():
    g = torch.tensor([[1.0, 2.0, -3.0], [1.0, 2.0, 3.0]])  # the 3x2 example transposed: 2x3
    v = torch.zeros(1, 3)
    assert muon.second_moment_shape(g.shape) == (1, 3) and muon.second_moment_shape(g.T.shape) == (3, 1)
    out = muon.row_normalise(g, v, beta2=0.95)
    torch.testing.assert_close(out, math.sqrt(28 / 6) * torch.tensor([[1.0, 1.0, -1.0], [1.0, 1.0, 1.0]]))


# --------------------------------------------------------------------------------- cautious decay
def test_cautious_weight_decay_by_hand():
    param = torch.tensor([[1.0, -1.0, 3.0], [2.0, -2.0, 0.0]])
    update = torch.tensor([[1.0, 1.0, 0.0], [-1.0, -1.0, 1.0]])
    # decay (lr·wd = 0.05) only where update·param >= 0: entries (0,0), (0,2), (1,1), (1,2)
    muon.cautious_step_(param, update, lr=0.1, weight_decay=0.5)
    expected = torch.tensor(
        [
            [1 - 0.1 - 0.05, -1 - 0.1, 3 - 0.15],  # same sign: decayed; opposite: not; zero update: decayed
            [2 + 0.1, -2 + 0.1 + 0.1, 0 - 0.1],  # same sign (both negative): decayed; zero param: nothing
        ]
    )
    torch.testing.assert_close(param, expected)


def test_aspect_lr_scales_tall_matrices_only():
    assert muon.aspect_lr(0.01, torch.Size([8, 2])) == pytest.approx(0.02)
    assert (
        muon.aspect_lr(0.01, torch.Size([2, 8])) == 0.01 and muon.aspect_lr(0.01, torch.Size([4, 4])) == 0.01
    )


# ------------------------------------------------------------------------- schedules and first step
def test_momentum_warms_from_085_to_095_over_300_steps():
    at = [muon.momentum_at(k, 0.85, 0.95, 300) for k in (0, 1, 150, 299, 300, 5000)]
    assert at[0] == 0.85 and at[4] == at[5] == pytest.approx(0.95)
    assert at[1] == pytest.approx(0.85 + 0.1 / 300) and at[2] == pytest.approx(0.90)
    assert at[3] < 0.95
    assert muon.momentum_at(0, 0.85, 0.95, 0) == 0.95  # no warm-up


def _tiny_pair(seed=0):
    g = torch.Generator().manual_seed(seed)
    w = torch.nn.Parameter(torch.randn(4, 2, generator=g))
    b = torch.nn.Parameter(torch.randn(3, generator=g))
    return w, b


def test_optimizer_counts_its_calls_for_the_warm_up_and_skips_only_the_first():
    w, b = _tiny_pair()
    opt = muon.ParcaeMuonAdamW([w], [b], lr=0.01, adam_lr=0.01, weight_decay=0.2)
    before = (w.detach().clone(), b.detach().clone())
    w.grad, b.grad = torch.ones_like(w), torch.ones_like(b)
    opt.step()  # the first call: nothing moves and no state is made
    assert torch.equal(w, before[0]) and torch.equal(b, before[1]) and not opt.state
    assert opt.param_groups[0]["momentum"] == 0.85
    opt.step()
    assert not torch.equal(w, before[0]) and not torch.equal(b, before[1])
    assert opt.param_groups[0]["momentum"] == pytest.approx(0.85 + 0.1 / 300)
    assert [g["calls"] for g in opt.param_groups] == [2, 2] and opt.state[b]["step"] == 1


def test_first_step_can_be_kept():
    w, b = _tiny_pair()
    opt = muon.ParcaeMuonAdamW([w], [b], lr=0.01, adam_lr=0.01, weight_decay=0.0, skip_first_step=False)
    before = w.detach().clone()
    w.grad, b.grad = torch.ones_like(w), torch.ones_like(b)
    opt.step()
    assert not torch.equal(w, before)


def test_a_muon_step_composes_the_pieces():
    w, b = _tiny_pair(1)
    opt = muon.ParcaeMuonAdamW([w], [b], lr=0.01, adam_lr=0.01, weight_decay=0.2)
    g = torch.randn(4, 2, generator=torch.Generator().manual_seed(2))
    w.grad = g
    opt.step()  # skipped
    start = w.detach().clone()
    opt.step()  # call 1: momentum 0.85 + 0.1/300, empty buffer
    mom = 0.85 + 0.1 / 300
    buffer = (1 - mom) * g
    update = polar_express((1 - mom) * g + mom * buffer)
    update = muon.row_normalise(update, torch.zeros(4, 1), 0.95)
    expected = start.clone()
    muon.cautious_step_(expected, update, 0.01 * math.sqrt(2), 0.2)  # a 4x2 matrix: lr · √2
    torch.testing.assert_close(w.detach(), expected, rtol=0, atol=1e-6)
    torch.testing.assert_close(opt.state[w]["momentum_buffer"], buffer)


def test_adamw_group_is_standard_adamw_with_the_reference_hyperparameters():
    w, b = _tiny_pair(3)
    ours = muon.ParcaeMuonAdamW([w], [b], lr=0.01, adam_lr=0.01, weight_decay=0.0, skip_first_step=False)
    twin = torch.nn.Parameter(b.detach().clone())
    torch_adamw = torch.optim.AdamW([twin], lr=0.01, betas=(0.8, 0.95), eps=1e-10, weight_decay=0.0)
    gen = torch.Generator().manual_seed(4)
    for _ in range(5):
        grad = torch.randn(3, generator=gen)
        w.grad, b.grad, twin.grad = torch.zeros_like(w), grad.clone(), grad.clone()
        ours.step()
        torch_adamw.step()
    torch.testing.assert_close(b.detach(), twin.detach(), rtol=1e-6, atol=1e-7)


def test_muon_parameters_must_be_matrices():
    with pytest.raises(ValueError, match="2-D"):
        muon.ParcaeMuonAdamW([torch.nn.Parameter(torch.ones(3))], [], lr=0.01, adam_lr=0.01, weight_decay=0.0)
