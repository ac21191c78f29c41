"""What a train job costs, from its validated Spec alone: the FLOPs and step arithmetic a time estimate
needs and the peak memory on each device type (`cost(spec)`; the planner turns it into seconds).

Every count follows what the trainer runs (workers/train/trainer.py), with the Spec's own values (its defaults
included, never re-typed here): steps = max(1, tokens // tokens per step) for a token budget, the whole
steps of `model.counts.tokens_for_flops` for a FLOP budget, unknown for a time budget; an evaluation every
`eval_every` steps and at the last one, each a forward of the first `eval_tokens` validation tokens (whole
sequences, at least one) at the trained loop count and at each other count of `resolved_eval_loops`; a
checkpoint every `ckpt_every` steps and a final one. Memory: `model.memory.training_memory`.
Torch is imported when a cost is computed, not when this module is.

A model of another family (model/contract/) is priced from the contract (`model.contract.
family_pricing`: its own FLOPs per token at each loop count, else measured once, and its parameter
count), not from the FLOP model of the recipe and size its spec names; every part of its step runs with
autograd, and rows of one batch never pad. Its memory is still `training_memory` of that ModelConfig.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from looplab.workers.train.spec import Spec

FLOAT_BYTES = 4
# the metrics the trainer reports at each logged step (workers/train/trainer.py: train_loss, lr, tokens_per_s),
# and padding_waste when rows run their own loop counts (mfu and hfu on a GPU of the peak table are left
# out: a spec does not say which GPU runs it)
LOG_POINTS = 3


@dataclass(frozen=True)
class TrainCost:
    """The arithmetic of one train job (per token, per step, per evaluation)."""

    cfg: Any  # model.config.ModelConfig, at the vocabulary of the spec's data
    batch: int
    tokens_per_step: int
    steps: int | None  # None for a time budget
    flops_per_token: float  # training forward + backward, expected over the loop sampler
    grad_flops_per_token: float  # of which the parts run with autograd (their forward and backward)
    eval_flops: float  # forward FLOPs of one evaluation
    eval_every: int
    ckpt_every: int
    keep_checkpoints: int  # checkpoints kept while it runs (workers/artifacts.py)
    log_every: int
    log_points: int  # metric points of one logged step (train_loss, lr, tokens_per_s[, padding_waste])
    eval_points: int  # metric points of one evaluation (val_loss, val_bpb, val_loss@n per count, peak_mem_mb)
    calib_steps: int  # a time budget's calibration steps (on a throw-away copy)
    params: int
    optimizer: str
    compile: bool
    memory: dict[str, float]  # device type ("cpu", "cuda") -> peak bytes
    tokenizer: str  # its data's tokenizer ("byte", "bpe", a tokenizer.json): what a token of text is
    family: Any = (
        None  # model.family_pricing.FamilyPricing of a model of another family, else None (LoopedLM)
    )

    def forward_flops(self, loops: int, width: int | None = None) -> float:
        """Forward FLOPs per token of the model at `loops` (at sequence length `width`, default the
        run's; a family's are its own, at the run's length)."""
        from looplab.model.flops import step_flops

        if self.family is not None:
            return self.family.forward_flops(loops)
        return step_flops(self.cfg, loops, seq_len=width or self.cfg.seq_len).forward

    def n_evals(self, steps: float) -> int:
        steps = max(1, int(steps))
        return steps // self.eval_every + (1 if steps % self.eval_every else 0)

    def n_ckpts(self, steps: float) -> int:
        return max(1, int(steps)) // self.ckpt_every + 1  # and the final save

    def flops(self, steps: int) -> float:
        """Training and evaluation FLOPs of `steps` steps."""
        return steps * self.tokens_per_step * self.flops_per_token + self.n_evals(steps) * self.eval_flops

    @property
    def checkpoint_bytes(self) -> float:
        """What one checkpoint (`checkpoint-a…-s….pt`) writes: the fp32 weights and the optimizer's state
        (`model.memory.optimizer_state_bytes`)."""
        from looplab.model.memory import family_optimizer_state_bytes, optimizer_state_bytes

        if self.family is not None:
            return self.final_bytes + family_optimizer_state_bytes(self.family, self.optimizer)
        return self.final_bytes + optimizer_state_bytes(self.cfg, self.optimizer)

    def memory_at(self, sequences: int, device_type: str) -> float:
        """Peak bytes of a training forward of `sequences` sequences on `device_type`: the model's own
        (`model.memory.training_memory`, or `family_training_memory` for another family's)."""
        from looplab.model.memory import family_training_memory, training_memory

        if self.family is not None:
            return family_training_memory(self.family, self.cfg.loops, sequences, device_type, self.optimizer)
        return training_memory(self.cfg, sequences, device_type, self.optimizer)

    @property
    def final_bytes(self) -> float:
        """What the final weights (`final.pt`) hold: the fp32 weights."""
        return float(FLOAT_BYTES * self.params)

    def metric_points(self, steps: float) -> int:
        """Metric points the run reports: `log_points` at every `log_every`-th step (0-based) and at the
        last one, `eval_points` per evaluation."""
        steps = max(1, int(steps))
        logs = -(-steps // self.log_every) + (1 if (steps - 1) % self.log_every else 0)
        return logs * self.log_points + self.n_evals(steps) * self.eval_points


def cost(spec: Spec) -> TrainCost:
    """The cost of training `spec` (its model at the vocabulary its data will have; no corpus read)."""
    from looplab.model.counts import param_count, tokens_for_flops
    from looplab.model.flops import BACKWARD_FACTOR, step_flops, training_flops
    from looplab.model.memory import DEVICE_TYPES

    cfg = spec.resolved_model_config()
    batch, seq = spec.batch_size, cfg.seq_len
    tokens_per_step = batch * seq
    if spec.tokens is not None:
        steps: int | None = max(1, spec.tokens // tokens_per_step)
    elif spec.flops is not None:
        steps = tokens_for_flops(cfg, spec.flops, batch, seq) // tokens_per_step
    else:
        steps = None
    counts = [cfg.loops, *(n for n in spec.resolved_eval_loops(cfg) if n != cfg.loops)]
    eval_tokens = max(1, spec.eval_tokens // seq) * seq
    family = spec.family_pricing(cfg)
    if family is not None:  # its own FLOPs, all with autograd, no padded rounds
        per_token = grad_per_token = family.training_flops(cfg.loops)
        forward, padded, params = family.forward_flops, False, family.n_params
        if spec.flops is not None:  # whole steps at its own FLOPs, as the trainer counts them
            steps = max(1, int(spec.flops / per_token) // tokens_per_step)
    else:
        flops = training_flops(cfg, batch)
        per_token, grad_per_token = float(flops.total), float(flops.backward * (1 + 1 / BACKWARD_FACTOR))
        forward, padded = (lambda n: step_flops(cfg, n).forward), flops.padding_waste > 0
        params = param_count(cfg)["total"]
    priced = TrainCost(
        cfg=cfg,
        batch=batch,
        tokens_per_step=tokens_per_step,
        steps=steps,
        flops_per_token=float(per_token),
        grad_flops_per_token=float(grad_per_token),
        eval_flops=float(eval_tokens * sum(forward(n) for n in counts)),
        eval_every=spec.eval_every,
        ckpt_every=spec.ckpt_every,
        keep_checkpoints=spec.keep_checkpoints,
        log_every=spec.log_every,
        log_points=LOG_POINTS + (1 if padded else 0),
        eval_points=3 + len(spec.resolved_eval_loops(cfg)),
        calib_steps=spec.calib_steps,
        params=params,
        optimizer=spec.optimizer,
        compile=spec.compile,
        memory={},
        tokenizer=spec.data.tokenizer,
        family=family,
    )
    priced.memory.update({d: priced.memory_at(batch, d) for d in DEVICE_TYPES})
    return priced
