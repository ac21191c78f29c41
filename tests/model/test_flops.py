"""The FLOP model (model.flops) against PyTorch's FlopCounterMode, the loop-sampler expectation against
the real scheduler, and the parameter bookkeeping of `arch_summary`.

What FlopCounterMode counts: matmuls (mm, addmm, bmm, ...) as 2 FLOPs per multiply-add, and the SDPA
ops it has formulas for, as dense T x S attention (causal and masks ignored). In torch 2.13 it has no
formula for the CPU flash kernel (`_scaled_dot_product_flash_attention_for_cpu` and its backward),
which our full-context and dense-band attention call on CPU, and counts them as 0. The test registers
the dense formula for them: forward = torch's own `sdpa_flop_count` (Q K^T and P V over all T x S
pairs), backward = 2x that (the four gradient matmuls). The stock formula of the CUDA flash backward
adds a fifth matmul, the recomputed scores; like activation recomputation it is not counted here.
The block-local path (long windowed sequences) calls SDPA on 5-D blocks, which runs the math path: the
counter sees its bmm calls directly (S queries x 2S keys per block, padding included). So the counter
measures our "dense" convention and the two are compared like with like.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode, sdpa_flop_count

from looplab.families.looped.model import LoopedLM
from looplab.model.config import ModelConfig
from looplab.model.counts import (
    arch_summary,
    layer_params,
    once_and_recurrent_params,
    param_count,
    tokens_for_flops,
)
from looplab.model.errors import ConfigError
from looplab.model.flops import attention_pairs, step_flops, training_flops
from looplab.model.presets import preset
from looplab.model.rounds import loop_counts, plan_rounds
from tests.model.conftest import randomize

aten = torch.ops.aten
SMALL = dict(d_model=32, n_heads=1, head_dim=32)  # tiny width: the counter runs real steps on one thread


def _cpu_flash_forward(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    return sdpa_flop_count(query_shape, key_shape, value_shape)


def _cpu_flash_backward(
    grad_shape, query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs
) -> int:
    return 2 * sdpa_flop_count(query_shape, key_shape, value_shape)


CPU_FLASH = {
    aten._scaled_dot_product_flash_attention_for_cpu: _cpu_flash_forward,
    aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_flash_backward,
}


def counted_step(cfg: ModelConfig, batch: int, loops) -> tuple[float, float]:
    """(forward, backward) FLOPs per token that FlopCounterMode counts on one real training step."""
    torch.manual_seed(0)
    model = randomize(LoopedLM(cfg))
    idx = torch.randint(0, cfg.vocab_size, (batch, cfg.seq_len))
    with FlopCounterMode(display=False, custom_mapping=CPU_FLASH) as counter:
        out = model(idx, targets=idx, loops=loops)
    forward = counter.get_total_flops()
    with FlopCounterMode(display=False, custom_mapping=CPU_FLASH) as counter:
        out.loss.backward()
    tokens = batch * cfg.seq_len
    return forward / tokens, counter.get_total_flops() / tokens


CASES = {
    "fixed4": (preset("fixed4", **SMALL), 4),
    "lean (windowed, dense band)": (preset("lean", **SMALL), 4),
    "lean (windowed, block-local)": (preset("lean", **SMALL, seq_len=512), 4),
    "lean_all64 (aligned windows)": (preset("lean_all64", **SMALL, seq_len=512), 4),
    "half_width": (preset("half_width", **{**SMALL, "n_heads": 2, "head_dim": 16}), 4),
    "mlp_only": (preset("mlp_only", **SMALL), 4),
    "reuse_kv": (preset("reuse_kv", **SMALL), 4),
    "plain": (preset("plain", **SMALL), 1),
    "plain, 3 loops, grad 1 (no backward into the prelude)": (preset("plain", **SMALL, grad_rounds=1), 3),
    "fixed6_grad3 (truncated)": (preset("fixed6_grad3", **SMALL), 6),
    "parcae, loops 8 for all": (preset("parcae", **SMALL), 8),
    "parcae, mixed counts (aligned, padded)": (preset("parcae", **SMALL), [2, 9, 5, 1]),
    "fixed4 + poisson_seq, mixed counts (staggered)": (
        preset("fixed4", **SMALL, loop_sampler="poisson_seq", grad_rounds=2),
        [2, 6, 3, 1],
    ),
    "lean + a learned exit (entropy: R readouts)": (preset("lean", **SMALL, exit_gate="entropy"), 4),
    "fixed4 + a learned exit (act: the outputs' mixture)": (preset("fixed4", **SMALL, exit_gate="act"), 4),
    # the GPU check's sequence lengths: each family of mechanisms (padding, windows, loops) at 512 and 2,048
    "fixed4, seq 512": (preset("fixed4", **SMALL, seq_len=512), 4),
    "fixed4, seq 2,048": (preset("fixed4", **SMALL, seq_len=2048), 4),
    "lean (block-local), seq 2,048": (preset("lean", **SMALL, seq_len=2048), 4),
    "parcae, mixed counts, seq 512": (preset("parcae", **SMALL, seq_len=512), [2, 9, 5, 1]),
    "parcae, mixed counts, seq 2,048": (preset("parcae", **SMALL, seq_len=2048), [2, 5]),
    "untied head, value embeddings everywhere": (
        preset("fixed2", **SMALL, tie_embeddings=False, value_embeds="all"),
        2,
    ),
}


def assert_flop_model_matches_counter(cfg: ModelConfig, loops, name: str) -> None:
    """`step_flops` within 2 % of FlopCounterMode's forward and backward counts of one step (batch: one
    sequence per count of a list, else 2)."""
    batch = len(loops) if isinstance(loops, list) else 2
    forward, backward = counted_step(cfg, batch, loops)
    model = step_flops(cfg, loops)
    assert forward > 0 and backward > 0
    assert model.forward == pytest.approx(forward, rel=0.02), name
    assert model.backward == pytest.approx(backward, rel=0.02), name


@pytest.mark.parametrize("name", list(CASES))
def test_flop_model_matches_flop_counter_mode(name):
    assert_flop_model_matches_counter(*CASES[name], name)


def test_windowed_rounds_cost_less_once_the_cpu_path_goes_block_local():
    full, lean = preset("fixed4", size="86m"), preset("lean", size="86m")
    assert training_flops(lean, 8).total < 0.9 * training_flops(full, 8).total  # window 64 of 2048
    short_full, short_lean = preset("fixed4"), preset("lean")  # seq 64: the dense band, T x T
    assert training_flops(short_lean, 8).total == training_flops(short_full, 8).total
    # the "causal" convention counts only visible pairs, so windows always save there
    assert (
        training_flops(short_lean, 8, attention="causal").total
        < training_flops(short_full, 8, attention="causal").total
    )


def test_attention_pairs_conventions():
    assert attention_pairs(64, None) == 64 * 64
    assert attention_pairs(64, None, "causal") == 64 * 65 / 2
    assert attention_pairs(64, 64, "causal") == 64 * 65 / 2  # a window as long as the sequence is full
    assert attention_pairs(64, 16, "causal") == sum(min(t + 1, 16) for t in range(64))
    assert attention_pairs(64, 16) == 64 * 64  # dense band below the block-local threshold
    assert attention_pairs(1000, 64) == 16 * 64 * 128  # ceil(1000 / 64) blocks of 64 x 128
    with pytest.raises(ConfigError, match="attention"):
        attention_pairs(64, None, "half")


def test_fixed_loops_count_rounds_and_truncated_backprop():
    cfg = preset("fixed6_grad3")
    flops = training_flops(cfg, 4)
    assert flops.mean_rounds == 6 and flops.mean_grad_rounds == 3 and flops.padding_waste == 0.0
    one_round = flops.rounds[0].forward
    assert [r.backward for r in flops.rounds] == [0, 0, 0, 2 * one_round, 2 * one_round, 2 * one_round]
    # backward = 2 x forward for every part that carries gradient
    assert flops.backward == pytest.approx(2 * (flops.forward - 3 * one_round))


def _monte_carlo(cfg: ModelConfig, batch: int, steps: int) -> tuple[float, float, float, float]:
    """Mean (total FLOPs, forward rounds, rounds with grad, wasted recurrent FLOPs) per token over the
    loop counts the model really samples, each step counted through the real scheduler."""
    model = LoopedLM(cfg)
    total = rounds = grads = wasted = 0.0
    for step in range(steps):
        counts = model.sample_loops(batch, step, seed=3).tolist()
        flops = step_flops(cfg, counts)
        plan = plan_rounds(loop_counts(counts, batch), cfg.grad_rounds, True, cfg.rounds_alike)
        assert flops.mean_rounds == plan.n_rounds and flops.mean_grad_rounds == sum(plan.grad)
        total += flops.total
        rounds += plan.n_rounds
        grads += sum(plan.grad)
        wasted += flops.padding_waste * flops.recurrent
    return total / steps, rounds / steps, grads / steps, wasted / steps


@pytest.mark.parametrize(
    "recipe,overrides",
    [
        ("parcae", {}),  # per-sequence Poisson(8), grad through the last 4, aligned schedule
        ("parcae_per_batch", {}),
        ("parcae_last1", {"loops": 3}),
        ("lean", {"loop_sampler": "poisson_seq", "grad_rounds": 2}),  # staggered schedule
        ("plain", {"loop_sampler": "poisson_seq", "loops": 3, "grad_rounds": 2}),  # prelude grad sometimes
    ],
)
def test_sampler_expectation_matches_the_scheduler_on_sampled_counts(recipe, overrides):
    cfg, batch, steps = preset(recipe, **SMALL, **overrides), 8, 3000
    expected = training_flops(cfg, batch)
    total, rounds, grads, wasted = _monte_carlo(cfg, batch, steps)
    assert expected.mean_rounds == pytest.approx(rounds, rel=0.02)
    assert expected.mean_grad_rounds == pytest.approx(grads, rel=0.02)
    assert expected.total == pytest.approx(total, rel=0.01)
    assert expected.padding_waste * expected.recurrent == pytest.approx(wasted, rel=0.05, abs=1e-9 * total)


def test_padding_waste():
    assert training_flops(preset("fixed4"), 8).padding_waste == 0.0
    assert training_flops(preset("parcae_per_batch"), 8).padding_waste == 0.0
    one = training_flops(preset("parcae"), 1)
    assert one.padding_waste == 0.0  # one sequence per step pads nothing
    assert one.total == pytest.approx(training_flops(preset("parcae_per_batch"), 1).total)
    wastes = [training_flops(preset("parcae"), b).padding_waste for b in (2, 8, 64)]
    assert 0 < wastes[0] < wastes[1] < wastes[2] < 1  # the max of more draws pads more
    # a per-sequence batch runs max(count) rounds: more than the mean count
    assert training_flops(preset("parcae"), 8).mean_rounds > 8


def test_step_flops_waste_counts_the_held_rounds():
    cfg = preset("parcae", grad_rounds=None)  # every round with gradient: waste = 1 - mean(c) / max(c)
    flops = step_flops(cfg, [2, 4, 4, 6])
    assert flops.mean_rounds == 6 and flops.padding_waste == pytest.approx(1 - 4 / 6)


def test_n_once_and_n_rec_add_up_to_the_parameter_count():
    for cfg in [
        preset("parcae", size="144m"),
        preset("plain", size="86m"),
        preset("fixed4", **SMALL, tie_embeddings=False, value_embeds="all"),
        preset("lean", n_prelude=0, n_coda=1, value_embeds=(0, 1)),
    ]:
        split, params = once_and_recurrent_params(cfg), param_count(cfg)
        tables = cfg.vocab_size * cfg.d_model * (1 + len(cfg.value_embed_layers()))
        assert split["n_once"] + split["n_rec"] + tables == params["total"]
        head = 0 if cfg.tie_embeddings else cfg.vocab_size * cfg.d_model
        assert split["n_once"] + split["n_rec"] - head == params["non_embedding"]
        # the real model's recurrent block, at a width that builds in milliseconds
        model = LoopedLM(dataclasses.replace(cfg, vocab_size=64, **SMALL))
        recurrent = sum(p.numel() for name, p in model.recurrent.named_parameters() if ".ve." not in name)
        assert once_and_recurrent_params(model.cfg)["n_rec"] == recurrent
        per_layer = [
            sum(p.numel() for name, p in blk.named_parameters() if not name.startswith("attn.ve."))
            for blk in model.blocks()
        ]
        assert layer_params(model.cfg) == per_layer
        total = sum(p.numel() for p in model.parameters())
        tables = sum(p.numel() for p in model.embedding_params())
        untied = 0 if cfg.tie_embeddings else 64 * SMALL["d_model"]
        assert sum(once_and_recurrent_params(model.cfg).values()) == total - tables + untied


def test_arch_summary_keys_and_values():
    cfg = preset("fixed4", size="small", d_model=192, n_heads=3, head_dim=64)
    summary = arch_summary(cfg, 8)
    assert set(summary) == {
        "n_prelude",
        "n_recurrent",
        "n_coda",
        "loops",
        "effective_depth",
        "d_model",
        "injection",
        "n_params",
        "n_params_non_embedding",
        "n_once",
        "n_rec",
        "flops_per_token",
        "padding_waste",
    }
    assert summary["effective_depth"] == 2 + 2 * 4 + 2 and summary["d_model"] == 192
    assert summary["injection"] == "diagonal" and summary["padding_waste"] == 0.0
    assert summary["n_params"] == param_count(cfg)["total"]
    assert summary["flops_per_token"] == training_flops(cfg, 8).total
    # 6 N is the usual rule of thumb; ours adds the head and attention, and repeats the block
    assert summary["flops_per_token"] > 6 * (summary["n_once"] + 4 * summary["n_rec"])
    parcae = arch_summary(preset("parcae"), 8)
    assert parcae["loops"] == 8 and 0 < parcae["padding_waste"] < 1


def test_tokens_for_flops_whole_steps():
    cfg = preset("fixed4")
    per_step = training_flops(cfg, 8, seq_len=32).total * 8 * 32
    assert tokens_for_flops(cfg, 5.5 * per_step, 8, 32) == 5 * 8 * 32
    assert tokens_for_flops(cfg, 5 * per_step * (1 + 1e-12), 8, 32) == 5 * 8 * 32
    assert tokens_for_flops(cfg, 1.0, 8, 32) == 8 * 32  # at least one step
    with pytest.raises(ConfigError, match="flops"):
        tokens_for_flops(cfg, -1.0, 8, 32)
    with pytest.raises(ConfigError, match="batch_size"):
        tokens_for_flops(cfg, 1e12, 0, 32)
    assert math.isclose(training_flops(cfg, 8, seq_len=32).head.forward, 2 * 64 * 256)
