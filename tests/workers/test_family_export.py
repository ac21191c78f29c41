"""A run of another model family exported as a model directory (workers/model_export.py, `_class_name`
looplab.Family) and read back through the contract (workers/hub.py `load_model_dir`), directly and
through the import job: the same logits (the example family and the Huginn-style one); a family that
does not import where it is read is refused naming it."""

from __future__ import annotations

import json

import pytest
import torch

from looplab.model.errors import ConfigError
from looplab.workers import hub, importer, jobs
from looplab.workers.model_export import export_model
from looplab.workers.reporter import MemoryReporter
from tests.workers.conftest import tiny_spec

UT = "examples.universal_transformer:factory"
FAMILY = {"family": UT, "family_config": {"d_model": 32, "n_heads": 2}, "optimizer": "adamw"}


HUGINN = {
    "family": "families.huginn:factory",
    "family_config": {"d_model": 32, "n_heads": 2, "mlp": 48},
}


@pytest.mark.parametrize("family", [FAMILY, {**FAMILY, **HUGINN}], ids=["example", "huginn"])
def test_a_family_run_exports_and_reads_back_with_equal_logits(tmp_path, looplab_cache, family):
    from looplab.workers.inputs import load_model

    name, family_config, package = family["family"], family["family_config"], family["family"].split(".")[0]
    spec = jobs.validate("train", tiny_spec(**family, model={"loops": 3}, tokens=8 * 32 * 4))
    jobs.run("train", spec, MemoryReporter(), tmp_path / "run")
    original, cfg, _ = load_model(tmp_path / "run", torch.device("cpu"))
    out = export_model(tmp_path / "run", tmp_path / "exported")
    config = json.loads((out / "config.json").read_text())
    assert config["_class_name"] == hub.FAMILY_CLASS and config["family"] == name
    assert config["family_config"] == family_config and config["family_package"] == package
    assert "family_version" in config and "looplab_version" in config
    from safetensors import safe_open

    with safe_open(str(out / "model.safetensors"), framework="pt") as f:
        keys = set(f.keys())
    assert "embed.weight" in keys and not any(k.startswith("inner.") for k in keys)  # the family's own

    idx = torch.randint(0, 256, (2, 32), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = original(idx, loops=3).logits
        back, info, _ = hub.load_model_dir(out)
        assert info.family == name and info.cfg == cfg
        assert torch.equal(back.eval()(idx, loops=3).logits, want)
        # a model directory is a checkpoint for the follow-ups, and a source for the import job
        direct, _, direct_spec = load_model(out, torch.device("cpu"))
        assert direct_spec["family"] == name and torch.equal(direct(idx, loops=3).logits, want)
        ispec = importer.Spec.from_dict({"source": str(out)})
        importer.run(ispec, MemoryReporter(), tmp_path / "imported")
        imported, _, imported_spec = load_model(tmp_path / "imported", torch.device("cpu"))
        assert imported_spec["family_config"] == family_config
        assert torch.equal(imported(idx, loops=3).logits, want)

    config["family"] = "no_such_package_xyz:factory"
    (out / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match="family 'no_such_package_xyz:factory': module .* does not import"):
        hub.load_model_dir(out)
