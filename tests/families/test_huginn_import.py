"""The published Huginn layout through the import job: a checkpoint made by the public modeling file
(tests/fixtures/huginn_tiny, remade by its make_fixture.py) imports as a run of the Huginn-style family
whose logits equal the public code's to 1e-4 at 1, 4, 8 and 32 recurrences from the same initial
state; a layout this family does not compute is refused naming the field or the tensor."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from looplab.model.errors import ConfigError
from looplab.workers import hub, importer, jobs
from looplab.workers.reporter import MemoryReporter
from tests.families.conftest import edited_copy

FIXTURES = Path(__file__).parents[1] / "fixtures"
FIXTURE = FIXTURES / "huginn_tiny"
TOKENIZER = FIXTURES / "parcae_tiny" / "tokenizer" / "tokenizer.json"  # a 300-token BPE, 320 rows here


def test_the_import_gives_the_public_codes_logits_at_every_recurrence_count(tmp_path, looplab_cache):
    from looplab.workers.inputs import load_model

    spec = importer.Spec.from_dict({"source": str(FIXTURE), "tokenizer": str(TOKENIZER)})
    assert spec.family == "families.huginn:factory" and spec.family_config["n_core"] == 2
    run = importer.model_config(spec)  # the run's vocabulary (the padded table), context, mean recurrence
    assert (run.vocab_size, run.seq_len, run.loops) == (320, 64, 4)
    assert importer.Spec.from_dict(spec.to_dict()) == spec  # canonical: validating again changes nothing
    out = importer.run(spec, MemoryReporter(), tmp_path / "art")
    model, cfg, run_spec = load_model(tmp_path / "art", torch.device("cpu"))
    assert run_spec["family"] == spec.family and out["n_params"] == sum(p.numel() for p in model.parameters())
    reference = load_file(str(FIXTURE / "reference.safetensors"))
    assert reference["recurrences"].tolist() == [1, 4, 8, 32]
    for n in (1, 4, 8, 32):
        with torch.no_grad():
            got = model.inner(reference["input_ids"], loops=n, init_state=reference["h0"])
        torch.testing.assert_close(got, reference[f"logits_{n}"], atol=1e-4, rtol=0)
    assert not torch.allclose(reference["logits_1"], reference["logits_4"], atol=1e-2)  # counts differ

    sweep = {"checkpoint": str(tmp_path / "art"), "loops": [1, 4], "eval_tokens": 256}
    evals = jobs.run("depth_sweep", jobs.validate("depth_sweep", sweep), MemoryReporter(), tmp_path / "s")
    assert [e["loops"] for e in evals["depth_evals"]] == [1, 4]


def test_a_looplab_import_keeps_its_spec_without_family_keys():
    spec = importer.Spec.from_dict({"source": str(FIXTURES / "parcae_tiny")})
    assert "family" not in spec.to_dict() and spec.family == "looped"


def _edited(tmp_path, config=None, weights=None) -> Path:
    return edited_copy(FIXTURE, tmp_path, config, weights)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {"injection_type": "add"},
            "config.injection_type: 'add' is not computed by this family; accepted: 'linear'",
        ),
        ({"num_key_value_heads": 1}, "config.num_key_value_heads: 1"),
        ({"nonlin_name": "GELU"}, "config.nonlin_name"),
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
            lambda s: {k: v for k, v in s.items() if k != "transformer.adapter.weight"},
            "missing tensor.*adapter",
        ),
        (lambda s: {**s, "transformer.adapter.weight": torch.zeros(32, 32)}, "adapter.weight' has shape"),
        (lambda s: {**s, "transformer.extra.0.w.weight": torch.zeros(1)}, "unexpected tensor"),
    ],
)
def test_bad_weights_are_refused_naming_the_tensor(tmp_path, edit, message):
    with pytest.raises(ConfigError, match=message):
        hub.load_model_dir(_edited(tmp_path, weights=edit))


def test_a_sharded_checkpoint_imports_as_its_one_file_does(tmp_path):
    """The published checkpoint is sharded (model-0000N-of-0000M.safetensors and an index): the shards
    are read together, their contents are part of the source's revision, a missing one is named."""
    directory = tmp_path / "sharded"
    directory.mkdir()
    shutil.copyfile(FIXTURE / "config.json", directory / "config.json")
    state = load_file(str(FIXTURE / "model.safetensors"))
    names = sorted(state)
    halves = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for file, keys in halves.items():
        save_file({k: state[k] for k in keys}, str(directory / file))
    index = {"weight_map": {k: file for file, keys in halves.items() for k in keys}}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index))
    whole, _, _ = hub.load_model_dir(FIXTURE)
    sharded, _, _ = hub.load_model_dir(directory)
    assert all(torch.equal(a, b) for a, b in zip(whole.state_dict().values(), sharded.state_dict().values()))
    before = hub.local_revision(directory)
    save_file(
        {k: state[k] * 2 for k in halves["model-00002-of-00002.safetensors"]},
        str(directory / "model-00002-of-00002.safetensors"),
    )
    assert hub.local_revision(directory) != before  # a shard's contents are part of what the model is
    (directory / "model-00001-of-00002.safetensors").unlink()
    with pytest.raises(ConfigError, match="names the shard 'model-00001-of-00002.safetensors'"):
        hub.load_model_dir(directory)
