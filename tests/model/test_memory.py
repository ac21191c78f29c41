"""model/memory.py: the training memory model's parts move as its formula says (optimizer state, batch,
device), evaluation and decode memory grow with what they hold, and a bad device type is refused."""

from __future__ import annotations

import pytest

from looplab.model.counts import kv_cache_bytes, param_count
from looplab.model.flops import training_flops
from looplab.model.memory import decode_memory, forward_memory, largest_micro_batch, training_memory
from looplab.model.presets import preset


def test_training_memory_parts():
    cfg = preset("parcae", "tiny")
    params = param_count(cfg)
    p, p_matrix = params["total"], params["non_embedding"]
    # AdamW keeps two moments of everything, the Muon optimizers one of the matrices and two of the rest
    assert training_memory(cfg, 4, "cpu", "adamw") - training_memory(cfg, 4, "cpu", "parcae") == 4 * p_matrix
    assert training_memory(cfg, 4, "cpu", "parcae") > 16 * p  # weights, gradients, state, and activations
    # activations: per token, the layer applications with autograd at that batch's sampler, and the logits
    one, two = (training_memory(cfg, b, "cuda", "adamw") for b in (1, 2))
    grad_rounds = training_flops(cfg, 2).mean_grad_rounds
    assert grad_rounds != training_flops(cfg, 1).mean_grad_rounds  # per-sequence sampling: the batch matters
    apps = cfg.n_prelude + cfg.n_coda + cfg.n_recurrent * grad_rounds
    elements = 6 * cfg.d_model + 4 * cfg.n_heads * cfg.head_dim + 2 * cfg.mlp_hidden
    fixed = 16 * p
    assert two - fixed == pytest.approx(2 * cfg.seq_len * (apps * elements * 2 + 8 * cfg.vocab_size))
    assert one < two < training_memory(cfg, 2, "cpu", "adamw")  # fp32 and the math path's probabilities


def test_forward_and_decode_memory_and_bad_device():
    cfg = preset("lean", "tiny")
    weights = 4 * param_count(cfg)["total"]
    assert forward_memory(cfg, 0) == weights
    assert forward_memory(cfg, 8) > forward_memory(cfg, 8, seq_len=16) > weights
    cache = kv_cache_bytes(cfg, 512, 2, dtype="float32")
    assert decode_memory(cfg, 512, 2, "cpu") == weights + cache + 2 * cfg.vocab_size * 4
    assert decode_memory(cfg, 512, 2, "cuda") == weights / 2 + cache / 2 + 2 * cfg.vocab_size * 4
    with pytest.raises(ValueError, match="device_type: unknown 'tpu'; accepted: cpu, cuda"):
        training_memory(cfg, 1, "tpu", "adamw")


@pytest.mark.parametrize("recipe", ["fixed4", "parcae"])
def test_largest_micro_batch_is_the_most_sequences_whose_training_memory_fits(recipe):
    cfg = preset(recipe, "small")
    per = [training_memory(cfg, m, "cuda", "parcae") for m in range(1, 33)]
    assert all(a < b for a, b in zip(per, per[1:]))  # more sequences, more memory: a bisection finds it
    budget = (per[11] + per[12]) / 2  # 12 sequences fit, 13 do not
    memory = lambda n: training_memory(cfg, n, "cuda", "parcae")  # noqa: E731
    assert largest_micro_batch(memory, 32, budget, headroom=1.0) == 12
    assert largest_micro_batch(memory, 32, budget / 0.9) == 12  # 90 % of the memory by default
    assert largest_micro_batch(memory, 8, budget, headroom=1.0) == 8  # at most the batch
    assert largest_micro_batch(memory, 32, per[0] / 2, headroom=1.0) == 1  # none fits: one
