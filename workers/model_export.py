"""A looplab checkpoint as a self-describing model directory: `looplab export-model CHECKPOINT -o OUT`.

The directory (workers/hub.py's layout, `_class_name` "looplab.LoopedLM") holds
- `config.json`: our ModelConfig (`model_config`), the run's recipe and size, its tokenizer's file name
  (or "byte"), the checkpoint it came from;
- `model.safetensors`: the weights. Tied input and output embeddings are one parameter of `LoopedLM`
  (the head reads `wte.weight`), so the table is stored once, as safetensors requires (it refuses
  tensors that share memory);
- `tokenizer.json`: the tokenizer the run was trained with (none for the byte tokenizer).

`workers.hub.load_model_dir` reads it back bit for bit, an import job takes it as a source, and
lm-evaluation-harness scores it through the adapter (`looplab lm-eval --model looplab --model_args
checkpoint=OUT`).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from model.errors import ConfigError
from workers.hub import CONFIG, LOOPLAB_CLASS

EXPORT_FORMAT = 1


def export_model(checkpoint: str | Path, out: str | Path) -> Path:
    """Write looplab checkpoint `checkpoint` (a train artifact dir or checkpoint file) as a model
    directory `out`: config.json (our ModelConfig, the run's recipe and size), model.safetensors and the
    run's tokenizer.json (none for the byte tokenizer). Returns `out`."""
    from safetensors.torch import save_file

    from workers import checkpoint as ckpt
    from workers.tasks.likelihood import checkpoint_tokenizer

    path = ckpt.find(checkpoint)
    state = ckpt.load(path)
    spec = state.get("spec") or {}
    tokenizer = checkpoint_tokenizer(spec, checkpoint)
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise ConfigError(f"out: {out} exists and is not empty; give a new directory")
    out.mkdir(parents=True, exist_ok=True)
    tensors = {name: t.contiguous() for name, t in state["model"].items()}
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    if tokenizer.path is not None:
        shutil.copyfile(tokenizer.path, out / "tokenizer.json")
    config = {
        "_class_name": LOOPLAB_CLASS,
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
