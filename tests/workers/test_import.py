"""Published checkpoints in, looplab models out: the import job on the public code's fixture
(tests/fixtures/parcae_tiny, made by the public Parcae code), a hub source read offline from a hub
cache, bad sources refused by name, and export -> import bit for bit."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from looplab.model.errors import ConfigError
from looplab.workers import hub, importer
from looplab.workers.model_export import export_model
from looplab.workers.reporter import MemoryReporter

FIXTURE = Path(__file__).parents[1] / "fixtures" / "parcae_tiny"
REFERENCE = torch.load(FIXTURE / "reference_logits.pt", map_location="cpu", weights_only=True)


def copy_fixture(dst: Path) -> Path:
    shutil.copytree(FIXTURE, dst)
    return dst


def reference_logits(model, loops: int) -> torch.Tensor:
    """The model's logits on the fixture's input with the h0 the public code drew."""
    model._h0 = lambda batch, positions, h0_seed, like: REFERENCE["h0"]
    with torch.no_grad():
        return model.eval()(REFERENCE["input_ids"], loops=loops).logits


def test_the_import_job_writes_a_run_whose_logits_are_the_public_codes(tmp_path, looplab_cache):
    from looplab.workers.inputs import load_model
    from looplab.workers.tasks.likelihood import load_checkpoint

    spec = importer.Spec.from_dict({"source": str(FIXTURE)})
    assert spec.source == str(FIXTURE.resolve()) and spec.revision == hub.local_revision(FIXTURE)
    assert (spec.recipe, spec.size) == ("parcae", "tiny")
    assert spec.model == {"vocab_size": 320, "d_model": 40, "head_dim": 20, "loops": 4, "grad_rounds": 2}
    assert importer.Spec.from_dict(spec.to_dict()) == spec  # canonical: validating again changes nothing
    rep = MemoryReporter()
    out = importer.run(spec, rep, tmp_path / "art")
    assert out["n_params"] == sum(p.numel() for p in load_model(tmp_path / "art", "cpu")[0].parameters())
    assert sorted(p.name for p in (tmp_path / "art").iterdir()) == ["final.pt", "tokenizer.json"]
    model, cfg, run_spec = load_model(tmp_path / "art", torch.device("cpu"))
    assert cfg == importer.model_config(spec) and run_spec["imported_from"] == spec.imported_from
    for i, loops in enumerate(REFERENCE["loops"].tolist()):
        torch.testing.assert_close(reference_logits(model, loops), REFERENCE["logits"][i], atol=1e-4, rtol=0)
    _, tokenizer = load_checkpoint(tmp_path / "art", torch.device("cpu"))  # what eval and lm-eval read
    assert tokenizer.vocab_size == 300 < cfg.vocab_size  # its own BPE; the table is padded to 320 rows
    assert [e["path"] for e in rep.of("checkpoint")] == [str(tmp_path / "art" / "final.pt")]


def test_a_hub_source_is_read_from_the_hub_cache_offline(tmp_path, monkeypatch):
    import huggingface_hub.constants

    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--Org--tiny"
    copy_fixture(repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    spec = importer.Spec.from_dict({"source": "hf:Org/tiny"})
    assert spec.revision == commit and spec.imported_from == f"hf:Org/tiny@{commit}"
    assert importer.Spec.from_dict({"source": f"hf:Org/tiny@{commit}"}) == spec
    model, _, _ = hub.load_model_dir(hub.materialise(hub.parse_source(spec.source), spec.revision))
    torch.testing.assert_close(reference_logits(model, 8), REFERENCE["logits"][3], atol=1e-4, rtol=0)
    with pytest.raises(ConfigError, match="source: hf:Org/other: config.json is not in the local hub cache"):
        importer.Spec.from_dict({"source": "hf:Org/other"})
    with pytest.raises(ConfigError, match=r"source: 'hf:Org' is not hf:ORG/NAME\[@REVISION\]"):
        importer.Spec.from_dict({"source": "hf:Org"})


def _edit_config(directory: Path, **changes) -> None:
    path = directory / "config.json"
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps(config))


def _edit_weights(directory: Path, edit) -> None:
    state = torch.load(directory / "model.pt", weights_only=True)
    edit(state)
    torch.save(state, directory / "model.pt")


def test_a_published_layout_directory_with_a_missing_file_is_refused_naming_it(tmp_path):
    no_weights = copy_fixture(tmp_path / "a")
    (no_weights / "model.pt").unlink()
    with pytest.raises(
        ConfigError, match="no weights file; looked for model.safetensors, pytorch_model.bin, model.pt"
    ):
        importer.Spec.from_dict({"source": str(no_weights)})
    no_config = copy_fixture(tmp_path / "b")
    (no_config / "config.json").unlink()
    with pytest.raises(ConfigError, match=r"source: .*/b: no config.json \(a model directory holds"):
        importer.Spec.from_dict({"source": str(no_config)})
    no_tokenizer = copy_fixture(tmp_path / "c")
    shutil.rmtree(no_tokenizer / "tokenizer")
    spec = importer.Spec.from_dict({"source": str(no_tokenizer)})  # the model alone is fine ...
    with pytest.raises(
        ConfigError, match="tokenizer: .* holds no tokenizer.json or tokenizer/tokenizer.json"
    ):
        importer.run(spec, MemoryReporter(), tmp_path / "art")  # ... but its runs need its tokenizer
    given = importer.Spec.from_dict({"source": str(no_tokenizer), "tokenizer": str(FIXTURE / "tokenizer")})
    importer.run(given, MemoryReporter(), tmp_path / "art")  # a tokenizer named apart from the model
    assert (tmp_path / "art" / "tokenizer.json").read_bytes() == (
        FIXTURE / "tokenizer" / "tokenizer.json"
    ).read_bytes()
    with pytest.raises(
        ConfigError, match="source: '/no/such/dir' is neither hf:ORG/NAME nor an existing directory"
    ):
        importer.Spec.from_dict({"source": "/no/such/dir"})


@pytest.mark.parametrize(
    "edit,message",
    [
        (
            lambda s: s.__setitem__("transformer.coda.1.mlp.fc.weight", torch.zeros(160, 41)),
            r"weights: transformer.coda.1.mlp.fc.weight has shape \(160, 41\); its config makes it \(160, 40\)",
        ),
        (
            lambda s: s.pop("transformer.core_block.0.attn.c_k.weight"),
            "weights: missing tensor.s. transformer.core_block.0.attn.c_k.weight",
        ),
        (
            lambda s: s.__setitem__("transformer.extra.weight", torch.zeros(2)),
            "weights: unexpected tensor.s. transformer.extra.weight",
        ),
        (
            lambda s: s.__setitem__("lm_head.weight", torch.zeros(320, 40)),
            "lm_head.weight differs from transformer.wte.weight, but config.tie_embeddings is true",
        ),
    ],
)
def test_bad_weights_are_refused_naming_the_tensor(tmp_path, edit, message):
    directory = copy_fixture(tmp_path / "m")
    _edit_weights(directory, edit)
    with pytest.raises(ConfigError, match=message):
        hub.load_model_dir(directory)


@pytest.mark.parametrize(
    "changes,message",
    [
        (
            {"_class_name": "GPTConfig"},
            "config._class_name: 'GPTConfig' .* accepted: ParcaeConfig, looplab.LoopedLM",
        ),
        ({"qk_norm": False}, "config.qk_norm: False is not computed by looplab; accepted: True"),
        ({"num_key_value_heads": 1}, "config.num_key_value_heads: 1; .* accepted: 2"),
        ({"sampling_scheme": "poisson-unbounded"}, "config.sampling_scheme: 'poisson-unbounded' with"),
        (
            {
                "n_embd": 48,
                "recurrent_embedding_dimension": 48,
                "intermediate_size": 192,
                "recurrent_intermediation_embedding_dimension": 192,
            },
            r"weights: transformer.wte.weight has shape \(320, 40\); its config makes it \(320, 48\)",
        ),
        ({"no_such_field": 1}, "config.no_such_field: unknown field"),
        (
            {"rope_settings": {"use_rope": True, "rope_condense_ratio": 1, "rope_base": 10000}},
            "weights: freqs_cis is not RoPE with base 10000",
        ),
    ],
)
def test_a_config_looplab_cannot_compute_is_refused_naming_the_field(tmp_path, changes, message):
    directory = copy_fixture(tmp_path / "m")
    _edit_config(directory, **changes)
    with pytest.raises(ConfigError, match=message):
        hub.load_model_dir(directory)


def test_a_local_source_that_changed_after_submission_is_refused(tmp_path):
    directory = copy_fixture(tmp_path / "m")
    spec = importer.Spec.from_dict({"source": str(directory)})
    _edit_weights(directory, lambda s: s["transformer.ln_f.weight"].mul_(2))
    with pytest.raises(ConfigError, match="changed since the job was submitted"):
        importer.run(spec, MemoryReporter(), tmp_path / "art")
    with pytest.raises(ConfigError, match="revision: .* is now sha256:"):
        importer.Spec.from_dict(spec.to_dict())


def test_export_then_import_is_bit_for_bit(tmp_path):
    from looplab.workers.inputs import load_model

    importer.run(importer.Spec.from_dict({"source": str(FIXTURE)}), MemoryReporter(), tmp_path / "run")
    original, cfg, _ = load_model(tmp_path / "run", torch.device("cpu"))
    out = export_model(tmp_path / "run", tmp_path / "exported")
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors", "tokenizer.json"]
    from safetensors import safe_open

    with safe_open(str(out / "model.safetensors"), framework="pt") as f:
        keys = set(f.keys())
    assert "wte.weight" in keys and "lm_head.weight" not in keys  # the tied table stored once
    back, info, tokenizer = hub.load_model_dir(out)
    assert info.cfg == cfg and info.layout == hub.LOOPLAB_CLASS and tokenizer == out / "tokenizer.json"
    mine, theirs = original.state_dict(), back.state_dict()
    assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)
    idx = REFERENCE["input_ids"]
    with torch.no_grad():
        assert torch.equal(
            original(idx, loops=3, h0_seed=5).logits, back.eval()(idx, loops=3, h0_seed=5).logits
        )
    # the export is a source too: imported again, it is the same model under its own revision
    again = importer.Spec.from_dict({"source": str(out)})
    assert importer.model_config(again) == cfg and again.revision.startswith("sha256:")
    with pytest.raises(ConfigError, match="out: .* exists and is not empty"):
        export_model(tmp_path / "run", out)


def test_the_import_is_scored_on_the_same_validation_documents_with_its_own_tokenizer(
    tmp_path, looplab_cache
):
    from looplab.workers.data.shards import DataSpec, prepare

    importer.run(importer.Spec.from_dict({"source": str(FIXTURE)}), MemoryReporter(), tmp_path / "run")
    own = prepare(
        DataSpec.from_dict({"corpus": "offline", "tokenizer": str(tmp_path / "run" / "tokenizer.json")})
    )
    byte = prepare(DataSpec.from_dict({"corpus": "offline", "tokenizer": "byte"}))
    assert (
        own.meta["val"]["docs"] == byte.meta["val"]["docs"]
        and own.meta["val"]["bytes"] == byte.meta["val"]["bytes"]
    )
    text = own.tokenizer.decode([int(t) for t in own.val[:2000]]).encode()[
        :-8
    ]  # (a last token may split a character)
    assert len(text) > 2000 and text == bytes(
        byte.val[: len(text)].tolist()
    )  # the same text, token for token
    assert own.meta["val"]["tokens"] < byte.meta["val"]["tokens"]  # a BPE: fewer tokens for the same text
