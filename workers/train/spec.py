"""What a train job is asked to do: the `Spec` dataclass, its validation, and the artifact-dir guard.

Torch-free, so validating a grid (`workers.jobs.validate`) never imports torch. Every field documents
itself with the string under it; `python -m looplab.workers.train --help` is generated from those strings and
the defaults here (workers/spec_cli.py), so a default is written once.

What a run is. Every field either *defines* the run or says only *how it executes*:

- defining (the default): what is trained and what its numbers mean: recipe, size, model, seed, the
  budget, batch_size (sequences per optimizer step), seq_len, the optimizer and its settings, the
  schedule, gradient clipping, the validation set (eval_tokens), the data. Two specs that differ in
  one are different runs: a checkpoint made under one never resumes under the other.
- execution (`field(metadata=EXECUTION)`, the rule of workers/identity.py): where and in what pieces the same computation runs, and
  what is measured or saved along the way: micro_batch_size, bucketing, compile, device, the log /
  evaluation / checkpoint cadences (log_every, eval_every, ckpt_every, ckpt_minutes, keep_checkpoints), which extra depths
  an evaluation reports (eval_loops) and the time budget's calibration length (calib_steps). Changing one
  changes no row's sequences, loop counts, initial state or gradient (micro-batches and buckets change
  the float summation order only, see workers/train/batching.py), so a checkpoint resumes under it.

The rule for a new field: it is execution only if no weight after any step and no reported value
(a loss, a result column) depends on it beyond float summation order; otherwise it defines the run.
`identity(spec_dict)` is a spec with its execution fields dropped: what the artifact-dir guard and the
checkpoint's resume check compare (and what a job's hash and variant should be computed from). A
spec dict stored before a field existed simply lacks it; `identity` drops execution fields present or
not, so such a dict keeps matching.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from looplab.model import fields
from looplab.model.errors import ConfigError
from looplab.model.names import BUILTIN_FAMILY, Optimizer
from looplab.model.shape import FAMILY_BATCH, RunShape
from looplab.workers.artifacts import KEEP_CHECKPOINTS
from looplab.workers.data.shards import BUDGET, DataSpec
from looplab.workers.identity import EXECUTION, spec_to_dict
from looplab.workers.identity import execution_fields as _execution_fields
from looplab.workers.identity import identity as _identity
from looplab.workers.model_fields import ModelFields, model_fields
from looplab.workers.train.rewind import RewindRule

# Loop counts evaluated at every evaluation of a looped recipe when `eval_loops` is not given.
DEFAULT_EVAL_LOOPS = (1, 2, 4, 8)


# Sequences per optimizer step when `batch_size` is not given: the published recipe's 256 x 2,048
# tokens at the study's sizes (sandyresearch/parcae, launch_configs/parcae-small-140m.yaml), the
# small batches that train on a CPU at tiny and small. The same for every recipe, so they compare.
SIZE_BATCH = {"tiny": 8, "small": 8, "86m": 256, "144m": 256}
# Sequences per forward when `micro_batch_size` is not given: at the study's sizes the largest that fits
# the device (the whole published batch does not fit one GPU), else the whole batch.
SIZE_MICRO_BATCH: dict[str, str | None] = {"86m": "auto", "144m": "auto"}
AUTO = "auto"


@dataclass(frozen=True)
class Spec(ModelFields):
    seed: int = 0
    """seed of the initial weights, the batches and the loop-count sampler"""
    tokens: int | None = None
    """token budget, e.g. 2e6 (give exactly one of tokens, time_s and flops)"""
    time_s: float | None = None
    """training-time budget in seconds, steps planned from a short calibration"""
    flops: float | None = None
    """training-FLOP budget, e.g. 3e15 (forward + backward, model.flops), trained as whole steps"""
    batch_size: int = SIZE_BATCH["tiny"]
    """sequences per optimizer step, the global batch (and per evaluation batch); not given: the
    size's, 8 at tiny and small, 256 at 86m and 144m"""
    micro_batch_size: int | str | None = field(default=None, metadata=EXECUTION)
    """sequences per forward (the step's gradient is accumulated over its forwards; need not divide
    batch_size, forwards differ by at most one sequence), also per evaluation forward; auto: the largest
    that fits the device by model/memory.py (the default at 86m and 144m); none: the whole batch"""
    bucketing: bool = field(default=True, metadata=EXECUTION)
    """with per-sequence loop counts and several forwards per step, put sequences of similar counts in
    the same forward (the same gradient, fewer padded rounds)"""
    seq_len: int | None = None
    """tokens per sequence; none: the preset's seq_len"""
    lr: float | None = None
    """learning rate of the matrix parameters; none: the optimizer's default"""
    adam_lr: float | None = None
    """AdamW learning rate of embeddings, norms and injection parameters; none: the optimizer's default"""
    optimizer: str = Optimizer.PARCAE.value
    """parcae (the reference Muon+AdamW), torch_muon (torch.optim.Muon + AdamW) or adamw"""
    weight_decay: float | None = None
    """weight decay of the matrix parameters; none: the optimizer's default"""
    warmup_steps: int = 0
    """steps of linear learning-rate warmup"""
    cooldown_frac: float = 0.5
    """fraction of the steps over which the learning rate falls linearly to 0, in (0, 1]"""
    grad_clip: float = 1.0
    """gradient-norm clipping threshold; 0 disables clipping"""
    spike_rewind: dict[str, Any] | None = None
    """rewind loss spikes: {k, window, max_rewinds} (workers/train/rewind.py: a step's loss above k x the
    median of the last `window` goes back to a checkpoint from before it and skips that step's data;
    after max_rewinds the run fails); none: off, and left out of the stored spec"""
    eval_every: int = field(default=50, metadata=EXECUTION)
    """steps between evaluations (the last step always evaluates)"""
    eval_tokens: int = 32768
    """validation tokens per evaluation (the first ones of the val shard)"""
    eval_loops: list[int] | None = field(default=None, metadata=EXECUTION)
    """loop counts evaluated at each evaluation (metric val_loss@N); none: 1,2,4,8 for looped recipes,
    the trained count for plain ones"""
    ckpt_every: int = field(default=100, metadata=EXECUTION)
    """steps between checkpoints"""
    ckpt_minutes: float = field(default=10.0, metadata=EXECUTION)
    """at most this many minutes between checkpoints"""
    keep_checkpoints: int = field(default=KEEP_CHECKPOINTS, metadata=EXECUTION)
    """checkpoints kept while the run goes on, the newest ones (at least 2: a loss spike's rewind goes
    back to one from before it); named by attempt and step (workers/artifacts.py)"""
    log_every: int = field(default=1, metadata=EXECUTION)
    """steps between train_loss / lr / tokens_per_s points"""
    calib_steps: int = field(default=6, metadata=EXECUTION)
    """time budget only: at least this many timed calibration steps (on a copy that is thrown away)"""
    compile: bool = field(default=False, metadata=EXECUTION)
    """train through torch.compile (its first step is timed as compile_seconds, not train_seconds)"""
    device: str = field(default="auto", metadata=EXECUTION)
    """auto, cpu, cuda or cuda:N"""
    data: DataSpec = field(default_factory=DataSpec)
    """the corpus and tokenizer"""

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Spec:

        given = fields.known_keys("train", d, cls)
        d = {**vars(cls()), **given}
        v: dict[str, Any] = model_fields(d, given)
        v["seed"] = fields.integer("seed", d["seed"], lo=0)
        v["tokens"] = fields.integer("tokens", d["tokens"], lo=1, allow_none=True)
        v["time_s"] = fields.number("time_s", d["time_s"], lo=0, lo_open=True, allow_none=True)
        v["flops"] = fields.number("flops", d["flops"], lo=0, lo_open=True, allow_none=True)
        if sum(v[name] is not None for name in ("tokens", "time_s", "flops")) != 1:
            raise ConfigError(
                "tokens / time_s / flops: give exactly one budget (a token count, training seconds or "
                "training FLOPs)"
            )
        if "batch_size" not in given:  # the size's published batch (a shaped family's: model/shape.py)
            d["batch_size"] = FAMILY_BATCH if v["size"] is None else SIZE_BATCH[v["size"]]
        v["batch_size"] = fields.integer("batch_size", d["batch_size"], lo=1)
        if "micro_batch_size" not in given:
            d["micro_batch_size"] = SIZE_MICRO_BATCH.get(v["size"])
        if d["micro_batch_size"] == AUTO:
            v["micro_batch_size"] = AUTO
        else:
            try:
                v["micro_batch_size"] = fields.integer(
                    "micro_batch_size", d["micro_batch_size"], lo=1, hi=v["batch_size"], allow_none=True
                )
            except ConfigError as e:
                raise ConfigError(f"{e}; or 'auto' (the largest that fits the device)") from None
        v["bucketing"] = fields.boolean("bucketing", d["bucketing"])
        if "seq_len" not in v:  # a shaped family's is its shape's (model_fields)
            v["seq_len"] = fields.integer("seq_len", d["seq_len"], lo=2, allow_none=True)
        for name in ("lr", "adam_lr"):
            v[name] = fields.number(name, d[name], lo=0, lo_open=True, allow_none=True)
        v["optimizer"] = fields.choice("optimizer", d["optimizer"], tuple(Optimizer))
        v["weight_decay"] = fields.number("weight_decay", d["weight_decay"], lo=0, allow_none=True)
        v["warmup_steps"] = fields.integer("warmup_steps", d["warmup_steps"], lo=0)
        v["cooldown_frac"] = fields.number("cooldown_frac", d["cooldown_frac"], lo=0, lo_open=True, hi=1)
        v["grad_clip"] = fields.number("grad_clip", d["grad_clip"], lo=0)
        rule = RewindRule.from_value("spike_rewind", d["spike_rewind"])
        v["spike_rewind"] = None if rule is None else rule.to_dict()
        for name in ("eval_every", "eval_tokens", "ckpt_every", "log_every"):
            v[name] = fields.integer(name, d[name], lo=1)
        loops = d["eval_loops"]
        v["eval_loops"] = None if loops is None else fields.int_list("eval_loops", loops, lo=1)
        v["calib_steps"] = fields.integer("calib_steps", d["calib_steps"], lo=2)
        v["ckpt_minutes"] = fields.number("ckpt_minutes", d["ckpt_minutes"], lo=0, lo_open=True)
        v["keep_checkpoints"] = fields.integer("keep_checkpoints", d["keep_checkpoints"], lo=KEEP_CHECKPOINTS)
        v["compile"] = fields.boolean("compile", d["compile"])
        v["device"] = fields.device("device", d["device"])
        v["data"] = DataSpec.from_dict(given.get("data"))
        spec = cls(**v)
        spec.model_config(256)  # unknown model overrides fail here, naming the key
        if spec.data.max_tokens == BUDGET:  # the tokens of this run's own budget (workers/data/shards.py)
            spec = dataclasses.replace(spec, data=spec.data.budgeted(spec.budget_tokens()))
        return spec

    def budget_tokens(self) -> int | None:
        """The tokens the whole steps of a token or FLOP budget train, at the vocabulary the spec asks for
        (the FLOP model imports torch); None for a time budget (its steps depend on the machine)."""
        cfg = self.resolved_model_config()
        per_step = self.batch_size * cfg.seq_len
        if self.tokens is not None:
            return max(1, self.tokens // per_step) * per_step
        if self.flops is not None:
            from looplab.model.counts import tokens_for_flops

            family = self.family_pricing(cfg)
            if family is not None:  # another family: its own FLOPs per token, as the trainer counts them
                per_token = family.training_flops(cfg.loops)
                return max(1, int(self.flops / per_token) // per_step) * per_step
            return tokens_for_flops(cfg, self.flops, self.batch_size, cfg.seq_len)
        return None

    def to_dict(self) -> dict[str, Any]:
        d = spec_to_dict(self)
        d["model"] = dict(self.model)
        d["data"] = self.data.to_dict()
        if self.spike_rewind is None:  # off: left out, so stored runs keep their hash
            d.pop("spike_rewind")
        return self.family_keys(d)

    @property
    def rewind_rule(self) -> RewindRule | None:
        return RewindRule.from_value("spike_rewind", self.spike_rewind)

    def model_config(self, vocab_size: int):
        """The ModelConfig this spec trains, for a tokenizer of `vocab_size` tokens (a shaped family's:
        `RunShape.model_config`, the figures of its shape)."""
        return dataclasses.replace(self._preset_config(), vocab_size=vocab_size)

    def _preset_config(self):
        """The preset with this spec's model overrides and seq_len, at the preset's vocabulary."""
        if self.shaped:
            return self.preset_config()
        from looplab.model.presets import preset

        overrides = dict(self.model)
        if self.seq_len is not None:
            overrides["seq_len"] = self.seq_len
        try:
            cfg = preset(self.recipe, self.size, **overrides)
        except TypeError as e:  # a preset that does not name the bad key itself
            raise ConfigError(f"model: bad override(s) {sorted(overrides)}: {e}") from e
        return cfg

    def asked_vocab_size(self) -> int | None:
        """The vocabulary the spec's data will have, read without torch and without the corpus: "byte"
        256, "bpe" data.vocab_size, a tokenizer.json the size of its vocabulary and added tokens (None
        if the file cannot be read)."""
        tokenizer = self.data.tokenizer
        if tokenizer == "byte":
            return 256
        if tokenizer == "bpe":
            return self.data.vocab_size
        return tokenizer_json_vocab_size(Path(tokenizer).expanduser())

    def resolved_model_config(self):
        """The ModelConfig this spec trains, at the vocabulary its data will have (`asked_vocab_size`;
        the preset's vocabulary if it cannot be read)."""
        vocab_size = self.asked_vocab_size()
        return self._preset_config() if vocab_size is None else self.model_config(vocab_size)

    def family_pricing(self, cfg):
        """The contract's pricing (model/family_pricing.py) of the spec's model at `cfg`'s vocabulary,
        context and loops when it is of another family, else None. Priced at the shape without its tokens:
        a FLOP budget's tokens are priced from this (`budget_tokens`)."""
        from looplab.model.contract import family_settings
        from looplab.model.family_pricing import family_pricing

        if self.family == BUILTIN_FAMILY:
            return None
        shape = RunShape.of_config(cfg, self.batch_size)
        return family_pricing(self.family, family_settings(shape, self.family_config))

    def run_shape(self, vocab_size: int | None = None) -> RunShape:
        """The run's shape (model/shape.py) at `vocab_size` (default: the vocabulary its data will have):
        what submission checks a family at, the planner prices it at and the trainer builds it at."""
        cfg = self.resolved_model_config() if vocab_size is None else self.model_config(vocab_size)
        return RunShape.of_config(cfg, self.batch_size, self.budget_tokens())

    def resolved_eval_loops(self, cfg) -> list[int]:
        """The loop counts each evaluation reports (`val_loss@N`) for the model config `cfg`."""
        if self.eval_loops is not None:
            return list(self.eval_loops)
        looped = cfg.injection != "none" or cfg.loops > 1
        return list(DEFAULT_EVAL_LOOPS) if looped else [cfg.loops]


def tokenizer_json_vocab_size(path: Path) -> int | None:
    """Tokens of a `tokenizers` tokenizer.json (its model's vocabulary plus added tokens, as
    `Tokenizer.get_vocab_size()` counts them), read as plain JSON; None if the file cannot be read."""
    try:
        saved = json.loads(path.read_text())
        vocab = saved["model"]["vocab"]
        # BPE / WordPiece / WordLevel store {token: id}; Unigram stores [[token, score], ...]
        tokens = set(vocab) if isinstance(vocab, dict) else {entry[0] for entry in vocab}
        tokens |= {added["content"] for added in saved.get("added_tokens") or []}
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None
    return len(tokens) or None


def execution_fields() -> frozenset[str]:
    """The train Spec fields that say how a run executes, not what it is (see the module docstring)."""
    return _execution_fields(Spec)


def identity(spec_dict: dict[str, Any]) -> dict[str, Any]:
    """What defines the run of a train spec dict (canonical, `Spec.to_dict()`, or stored by an older
    version without some execution fields): the dict without its execution fields."""
    return _identity(Spec, spec_dict)


def identity_diff(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The defining fields in which two train spec dicts differ, sorted."""
    old, new = identity(old), identity(new)
    return [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]


def check_artifact_dir(spec: Spec, artifact_dir: Path) -> None:
    """Refuse to reuse a dir trained as a different run (a defining field differs), naming the field;
    write spec.json for a new one, and rewrite it when only execution fields changed."""
    path = artifact_dir / "spec.json"
    new = spec.to_dict()
    if path.exists():
        try:
            old = json.loads(path.read_text())
        except ValueError as e:
            raise ConfigError(f"spec.json: {str(path)!r} is not valid JSON ({e})") from e
        diff = identity_diff(old, new)
        if diff:
            k = diff[0]
            raise ConfigError(
                f"{k}: artifact dir {str(artifact_dir)!r} was trained with {k}={old.get(k)!r}, "
                f"this spec has {new.get(k)!r} (differing fields: {', '.join(diff)}); "
                "use a new artifact dir"
            )
        if old == new:
            return
    artifact_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(new, indent=1, sort_keys=True))
    os.replace(tmp, path)
