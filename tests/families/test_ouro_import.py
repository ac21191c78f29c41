"""The published Ouro layout through the import job: a checkpoint made by the public modeling code
(tests/fixtures/ouro_tiny, remade by its make_fixture.py) imports as a run of the Ouro-style family
whose logits and per-step exit probabilities equal the public code's to 1e-4 after 1, 2, 3, 4 and 8
loops; its KV cache holds a slot per loop and layer and decodes what the forward computes; a layout
this family does not compute is refused naming the field or the tensor."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from looplab.model.errors import ConfigError
from looplab.workers import hub, importer, jobs
from looplab.workers.reporter import MemoryReporter
from tests.families.conftest import edited_copy

FIXTURES = Path(__file__).parents[1] / "fixtures"
FIXTURE = FIXTURES / "ouro_tiny"
TOKENIZER = FIXTURES / "parcae_tiny" / "tokenizer" / "tokenizer.json"  # a 300-token BPE, 320 rows here
LOOPS = [1, 2, 3, 4, 8]


@pytest.fixture(scope="module")
def reference():
    return load_file(str(FIXTURE / "reference.safetensors"))


def _imported(tmp_path):
    from looplab.workers.inputs import load_model

    spec = importer.Spec.from_dict({"source": str(FIXTURE), "tokenizer": str(TOKENIZER)})
    assert spec.family == "families.ouro:factory" and spec.family_config["n_layers"] == 2
    run = importer.model_config(spec)  # the run's vocabulary, context and loop count (total_ut_steps)
    assert (run.vocab_size, run.seq_len, run.loops) == (320, 64, 4)
    assert importer.Spec.from_dict(spec.to_dict()) == spec  # canonical: validating again changes nothing
    out = importer.run(spec, MemoryReporter(), tmp_path / "art")
    model, _, run_spec = load_model(tmp_path / "art", torch.device("cpu"))
    assert run_spec["family"] == spec.family and out["n_params"] == sum(p.numel() for p in model.parameters())
    return model.inner


def test_the_import_gives_the_public_codes_logits_and_exit_probabilities_at_every_loop_count(
    tmp_path, looplab_cache, reference
):
    inner = _imported(tmp_path)
    idx = reference["input_ids"]
    assert reference["loops"].tolist() == LOOPS
    compared = 0
    for n in LOOPS:
        with torch.no_grad():
            logits = inner(idx, loops=n)
            exits = inner.exit_probabilities(idx, n)  # (n, B, T); the public code's is (B, T, n)
        torch.testing.assert_close(logits, reference[f"logits_{n}"], atol=1e-4, rtol=0)
        torch.testing.assert_close(exits.permute(1, 2, 0), reference[f"exit_probs_{n}"], atol=1e-4, rtol=0)
        compared += 1
    assert compared == len(LOOPS)
    assert not torch.allclose(reference["logits_1"], reference["logits_4"], atol=1e-2)  # counts differ
    spread = reference["exit_probs_4"]  # the redrawn gate stops tokens at different steps
    assert spread.min() > 1e-3 and spread.argmax(-1).unique().numel() > 1

    sweep = {"checkpoint": str(tmp_path / "art"), "loops": [1, 4], "eval_tokens": 256}
    evals = jobs.run("depth_sweep", jobs.validate("depth_sweep", sweep), MemoryReporter(), tmp_path / "s")
    assert [e["loops"] for e in evals["depth_evals"]] == [1, 4]


def test_the_imported_cache_holds_a_slot_per_loop_and_layer_and_decodes_the_forward(
    tmp_path, looplab_cache, reference
):
    inner = _imported(tmp_path)
    idx = reference["input_ids"]
    cache = inner.setup_cache(2, 12, loops=4)
    assert tuple(cache.k.shape) == (4 * 2, 2, 2, 12, 16)  # (loops x layers, B, heads, positions, head dim)
    assert cache.nbytes() == inner.kv_cache_bytes(2, 12, loops=4) == 2 * 4 * 2 * 2 * 2 * 12 * 16 * 4
    with torch.no_grad():
        first = inner.prefill(idx[:, :6], cache)
        steps = [inner.decode_step(idx[:, t], cache) for t in range(6, 12)]
    decoded = torch.cat([first, torch.stack(steps, dim=1)], dim=1)
    torch.testing.assert_close(decoded, reference["logits_4"], atol=1e-4, rtol=0)


def _edited(tmp_path, config=None, weights=None) -> Path:
    return edited_copy(FIXTURE, tmp_path, config, weights)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"num_key_value_heads": 1}, "config.num_key_value_heads: 1 .grouped-query attention.; accepted: 2"),
        (
            {"hidden_act": "gelu"},
            "config.hidden_act: 'gelu' is not computed by this family; accepted: 'silu'",
        ),
        ({"use_sliding_window": True}, "config.use_sliding_window"),
        ({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "config.rope_scaling"),
        ({"head_dim": 8}, "config.head_dim: 8; accepted: 16"),
    ],
)
def test_a_layout_the_family_does_not_compute_is_refused_naming_the_field(tmp_path, config, message):
    with pytest.raises(ConfigError, match=message):
        importer.Spec.from_dict(
            {"source": str(_edited(tmp_path, config=config)), "tokenizer": str(TOKENIZER)}
        )


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda s: {k: v for k, v in s.items() if k != "model.early_exit_gate.weight"},
            "missing tensor.*early_exit_gate.weight",
        ),
        (
            lambda s: {**s, "model.layers.0.input_layernorm_2.weight": torch.ones(16)},
            "input_layernorm_2.weight' has shape",
        ),
        (lambda s: {**s, "model.layers.0.self_attn.q_norm.weight": torch.ones(16)}, "unexpected tensor"),
        (lambda s: {**s, "model.layers.2.mlp.up_proj.weight": torch.zeros(48, 32)}, "unexpected tensor"),
    ],
)
def test_bad_weights_are_refused_naming_the_tensor(tmp_path, edit, message):
    with pytest.raises(ConfigError, match=message):
        hub.load_model_dir(_edited(tmp_path, weights=edit))
