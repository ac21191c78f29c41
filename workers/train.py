"""The train job: one model configuration trained to a token (or wall-clock) budget, exactly resumable.

    Spec.from_dict(d) -> Spec           validated, canonical (`to_dict()`), ConfigError naming the field
    run(spec, reporter, artifact_dir)   trains, reports curves and one `train_results` row, returns it

Exact resume: the batch at step s and the loop counts at step s are pure functions of (seed, s), and
the checkpoint holds model, optimizers, step, schedule length and every RNG state; so a run killed at
any point and restarted from its last checkpoint reproduces the uninterrupted loss curve bit for bit
on CPU. Starting `run` on an artifact dir that holds `checkpoint.pt` resumes from it.

Time budget (`time_s`): a short calibration on a throw-away copy of the model measures tokens/s
(reported as `calib_tokens_per_s`, saved in `calibration.json`) and plans the step count; before every
step the plan is re-fitted to the time left at the recent step time (warm-up and machine load change
throughput), and the cooldown is tracked as a position so it still ends at lr 0 on the last step. The
summary reports how far the real training time landed from `time_s`. Unlike a token budget, such a run
is not bit-reproducible: its step count depends on the machine's speed.

Standalone: `python -m workers.train --preset lean --size tiny --tokens 2e6 --out runs/x`
(see workers/train_cli.py).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from model.errors import ConfigError
from workers import spec_fields as F
from workers.data import DataSpec

log = logging.getLogger("looplab.workers.train")


@dataclass(frozen=True)
class Spec:
    recipe: str = "lean"
    size: str = "tiny"
    model: dict[str, Any] = field(default_factory=dict)  # ModelConfig field overrides
    seed: int = 0
    tokens: int | None = None  # exactly one of tokens / time_s
    time_s: float | None = None
    batch_size: int = 8
    seq_len: int | None = None  # None: the preset's seq_len
    lr: float | None = None  # Muon lr (or AdamW lr for matrices with optimizer="adamw"); None: default
    adam_lr: float | None = None  # AdamW lr for embeddings/norms/injection; None: default
    optimizer: str = "muon"
    weight_decay: float = 0.0
    warmup_steps: int = 0
    cooldown_frac: float = 0.5
    grad_clip: float = 1.0  # 0 disables clipping
    eval_every: int = 50
    eval_tokens: int = 32768
    ckpt_every: int = 100
    ckpt_minutes: float = 10.0
    log_every: int = 1
    calib_steps: int = 6  # time budget only: steps of throughput calibration (thrown away)
    compile: bool = False
    device: str = "auto"
    data: DataSpec = field(default_factory=DataSpec)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Spec:
        from model.presets import RECIPES, SIZES

        d = F.check_keys("train", d, cls)
        v: dict[str, Any] = {}
        v["recipe"] = F.choice("recipe", d.get("recipe", cls.recipe), sorted(RECIPES))
        v["size"] = F.choice("size", d.get("size", cls.size), sorted(SIZES))
        model = d.get("model") or {}
        if not isinstance(model, dict):
            raise ConfigError(f"model: expected a dict of ModelConfig overrides, got {model!r}")
        try:  # canonical JSON values (tuples -> lists), as spec.json and the queue will store them
            model = json.loads(json.dumps(model))
        except (TypeError, ValueError) as e:
            raise ConfigError(f"model: overrides must be plain JSON values: {e}") from e
        v["model"] = dict(sorted(model.items()))
        v["seed"] = F.integer("seed", d.get("seed", 0), lo=0)
        v["tokens"] = F.integer("tokens", d.get("tokens"), lo=1, allow_none=True)
        v["time_s"] = F.number("time_s", d.get("time_s"), lo=0, lo_open=True, allow_none=True)
        if (v["tokens"] is None) == (v["time_s"] is None):
            raise ConfigError("tokens / time_s: give exactly one budget (a token count or training seconds)")
        v["batch_size"] = F.integer("batch_size", d.get("batch_size", cls.batch_size), lo=1)
        v["seq_len"] = F.integer("seq_len", d.get("seq_len"), lo=2, allow_none=True)
        v["lr"] = F.number("lr", d.get("lr"), lo=0, lo_open=True, allow_none=True)
        v["adam_lr"] = F.number("adam_lr", d.get("adam_lr"), lo=0, lo_open=True, allow_none=True)
        v["optimizer"] = F.choice("optimizer", d.get("optimizer", cls.optimizer), ("muon", "adamw"))
        v["weight_decay"] = F.number("weight_decay", d.get("weight_decay", cls.weight_decay), lo=0)
        v["warmup_steps"] = F.integer("warmup_steps", d.get("warmup_steps", cls.warmup_steps), lo=0)
        v["cooldown_frac"] = F.number(
            "cooldown_frac", d.get("cooldown_frac", cls.cooldown_frac), lo=0, lo_open=True, hi=1
        )
        v["grad_clip"] = F.number("grad_clip", d.get("grad_clip", cls.grad_clip), lo=0)
        for k in ("eval_every", "eval_tokens", "ckpt_every", "log_every"):
            v[k] = F.integer(k, d.get(k, getattr(cls, k)), lo=1)
        v["calib_steps"] = F.integer("calib_steps", d.get("calib_steps", cls.calib_steps), lo=2)
        v["ckpt_minutes"] = F.number(
            "ckpt_minutes", d.get("ckpt_minutes", cls.ckpt_minutes), lo=0, lo_open=True
        )
        v["compile"] = F.boolean("compile", d.get("compile", False))
        v["device"] = F.device("device", d.get("device", "auto"))
        v["data"] = DataSpec.from_dict(d.get("data"))
        spec = cls(**v)
        spec.model_config(256)  # unknown model overrides fail here, naming the key
        return spec

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["model"] = dict(self.model)
        d["data"] = self.data.to_dict()
        return d

    def model_config(self, vocab_size: int):
        from model.presets import preset

        overrides = dict(self.model)
        if self.seq_len is not None:
            overrides["seq_len"] = self.seq_len
        try:
            cfg = preset(self.recipe, self.size, **overrides)
        except TypeError as e:  # a preset that does not name the bad key itself
            raise ConfigError(f"model: bad override(s) {sorted(overrides)}: {e}") from e
        return dataclasses.replace(cfg, vocab_size=vocab_size)


def check_artifact_dir(spec: Spec, artifact_dir: Path) -> None:
    """Refuse to reuse a dir trained with a different spec; write spec.json for a new one."""
    p = artifact_dir / "spec.json"
    new = spec.to_dict()
    if p.exists():
        try:
            old = json.loads(p.read_text())
        except ValueError as e:
            raise ConfigError(f"spec.json: {str(p)!r} is not valid JSON ({e})") from e
        diff = [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
        if diff:
            k = diff[0]
            raise ConfigError(
                f"{k}: artifact dir {str(artifact_dir)!r} was trained with {k}={old.get(k)!r}, "
                f"this spec has {new.get(k)!r} (differing fields: {', '.join(diff)}); "
                "use a new artifact dir"
            )
        return
    artifact_dir.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps(new, indent=1, sort_keys=True))
    os.replace(tmp, p)


def run(spec: Spec, reporter, artifact_dir: str | Path) -> dict[str, Any]:
    """Train (or resume) `spec` in `artifact_dir`; returns the `train_results` row."""
    from workers.trainer import Trainer

    artifact_dir = Path(artifact_dir)
    check_artifact_dir(spec, artifact_dir)
    return Trainer(spec, reporter, artifact_dir).run()


def seed_everything(seed: int) -> None:
    import torch

    torch.manual_seed(seed)
    random.seed(seed)


if __name__ == "__main__":
    from workers.train_cli import main

    raise SystemExit(main())
