"""Muon on the CPU: the fp32 Newton-Schulz we swap in computes what PyTorch's bf16 one computes."""

from __future__ import annotations

import torch

from workers import optim


def test_cpu_newton_schulz_is_fp32_and_agrees_with_the_bf16_original():
    g = torch.Generator().manual_seed(0)
    for shape in [(64, 256), (256, 64), (128, 128)]:
        grad = torch.randn(*shape, generator=g)
        args = ((3.4445, -4.775, 2.0315), 5, 1e-7)
        ours = optim._newtonschulz_fp32_on_cpu(grad, *args)
        ref = optim._newtonschulz_bf16(grad, *args).float()
        assert ours.dtype == torch.float32 and ours.shape == grad.shape
        # bf16 keeps ~3 significant digits and 5 iterations compound it: a few % in Frobenius norm
        assert torch.linalg.norm(ours - ref) < 0.05 * torch.linalg.norm(ref)
        # an orthogonalised update: singular values pulled towards 1 (the quintic aims at ~[0.5, 1.5];
        # the tiniest ones of a random square matrix need more than 5 steps, so look at the median)
        s = torch.linalg.svdvals(ours)
        assert 0.5 < s.median() < 1.5 and s.max() < 1.6


def test_torch_muon_uses_it_on_cpu():
    from torch.optim import _muon

    assert _muon._zeropower_via_newtonschulz is optim._newtonschulz_fp32_on_cpu
    w = torch.nn.Parameter(torch.randn(32, 16))
    opt = torch.optim.Muon([w], lr=0.02)
    before = w.detach().clone()
    w.grad = torch.randn(32, 16)
    opt.step()
    assert w.dtype == torch.float32 and not torch.equal(w.detach(), before)
