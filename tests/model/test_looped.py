"""The looped LM: causality, determinism, mixed loop counts, truncated backprop, parameter counts."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from looplab.families.looped.model import LoopedLM
from looplab.model.contexts import SeqContext
from looplab.model.counts import param_count
from looplab.model.geometry import rel_update
from looplab.model.kv_cache import LayerKey
from looplab.model.presets import RECIPES, preset
from tests.model.conftest import randomize


def _model(recipe: str, seed: int = 0, **over) -> LoopedLM:
    torch.manual_seed(seed)
    return randomize(LoopedLM(preset(recipe, "tiny", **over)), seed)


def _idx(B=2, T=40, seed=0):
    return torch.randint(0, 256, (B, T), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("recipe", RECIPES)
def test_causality(recipe):
    m = _model(recipe).eval()
    idx = _idx(T=48)
    t = 29
    idx2 = idx.clone()
    idx2[:, t + 1 :] = (idx2[:, t + 1 :] + 17) % 256
    with torch.no_grad():
        a = m(idx, h0_seed=3).logits
        b = m(idx2, h0_seed=3).logits
    torch.testing.assert_close(a[:, : t + 1], b[:, : t + 1], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(a[:, t + 1 :], b[:, t + 1 :], atol=1e-3)


@pytest.mark.parametrize("recipe", ["parcae", "lean"])
def test_determinism(recipe):
    idx = _idx()
    outs = []
    for _ in range(2):
        m = _model(recipe, seed=5)
        out = m(idx, targets=idx, loops=m.sample_loops(2, step=7, seed=1), h0_seed=11)
        out.loss.backward()
        outs.append((out.logits.detach(), out.loss.detach(), m.B.grad.clone()))
    for x, y in zip(outs[0], outs[1]):
        assert torch.equal(x, y)
    # h0 differs with the seed, and fresh draws (h0_seed=None) differ between calls
    m = _model(recipe)
    with torch.no_grad():
        assert not torch.equal(m(idx, h0_seed=1).logits, m(idx, h0_seed=2).logits)
        assert not torch.equal(m(idx).logits, m(idx).logits)


def test_sample_loops_is_a_pure_function_of_seed_and_step():
    m = LoopedLM(preset("parcae", "tiny"))
    a, b = m.sample_loops(64, 3, 0), m.sample_loops(64, 3, 0)
    assert torch.equal(a, b) and a.min() >= 1 and len(set(a.tolist())) > 1
    assert not torch.equal(a, m.sample_loops(64, 4, 0))
    assert 6 < a.float().mean() < 10
    assert len(set(LoopedLM(preset("parcae_per_batch", "tiny")).sample_loops(16, 3, 0).tolist())) == 1
    assert LoopedLM(preset("fixed8", "tiny")).sample_loops(4, 0, 0).tolist() == [8] * 4


@pytest.mark.parametrize("recipe", ["parcae", "lean", "reuse_kv", "half_width"])
def test_mixed_loop_counts_equal_solo_runs(recipe):
    m = _model(recipe).eval()
    idx = _idx(B=3)
    counts = torch.tensor([2, 7, 1])
    with torch.no_grad():
        out = m(idx, targets=idx, loops=counts, h0_seed=4)
        for b, n in enumerate(counts.tolist()):
            solo = m(idx[b : b + 1], targets=idx[b : b + 1], loops=n, h0_seed=4)
            torch.testing.assert_close(out.logits[b], solo.logits[0], atol=1e-5, rtol=1e-5)
            loss_b = F.cross_entropy(out.logits[b], idx[b])
            torch.testing.assert_close(loss_b, solo.loss, atol=1e-5, rtol=1e-5)


def _grads(m: LoopedLM) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}


def _detach_reference_loss(m: LoopedLM, idx, n: int, k: int, seed: int) -> torch.Tensor:
    """Written out independently of LoopedLM._loop: every round with autograd, then the output of the
    rounds before the last k is detached."""
    T = idx.shape[1]
    cos, sin = m._rope(T)
    ctx = SeqContext(cos, sin)
    x = m.wte(idx)
    for i, blk in enumerate(m.prelude):
        x = blk(x, idx, settings=m.cfg.full_settings, ctx=ctx, key=LayerKey.prelude(i))
    dt = F.softplus(m.dt_bias)
    inj = (torch.exp(-dt * torch.exp(m.A_log)), dt * F.linear(m.prelude_norm(x), m.B))
    h = m._h0(idx.shape[0], torch.arange(T), seed, x)
    for r in range(n):
        h = m._round(h, inj, idx, ctx, r)
        if r < n - k:
            h = h.detach()
    x = F.linear(h, m.C)
    for i, blk in enumerate(m.coda):
        x = blk(x, idx, settings=m.cfg.full_settings, ctx=ctx, key=LayerKey.coda(i))
    return F.cross_entropy(m._final(x).view(-1, m.cfg.vocab_size), idx.view(-1))


@pytest.mark.parametrize("recipe, n, k", [("parcae", 6, 4), ("parcae_last1", 5, 1), ("fixed6_grad3", 6, 3)])
def test_truncated_backprop_equals_detached_model(recipe, n, k):
    m = _model(recipe)
    assert m.cfg.grad_rounds == k
    idx = _idx()
    m(idx, targets=idx, loops=n, h0_seed=2).loss.backward()
    got = _grads(m)
    m.zero_grad(set_to_none=True)
    _detach_reference_loss(m, idx, n, k, 2).backward()
    want = _grads(m)
    assert got.keys() == want.keys()
    for name in want:
        torch.testing.assert_close(got[name], want[name], atol=1e-5, rtol=1e-4, msg=name)
    # and truncation really changes something: full backprop differs
    m.zero_grad(set_to_none=True)
    _detach_reference_loss(m, idx, n, n, 2).backward()
    assert not torch.allclose(_grads(m)["B"], want["B"], atol=1e-6)


def test_mixed_counts_gradient_is_the_sum_of_solo_gradients():
    """Per-sample truncation inside a padded batch: each sample gets gradient through its own last k rounds."""
    m = _model("parcae")
    idx = _idx(B=2)
    counts = torch.tensor([2, 7])
    logits = m(idx, loops=counts, h0_seed=1).logits
    sum(F.cross_entropy(logits[b], idx[b]) for b in range(2)).backward()
    mixed = _grads(m)
    m.zero_grad(set_to_none=True)
    for b, n in enumerate(counts.tolist()):
        m(idx[b : b + 1], targets=idx[b : b + 1], loops=n, h0_seed=1).loss.backward()
    solo = _grads(m)
    for name in solo:
        torch.testing.assert_close(mixed[name], solo[name], atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize(
    "recipe", ["fixed2", "fixed4", "fixed8", "lean", "half_width", "mlp_only", "reuse_kv"]
)
def test_fixed_recipes_get_gradient_through_every_round(recipe):
    m = _model(recipe)
    outs = []

    def keep(mod, inp, out):
        out.retain_grad()
        outs.append(out)

    hook = m.recurrent[0].register_forward_hook(keep)
    idx = _idx()
    m(idx, targets=idx, h0_seed=0).loss.backward()
    hook.remove()
    assert len(outs) == m.cfg.loops
    for r, out in enumerate(outs):
        assert out.grad is not None and out.grad.abs().sum() > 0, f"round {r + 1} got no gradient"


def test_truncated_rounds_keep_no_graph():
    m = _model("fixed6_grad3")
    outs = []
    hook = m.recurrent[1].register_forward_hook(lambda mod, inp, out: outs.append(out.requires_grad))
    idx = _idx()
    m(idx, targets=idx, h0_seed=0).loss.backward()
    hook.remove()
    assert outs == [False, False, False, True, True, True]


def test_every_round_moves_the_state():
    """The per-round relative update (the depth sweep's rel_change) of a randomised model: one finite,
    positive number per round."""
    rel = rel_update(_model("lean").round_states(_idx(), 6, h0_seed=0))
    assert rel.shape == (6,) and torch.isfinite(rel).all()
    assert (rel > 0).all()


@pytest.mark.parametrize("recipe", RECIPES)
def test_param_count_tiny_matches_model(recipe):
    cfg = preset(recipe, "tiny")
    m = LoopedLM(cfg)
    total = sum(p.numel() for p in m.parameters())
    emb = sum(p.numel() for p in m.embedding_params())
    assert param_count(cfg) == {"total": total, "non_embedding": total - emb}
    groups = m.param_groups()
    assert set(groups) == {"matrix", "ve_gate", "other"}
    ids = [id(p) for g in groups.values() for p in g]
    assert len(ids) == len(set(ids)) and sum(p.numel() for g in groups.values() for p in g) == total
    assert all(p.ndim == 2 for p in groups["matrix"]) and len(groups["matrix"]) == 6 * cfg.n_layers
    assert len(groups["ve_gate"]) == len(cfg.value_embed_layers())


# exact counts: 144m equals the reference Parcae-small-140m (144,323,136 / 43,659,840)
EXACT = {"86m": (86_516_096, 19_407_232), "144m": (144_323_136, 43_659_840)}


@pytest.mark.parametrize("size", list(EXACT))
@pytest.mark.parametrize("recipe", ["parcae", "plain", "half_width", "lean"])
def test_param_count_86m_144m_match_model_on_meta(size, recipe):
    cfg = preset(recipe, size)
    with torch.device("meta"):
        m = LoopedLM(cfg)
    n = sum(p.numel() for p in m.parameters())
    ne = n - sum(p.numel() for p in m.embedding_params())
    assert param_count(cfg) == {"total": n, "non_embedding": ne}
    total, non_emb = EXACT[size]
    d = cfg.d_model
    fewer = 0 if recipe != "plain" else 2 * d * d + 3 * d  # plain: no B, C, A_log, dt_bias, prelude norm
    assert (n, ne) == (total - fewer, non_emb - fewer)
