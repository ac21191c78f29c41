"""What the kinds' cost functions return for a job made of forward passes without autograd (a depth
sweep, an eval, a decode benchmark): its FLOPs, its peak memory per device type, and what a time model
needs besides (the width whose forward rate applies; a decode benchmark's step count, the layer
applications of one step, each of which pays a fixed cost, and per cell its steps with the FLOPs and the
bytes each reads, which bound a step on a GPU by compute or by memory bandwidth). A train job's arithmetic is a `TrainCost` (computed by workers/train/cost.py); a follow-up's cost
function reads the one of the run it follows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

FLOAT_BYTES = 4  # a weight of the final file (fp32)


@dataclass(frozen=True)
class ForwardCost:
    flops: float  # forward FLOPs of every pass the job runs
    memory: dict[str, float]  # device type ("cpu", "cuda") -> peak bytes
    d_model: int
    decode_steps: int = 0
    applications: int = 0  # layer applications per decode step
    # device type -> per decode cell (steps, FLOPs per step, bytes read and written per step)
    cells: dict[str, tuple[tuple[int, float, float], ...]] = field(default_factory=dict)


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
