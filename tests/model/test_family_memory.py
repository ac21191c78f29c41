"""A family's memory is its own: its weights, its optimizer's groups and what autograd keeps for its
forward, measured with saved-tensor hooks, on the meta device when the family counts its own FLOPs; the
planner's memory and `micro_batch_size: auto` follow the family's width, and a LoopedLM's do not move."""

from __future__ import annotations

import torch

from looplab.model.contract import measure_activation_bytes
from looplab.model.family_pricing import family_pricing
from looplab.model.memory import FLOAT_BYTES, family_optimizer_state_bytes, family_training_memory
from looplab.workers.train import cost as train_cost
from looplab.workers.train.spec import Spec

UT = "examples.universal_transformer:factory"
HUGINN = "families.huginn:factory"


def _ut(d_model: int) -> dict:
    return {"d_model": d_model, "n_heads": 2, "vocab_size": 64, "seq_len": 16}


def test_activations_are_counted_from_the_saved_tensors_and_grow_with_width_length_and_loops():
    small, wide = family_pricing(UT, _ut(32)), family_pricing(UT, _ut(64))
    assert 0 < small.activation_bytes(2) < wide.activation_bytes(2)
    assert small.activation_bytes(2) < small.activation_bytes(4)  # more rounds, more kept for backward
    longer = family_pricing(UT, {**_ut(32), "seq_len": 32})
    assert longer.activation_bytes(2) > 1.5 * small.activation_bytes(2)


def test_the_meta_module_keeps_what_a_real_one_keeps():
    from looplab.families.huginn import factory

    config = {"d_model": 32, "n_heads": 2, "mlp": 48, "vocab_size": 64, "seq_len": 16}
    torch.manual_seed(0)
    real = factory(config)
    with torch.device("meta"):
        meta = factory(config)
    kept_real, kept_meta = measure_activation_bytes(real, 16, 3), measure_activation_bytes(meta, 16, 3)
    # the meta device's attention keeps a little more than the CPU kernel (3 % here): never less
    assert 0 < kept_real <= kept_meta <= 1.1 * kept_real
    assert family_pricing(HUGINN, config).activation_bytes(3) == kept_meta


def test_training_memory_is_weights_grads_optimizer_state_and_activations():
    pricing = family_pricing(UT, _ut(32))
    p = pricing.n_params
    assert pricing.matrix_params == 0  # no param_groups: AdamW on every parameter, the contract's fallback
    assert family_optimizer_state_bytes(pricing, "adamw") == 8 * p
    one = family_training_memory(pricing, 2, 1, "cpu", "adamw")
    assert one == 2 * FLOAT_BYTES * p + 8 * p + pricing.activation_bytes(2)
    four = family_training_memory(pricing, 2, 4, "cpu", "adamw")
    assert four - one == 3 * pricing.activation_bytes(2)
    assert family_training_memory(pricing, 2, 4, "cuda", "adamw") < four  # activations in bf16


def _cost(d_model: int, family: bool) -> train_cost.TrainCost:
    spec = {"model": {"loops": 2}, "seq_len": 16, "batch_size": 8, "tokens": 8 * 16 * 4, "optimizer": "adamw"}
    if family:
        spec = {**spec, "family": UT, "family_config": {"d_model": d_model, "n_heads": 2}}
    return train_cost.cost(Spec.from_dict(spec))


def test_a_family_is_priced_at_its_own_width_and_looplabs_model_does_not_move():
    narrow, wide = _cost(32, True), _cost(64, True)
    assert wide.memory["cpu"] > narrow.memory["cpu"] and wide.checkpoint_bytes > narrow.checkpoint_bytes
    assert (
        narrow.memory["cpu"]
        == narrow.memory_at(8, "cpu")
        == family_training_memory(narrow.family, 2, 8, "cpu", "adamw")
    )
    looped_a, looped_b = _cost(32, False), _cost(64, False)
    assert looped_a.memory == looped_b.memory and looped_a.family is None
    # the auto micro-batch follows the family's own memory
    from looplab.model.memory import largest_micro_batch

    budget = (narrow.memory_at(3, "cpu") + narrow.memory_at(4, "cpu")) / 2
    assert largest_micro_batch(lambda n: narrow.memory_at(n, "cpu"), 8, budget, headroom=1.0) == 3
    assert largest_micro_batch(lambda n: wide.memory_at(n, "cpu"), 8, budget, headroom=1.0) < 3
