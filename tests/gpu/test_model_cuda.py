"""The model on CUDA: compiled bf16 training equals eager, CUDA-graph decoding equals eager, compiled
FlexAttention equals the reference, Flex masks are prepared once, and a training forward never
synchronises with the host. Skipped without CUDA; moved here from tests/model (their CPU-side
helpers are imported from there)."""

from __future__ import annotations

import copy

import pytest
import torch

import looplab.model.attention as attn
from looplab.families.looped.model import LoopedLM
from looplab.model.attention import flex_windowed, reference_attention
from looplab.model.presets import preset
from tests.model.conftest import randomize
from tests.model.test_attention import _qkv
from tests.model.test_compile import _fresh_compiler, _graph_breaks  # noqa: F401 (an autouse fixture)
from tests.model.test_compile import test_prepare_masks_builds_what_attention_then_uses as _prepare_masks
from tests.model.test_decode import T as DECODE_T  # tokens decoded: tiny's rings wrap
from tests.model.test_rounds import COUNTS, _idx

# ---- compiled training: the first GPU run needs these ---------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("recipe", ["lean", "parcae"])
def test_compiled_bf16_training_step_on_cuda_equals_eager(recipe):
    """The trainer's step on CUDA: fp32 weights, bf16 autocast, inductor (Flex inside the graph for the
    windowed rounds). Loss and every gradient equal eager within bf16 rounding."""
    from looplab.workers.validation import autocast

    device = torch.device("cuda")
    cfg = preset(recipe, "small")
    eager = randomize(LoopedLM(cfg), seed=0).to(device)
    twin = copy.deepcopy(eager)
    compiled = twin.compile_parts()
    tokens = torch.randint(0, cfg.vocab_size, (4, cfg.seq_len + 1), device=device)
    idx, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    for step in range(2):  # the second step runs the graphs compiled by the first
        loops = eager.sample_loops(4, step, seed=0)
        losses, grads = [], []
        for model, forward in ((eager, eager), (twin, compiled)):
            model.zero_grad(set_to_none=True)
            torch.manual_seed(step)
            with autocast(device):
                loss = forward(idx, targets=targets, loops=loops).loss
            loss.backward()
            losses.append(loss.item())
            grads.append({n: p.grad.float() for n, p in model.named_parameters() if p.grad is not None})
        assert losses[1] == pytest.approx(losses[0], rel=2e-2)
        assert grads[1].keys() == grads[0].keys()
        for name, want in grads[0].items():
            err = (grads[1][name] - want).norm() / want.norm().clamp_min(1e-12)
            assert err < 5e-2, f"{recipe} step {step}: {name} relative error {err:.3f}"
    assert _graph_breaks() == 0


# ---- decoding ---------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("prefilled", [0, 37])  # 37 tokens wrap the ring buffers of windowed rounds
def test_cuda_graph_decode_matches_eager(prefilled):
    """Graph replays decode exactly as eager, captured on a fresh cache or after a prefill."""
    from looplab.model.decode_graph import capture_decode_graph

    m = randomize(LoopedLM(preset("lean", "tiny")), seed=4).cuda().eval()
    idx = torch.randint(0, 256, (2, DECODE_T), device="cuda")
    with torch.no_grad():
        full = m(idx, h0_seed=0).logits
    cache = m.setup_cache(2, DECODE_T, h0_seed=0)
    if prefilled:
        m.prefill(idx[:, :prefilled], cache)
    graph, tok, logits = capture_decode_graph(m, cache, idx[:, prefilled])
    for t in range(prefilled, DECODE_T):
        tok.copy_(idx[:, t])
        graph.replay()
        torch.testing.assert_close(logits, full[:, t], atol=1e-3, rtol=1e-3)


# ---- FlexAttention ----------------------------------------------------------------------------------


@pytest.mark.gpu
def test_compiled_flex_on_gpu_matches_reference():
    q, k, v = (x.cuda() for x in _qkv(T=256, D=64))
    out = flex_windowed(q, k, v, 64)
    torch.testing.assert_close(out, reference_attention(q, k, v, 64), atol=2e-3, rtol=2e-3)


@pytest.mark.gpu
def test_compiled_flex_new_length_in_bucket_reuses_kernel_and_matches_in_bf16():
    """Two prompt lengths in one 128-token bucket: one compiled graph, both equal to the reference;
    the backward of the compiled path agrees with the reference's too."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    attn._compiled_flex.cache_clear()
    graphs = []
    for T in (300, 350):
        q, k, v = (x.cuda() for x in _qkv(T=T, D=64, dtype=torch.bfloat16))
        out = flex_windowed(q, k, v, 64)
        torch.testing.assert_close(
            out.float(), reference_attention(q, k, v, 64).float(), atol=2e-2, rtol=2e-2
        )
        graphs.append(counters["stats"]["unique_graphs"])
    assert graphs[0] >= 1 and graphs[1] == graphs[0]
    q, k, v = (x.cuda().requires_grad_() for x in _qkv(T=300, D=64))
    flex_windowed(q, k, v, 64).sum().backward()
    q2, k2, v2 = (x.detach().clone().requires_grad_() for x in (q, k, v))
    reference_attention(q2, k2, v2, 64).sum().backward()
    for a, b in ((q.grad, q2.grad), (k.grad, k2.grad), (v.grad, v2.grad)):
        torch.testing.assert_close(a, b, atol=2e-3, rtol=2e-3)


@pytest.mark.gpu
def test_prepare_masks_builds_the_flex_block_mask_attention_then_uses():
    """tests/model/test_compile.py's case on CUDA: after `prepare_masks`, windowed attention over 200
    tokens finds its Flex block mask and builds nothing."""
    _prepare_masks(200, 64, "cuda")


# ---- host synchronisation ---------------------------------------------------------------------------


@pytest.mark.gpu
def test_no_host_sync_in_a_training_forward_on_cuda():
    m = randomize(LoopedLM(preset("parcae", "tiny")), seed=0).cuda()
    idx = _idx().cuda()
    counts = torch.tensor(COUNTS)  # on the CPU, as the sampler gives them
    m(idx, targets=idx, loops=counts, h0_seed=1).loss.backward()  # warm-up: lazy init may sync
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:  # any host synchronisation inside the forward raises here
        loss = m(idx, targets=idx, loops=counts, h0_seed=1).loss
    finally:
        torch.cuda.set_sync_debug_mode("default")
    loss.backward()
    assert torch.isfinite(loss)
