"""The reference initialisation, parameter by parameter, against the analytic values (see model/init.py).

Scaled orthogonal matrices have an exact entry RMS (their Frobenius norm is fixed), so those checks are
tight; the random tables (value embeddings, gates) are checked at a width where the sample std is
within a few per cent.
"""

from __future__ import annotations

import math

import pytest
import torch

from looplab.families.looped.model import LoopedLM
from looplab.model.config import ModelConfig
from looplab.model.init import draw_h0, scaled_orthogonal_, small_init_std
from looplab.model.presets import preset

D = 384  # wide enough for sample statistics, small enough to build in well under a second


@pytest.fixture(scope="module")
def model() -> LoopedLM:
    torch.manual_seed(0)
    return LoopedLM(preset("parcae", "tiny", d_model=D, n_heads=6, head_dim=64, vocab_size=1024))


def _rms(w: torch.Tensor) -> float:
    return w.float().pow(2).mean().sqrt().item()


def test_matrices_are_scaled_orthogonal_with_the_small_init_std(model):
    std = math.sqrt(2 / (5 * D))
    assert small_init_std(D) == pytest.approx(std) and small_init_std(768) == pytest.approx(0.0228, abs=1e-4)
    for blk in model.blocks():
        for w in (blk.attn.q.weight, blk.attn.k.weight, blk.attn.v.weight, blk.mlp.fc.weight):
            assert _rms(w) == pytest.approx(std, rel=1e-4)
            assert abs(w.mean().item()) < 0.05 * std
        q = blk.attn.q.weight  # square: q q^T = std^2 d I
        torch.testing.assert_close(q @ q.T, std**2 * D * torch.eye(D), atol=1e-5, rtol=0)
        fc = blk.mlp.fc.weight  # tall (4d, d): orthogonal columns, fc^T fc = std^2 4d I
        torch.testing.assert_close(fc.T @ fc, std**2 * 4 * D * torch.eye(D), atol=1e-5, rtol=0)
        # output projections start at zero: every block is the identity at init
        assert not blk.attn.o.weight.any() and not blk.mlp.proj.weight.any()
    # readout C: scaled orthogonal too (sqrt(2/5) x orthogonal), not the identity
    C = model.C
    torch.testing.assert_close(C @ C.T, 0.4 * torch.eye(D), atol=1e-5, rtol=0)
    assert C.diagonal().abs().max() < 0.2
    # token embedding (V x d), tied head: entry RMS std, orthogonal columns
    wte = model.wte.weight
    assert _rms(wte) == pytest.approx(std, rel=1e-4)
    torch.testing.assert_close(wte.T @ wte, std**2 * 1024 * torch.eye(D), atol=1e-5, rtol=0)


def test_value_embeddings_and_gates_use_the_pytorch_defaults(model):
    blocks = [b for b in model.blocks() if b.attn.ve is not None]
    assert len(blocks) == 3
    for blk in blocks:
        table = blk.attn.ve.weight  # nn.Embedding default: N(0, 1)
        assert table.std().item() == pytest.approx(1.0, rel=0.02) and abs(table.mean().item()) < 0.01
        gate = blk.attn.ve_gate.weight  # nn.Linear default: U(-1/sqrt(32), 1/sqrt(32))
        bound = 1 / math.sqrt(32)
        assert gate.abs().max().item() <= bound and gate.abs().max().item() > 0.9 * bound
    gates = torch.cat([b.attn.ve_gate.weight.flatten() for b in blocks])  # 3 x 6 x 32 = 576 draws
    assert gates.std().item() == pytest.approx(1 / math.sqrt(3 * 32), rel=0.1)


def test_injection_and_norms(model):
    assert not model.A_log.any()
    decay = torch.exp(-torch.nn.functional.softplus(model.dt_bias) * model.A_log.exp())
    torch.testing.assert_close(decay, torch.full((D,), math.sqrt(1 / 5)))
    assert torch.equal(model.B, torch.eye(D))
    norms = [model.norm_f, model.prelude_norm] + [n for b in model.blocks() for n in (b.norm1, b.norm2)]
    for norm in norms:
        assert norm.eps == 1e-5 and torch.equal(norm.weight, torch.ones(D))


def test_init_is_reproducible_under_the_global_seed():
    cfg = preset("parcae", "tiny")
    torch.manual_seed(3)
    a = LoopedLM(cfg).state_dict()
    torch.manual_seed(3)
    b = LoopedLM(cfg).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_scaled_orthogonal_wide_matrix_and_meta():
    torch.manual_seed(0)
    w = scaled_orthogonal_(torch.empty(16, 64), 0.1)  # wide: orthogonal rows
    torch.testing.assert_close(w @ w.T, 0.01 * 64 * torch.eye(16), atol=1e-5, rtol=0)
    with torch.device("meta"):
        assert scaled_orthogonal_(torch.empty(8, 8), 0.1).is_meta


def test_h0_std_is_a_function_of_width_unless_overridden():
    assert ModelConfig(d_model=768, n_heads=6, head_dim=128).initial_state_std == pytest.approx(
        0.02282, abs=1e-5
    )
    tiny = preset("parcae", "tiny")
    assert tiny.h0_std is None and tiny.initial_state_std == pytest.approx(math.sqrt(2 / (5 * 64)))
    assert preset("parcae", "tiny", h0_std=0.05).initial_state_std == 0.05
    # the draw: normal truncated to +-3 std (std of such a draw: 0.9866 std)
    std = tiny.initial_state_std
    like = torch.empty(0)
    for seed in (None, 7):
        h0 = draw_h0(4, torch.arange(512), 64, std, seed, like)
        assert h0.shape == (4, 512, 64)
        assert h0.std().item() == pytest.approx(0.9866 * std, rel=0.02)
        assert h0.abs().max().item() <= 3 * std * (1 + 1e-6)
