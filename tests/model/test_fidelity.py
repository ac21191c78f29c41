"""The function of the public Parcae code, written out here independently of families/looped/layers.py and
families/looped/model.py: norms with eps 1e-5 (and a learnable prelude-output norm), the qk-norm without eps,
0.5 * ReLU^2, RoPE on neighbouring channel pairs (the reference's layout, which ours equals up to a
permutation of q/k rows, `families.looped.parcae_layout.pairs_to_halves`). Small-scale inputs make the epsilons
visible: an eps off by 10x fails.

And the public code itself: tests/fixtures/parcae_tiny is a checkpoint it wrote, with its logits at 1,
2, 4 and 8 loops; mapped by `families.looped.parcae_layout` (the importer's mapping), ours equal them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from looplab.families.looped.layers import qk_norm
from looplab.families.looped.model import LoopedLM
from looplab.families.looped.parcae_layout import (
    config_from_parcae,
    halves_to_pairs,
    pairs_to_halves,
    state_dict_from_parcae,
)
from looplab.model.contexts import SeqContext
from looplab.model.kv_cache import LayerKey
from looplab.model.presets import preset
from tests.model.conftest import randomize


def _norm(x, weight):  # the reference RMSNorm: eps 1e-5, weight after the normalisation
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * weight


def _rope_pairs(x, base, positions):
    """x (B, T, H, D): rotate neighbouring channels (2i, 2i+1) by position * base^(-2i/D)."""
    D = x.shape[-1]
    inv = 1.0 / base ** (torch.arange(0, D, 2, dtype=torch.float32) / D)
    ang = positions[:, None].float() * inv[None]  # (T, D/2)
    c, s = ang.cos()[None, :, None], ang.sin()[None, :, None]
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * c - odd * s, odd * c + even * s], dim=-1).flatten(-2)


def _reference_block(blk, x, idx, q_w, k_w, heads, base):
    """One pre-norm block in the reference's layout; q_w, k_w are in the pairs layout."""
    B, T, d = x.shape
    D = d // heads
    h = _norm(x, blk.norm1.weight)
    q = (h @ q_w.T).view(B, T, heads, D)
    k = (h @ k_w.T).view(B, T, heads, D)
    v = (h @ blk.attn.v.weight.T).view(B, T, heads, D)
    if blk.attn.ve is not None:
        gate = 2 * torch.sigmoid(h[..., :32] @ blk.attn.ve_gate.weight.T)
        v = v + gate[..., None] * blk.attn.ve(idx).view(B, T, heads, D)
    pos = torch.arange(T)
    q = F.rms_norm(_rope_pairs(q, base, pos), (D,))  # no eps: the dtype's machine epsilon
    k = F.rms_norm(_rope_pairs(k, base, pos), (D,))
    y = F.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
    )
    x = x + y.transpose(1, 2).reshape(B, T, d) @ blk.attn.o.weight.T
    m = _norm(x, blk.norm2.weight) @ blk.mlp.fc.weight.T
    return x + (0.5 * F.relu(m).pow(2)) @ blk.mlp.proj.weight.T


@pytest.mark.parametrize("scale", [1.0, 1e-3])
def test_block_equals_the_reference_formula(scale):
    m = randomize(LoopedLM(preset("parcae", "tiny")), seed=3)
    blk, heads = m.prelude[1], m.cfg.n_heads  # layer 1 has a value embedding
    q_pairs = torch.randn(64, 64) * 0.2 * scale  # a reference-layout q/k weight ...
    k_pairs = torch.randn(64, 64) * 0.2 * scale
    with torch.no_grad():  # ... and the same weight in our layout
        blk.attn.q.weight.copy_(pairs_to_halves(q_pairs, heads))
        blk.attn.k.weight.copy_(pairs_to_halves(k_pairs, heads))
    idx = torch.randint(0, 256, (2, 24), generator=torch.Generator().manual_seed(0))
    x = torch.randn(2, 24, 64, generator=torch.Generator().manual_seed(1)) * scale
    with torch.no_grad():
        cos, sin = m._rope(24)
        ours = blk(x, idx, settings=m.cfg.full_settings, ctx=SeqContext(cos, sin), key=LayerKey.prelude(1))
        want = _reference_block(blk, x, idx, q_pairs, k_pairs, heads, m.cfg.rope_base)
    torch.testing.assert_close(ours, want, atol=1e-5, rtol=1e-4)


def test_qk_norm_is_rms_norm_without_eps():
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(3, 5, 32).to(dtype) * 1e-3
        assert torch.equal(qk_norm(x), F.rms_norm(x, (32,)))  # the reference's call, in any dtype
        # at this scale an eps of 1e-6 would change the result by far more than the tolerance
        assert not torch.allclose(qk_norm(x).float(), F.rms_norm(x.float(), (32,), eps=1e-6), rtol=1e-2)
    x = torch.randn(3, 5, 32) * 1e-3  # fp32: PyTorch's default eps is the machine epsilon
    torch.testing.assert_close(qk_norm(x), F.rms_norm(x, (32,), eps=torch.finfo(torch.float32).eps))


def test_prelude_norm_is_learnable_and_feeds_the_injection():
    m = randomize(LoopedLM(preset("parcae", "tiny")), seed=0)
    assert any(p is m.prelude_norm.weight for p in m.param_groups()["other"])
    idx = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
    m(idx, targets=idx, loops=2, h0_seed=0).loss.backward()
    assert m.prelude_norm.weight.grad is not None and m.prelude_norm.weight.grad.abs().sum() > 0
    assert not hasattr(LoopedLM(preset("plain", "tiny")), "prelude_norm")  # no injection, no norm


FIXTURE = Path(__file__).parents[1] / "fixtures" / "parcae_tiny"


def test_the_public_codes_checkpoint_gives_its_logits_at_1_2_4_and_8_loops():
    cfg = config_from_parcae(json.loads((FIXTURE / "config.json").read_text()))
    assert (cfg.vocab_size, cfg.d_model, cfg.n_heads, cfg.loops, cfg.grad_rounds) == (320, 40, 2, 4, 2)
    assert cfg.loop_sampler == "poisson_seq" and cfg.value_embed_layers() == (1, 3, 5)
    model = LoopedLM(cfg)
    state = torch.load(FIXTURE / "model.pt", map_location="cpu", weights_only=True)
    model.load_state_dict(state_dict_from_parcae(state, cfg, model.state_dict()))
    ref = torch.load(FIXTURE / "reference_logits.pt", map_location="cpu", weights_only=True)
    model._h0 = lambda batch, positions, h0_seed, like: ref["h0"]  # the state the public code drew
    model.eval()
    with torch.no_grad():
        for i, loops in enumerate(ref["loops"].tolist()):
            ours = model(ref["input_ids"], loops=loops).logits
            torch.testing.assert_close(ours, ref["logits"][i], atol=1e-4, rtol=0)
        # the loop count matters at this tolerance: 1 loop is not 8
        assert (model(ref["input_ids"], loops=1).logits - ref["logits"][3]).abs().max() > 1e-2


def test_the_rope_permutation_round_trips():
    w = torch.randn(64, 16)
    assert torch.equal(halves_to_pairs(pairs_to_halves(w, 2), 2), w)
    assert torch.equal(pairs_to_halves(w, 2)[:2], w[[0, 2]])  # our channel 1 is its channel 2
    assert not torch.equal(pairs_to_halves(w, 2), w)
