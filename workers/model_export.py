"""A looplab checkpoint as a self-describing model directory: `looplab export-model CHECKPOINT -o OUT`.

The directory (workers/hub.py's layout, `_class_name` "looplab.LoopedLM") holds
- `config.json`: our ModelConfig (`model_config`), the run's recipe and size, its tokenizer's file name
  (or "byte"), the checkpoint it came from;
- `model.safetensors`: the weights. Tied input and output embeddings are one parameter of `LoopedLM`
  (the head reads `wte.weight`), so the table is stored once, as safetensors requires (it refuses
  tensors that share memory);
- `tokenizer.json`: the tokenizer the run was trained with (none for the byte tokenizer).

A run of another model family (model/contract/) is exported as `_class_name` "looplab.Family": its
family's own module's state_dict (as its factory builds it, shared tensors stored once by
`safetensors.torch.save_model`) and a config.json naming the family, its `family_config`, the family's
package and version and looplab's version, beside the run's ModelConfig (vocabulary, context, loops).
`load_model_dir` rebuilds it through the contract (`model.contract.build_model`) and loads the weights.

`workers.hub.load_model_dir` reads it back bit for bit, an import job takes it as a source, and
lm-evaluation-harness scores it through the adapter (`looplab lm-eval --model looplab --model_args
checkpoint=OUT`).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from looplab.model.errors import ConfigError
from looplab.workers.hub import CONFIG, FAMILY_CLASS, LOOPLAB_CLASS

EXPORT_FORMAT = 1


def export_model(checkpoint: str | Path, out: str | Path) -> Path:
    """Write looplab checkpoint `checkpoint` (a train artifact dir or checkpoint file) as a model
    directory `out`: config.json (our ModelConfig, the run's recipe and size), model.safetensors and the
    run's tokenizer.json (none for the byte tokenizer). Returns `out`."""
    from safetensors.torch import save_file

    from looplab.workers import checkpoint as ckpt
    from looplab.workers.tasks.likelihood import checkpoint_tokenizer

    path = ckpt.find(checkpoint)
    state = ckpt.load(path)
    spec = state.get("spec") or {}
    tokenizer = checkpoint_tokenizer(spec, checkpoint)
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise ConfigError(f"out: {out} exists and is not empty; give a new directory")
    out.mkdir(parents=True, exist_ok=True)
    family = _family_export(state, out) if spec.get("family") else {}
    if not family:
        tensors = {name: t.contiguous() for name, t in state["model"].items()}
        save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    if tokenizer.path is not None:
        shutil.copyfile(tokenizer.path, out / "tokenizer.json")
    config = {
        "_class_name": FAMILY_CLASS if family else LOOPLAB_CLASS,
        **family,
        "format": EXPORT_FORMAT,
        "model_config": state["model_config"],
        "recipe": spec.get("recipe"),
        "size": spec.get("size"),
        "tokenizer": "tokenizer.json" if tokenizer.path is not None else "byte",
        "exported_from": str(path.resolve()),
    }
    tmp = out / f".{CONFIG}.tmp{os.getpid()}"
    tmp.write_text(json.dumps(config, indent=1, sort_keys=True))
    os.replace(tmp, out / CONFIG)
    return out


def _family_export(state: dict, out: Path) -> dict:
    """Write a family run's weights (its module's own state_dict) to out/model.safetensors; the config
    keys that name the family: its name, family_config, package and version, and looplab's version."""
    from importlib.metadata import PackageNotFoundError, version

    from safetensors.torch import save_model

    from looplab.model.config import ModelConfig
    from looplab.model.contract import build_model

    spec = state["spec"]
    built = build_model(
        ModelConfig.from_dict(state["model_config"]), spec["family"], spec.get("family_config")
    )
    built.module.load_state_dict(state["model"])
    save_model(built.module.inner, str(out / "model.safetensors"), metadata={"format": "pt"})
    try:
        looplab = version("looplab")
    except PackageNotFoundError:
        looplab = None
    return {
        "family": built.family.name,
        "family_config": dict(spec.get("family_config") or {}),
        "family_package": built.family.package,
        "family_version": built.family.version,
        "looplab_version": looplab,
    }
