"""What a train job costs, from its validated Spec alone: the FLOPs and step arithmetic a time estimate
needs and the peak memory on each device type (`cost(spec)`; the planner turns it into seconds).

Every count follows what the trainer runs (workers/trainer.py), with the Spec's own values (its defaults
included, never re-typed here): steps = max(1, tokens // tokens per step) for a token budget, the whole
steps of `model.counts.tokens_for_flops` for a FLOP budget, unknown for a time budget; an evaluation every
`eval_every` steps and at the last one, each a forward of the first `eval_tokens` validation tokens (whole
sequences, at least one) at the trained loop count and at each other count of `resolved_eval_loops`; a
checkpoint every `ckpt_every` steps and a final one. Memory: `model.memory.training_memory`.
Torch is imported when a cost is computed, not when this module is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from workers.train_spec import Spec

FLOAT_BYTES = 4


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
    calib_steps: int  # a time budget's calibration steps (on a throw-away copy)
    params: int
    optimizer: str
    compile: bool
    memory: dict[str, float]  # device type ("cpu", "cuda") -> peak bytes

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
        """What one checkpoint writes: the fp32 weights and two optimizer moments."""
        return 3.0 * FLOAT_BYTES * self.params


def cost(spec: Spec) -> TrainCost:
    """The cost of training `spec` (its model at the vocabulary its data will have; no corpus read)."""
    from model.counts import param_count, tokens_for_flops
    from model.flops import BACKWARD_FACTOR, step_flops, training_flops
    from model.memory import DEVICE_TYPES, training_memory

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
    flops = training_flops(cfg, batch)
    return TrainCost(
        cfg=cfg, batch=batch, tokens_per_step=tokens_per_step, steps=steps,
        flops_per_token=float(flops.total),
        grad_flops_per_token=float(flops.backward * (1 + 1 / BACKWARD_FACTOR)),
        eval_flops=float(eval_tokens * sum(step_flops(cfg, n).forward for n in counts)),
        eval_every=spec.eval_every, ckpt_every=spec.ckpt_every, calib_steps=spec.calib_steps,
        params=param_count(cfg)["total"], optimizer=spec.optimizer, compile=spec.compile,
        memory={d: training_memory(cfg, batch, d, spec.optimizer) for d in DEVICE_TYPES},
    )  # fmt: skip
