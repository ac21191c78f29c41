"""A trained model and its data as every job that measures one opens them (the depth sweep, the eval
job's likelihood scorer, the adaptive job): the model of a train or import artifact dir, a checkpoint
file or a model directory; the data it was trained on; its first validation tokens; and the h0 seed
every validation loss uses. Torch is imported when a model is loaded, not when this module is.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from looplab.model.errors import ConfigError

# Validation draws h0 from this seed, in training's evaluations and in the depth sweep alike, so the
# sweep's loss at a run's trained loop count is the run's final validation loss.
EVAL_H0_SEED = 1234


def load_model(path: str | Path, device):
    """(model in eval mode, ModelConfig, train spec dict) from a train or import artifact dir, a
    checkpoint file, or a model directory (workers/hub.py: an export, a published checkpoint; its
    spec is only its tokenizer)."""
    from looplab.model.config import ModelConfig
    from looplab.model.contract import build_model
    from looplab.workers import checkpoint as ckpt
    from looplab.workers import hub

    if hub.is_model_dir(path):
        model, info, tokenizer = hub.load_model_dir(path)
        data = {"tokenizer": "byte" if tokenizer is None else str(tokenizer)}
        spec = {"data": data, "recipe": info.recipe, "size": info.size}
        if info.family is not None:  # a family export: rebuilt through the contract
            spec.update(family=info.family, family_config=info.family_config)
        return model.to(device).eval(), info.cfg, spec
    state = ckpt.load(ckpt.find(path))
    cfg = ModelConfig.from_dict(state["model_config"])
    spec = state["spec"]  # a run of another family names it (model/contract/), looplab's own does not
    model = build_model(cfg, spec.get("family"), spec.get("family_config")).module
    model.load_state_dict(state["model"])
    return model.to(device).eval(), cfg, state["spec"]


def data_spec(train_spec: dict[str, Any], checkpoint: Path):
    """The train (or import) job's data; a BPE whose cache is gone (another machine), or a tokenizer file
    that moved with its artifact dir, comes from the run's own tokenizer.json, so the sweep scores exactly
    the tokens the model was trained on (an imported model: its own tokenizer, on the same documents)."""
    from looplab.workers.data.shards import DataSpec, is_cached

    data = dict(train_spec.get("data") or {})
    tok = (checkpoint if checkpoint.is_dir() else checkpoint.parent) / "tokenizer.json"
    named = data.get("tokenizer", "byte")
    if named not in ("byte", "bpe") and not Path(named).expanduser().is_file() and tok.is_file():
        data["tokenizer"] = str(tok)
    ds = DataSpec.from_dict(data)
    if ds.tokenizer == "bpe" and not is_cached(ds) and tok.is_file():
        ds = dataclasses.replace(ds, tokenizer=str(tok))
    return ds


@dataclass(frozen=True)
class EvalInputs:
    """A checkpoint ready to evaluate on the fixed validation set: the model (eval mode), its config, the
    train spec it was trained under, the validation chunks (N, seq_len + 1) and each token's UTF-8 bytes."""

    model: Any
    cfg: Any
    train_spec: dict[str, Any]
    chunks: Any
    token_bytes: Any


def eval_inputs(checkpoint: str | None, eval_tokens: int, device) -> EvalInputs:
    """The checkpoint's model and the first `eval_tokens` validation tokens of its own data, as the
    depth sweep and the adaptive job evaluate them (so their losses compare)."""
    import torch

    from looplab.workers.data.shards import prepare, val_chunks

    if checkpoint is None:
        raise ConfigError("checkpoint: missing; give a train artifact dir or a checkpoint file")
    model, cfg, train_spec = load_model(checkpoint, device)
    data = prepare(data_spec(train_spec, Path(checkpoint)))
    if data.vocab_size > cfg.vocab_size:  # fewer is a padded embedding table (an imported model's)
        raise ConfigError(f"checkpoint: tokenizer vocab {data.vocab_size} > model vocab {cfg.vocab_size}")
    chunks = val_chunks(data.val, eval_tokens, cfg.seq_len)
    return EvalInputs(model, cfg, train_spec, chunks, torch.from_numpy(data.token_bytes))
