"""What a training run's checkpoint saves of its progress (`TrainerState`), and the error a run stops
with at a non-finite figure (`NonFiniteError`). Apart from the trainer (workers/train/trainer.py) so that the
queue and the tests read them without the trainer's imports.

h0 versions: how training draws each row's initial state; the trainer's module docstring says how
each draws it. A checkpoint records the version it was made with, and a resume keeps it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from looplab.model.errors import ConfigError
from looplab.workers.data.shards import SAMPLER_WITH_REPLACEMENT

__all__ = ["H0_VERSION", "NonFiniteError", "TrainerState"]

H0_VERSION = 1  # the h0 draw of new runs (workers/train/trainer.py's docstring); 0: the global RNG, per step


class NonFiniteError(FloatingPointError):
    """A NaN or infinite train loss or gradient norm at a step; args (key, step, value), so it survives
    pickling across processes and the queue reads which figure, where (orchestrator/task.py). Raised
    before the step's checkpoint: nothing after the non-finite step is saved."""

    def __str__(self) -> str:
        key, step, value = self.args
        return f"{key} is {value} at step {step}; lower lr or check the data"


@dataclass
class TrainerState:
    """Everything about a run's progress that a checkpoint saves and a resumed attempt restores."""

    step: int = 0  # steps done
    total_steps: int = 0  # planned steps (a time budget re-plans it before every step)
    train_seconds: float = 0.0
    eval_seconds: float = 0.0
    ckpt_seconds: float = 0.0
    compile_seconds: float = 0.0
    last_train_loss: float | None = None
    last_val_loss: float | None = None
    last_val_bpb: float | None = None
    step_of_last_val: int = -1  # `step` when the last evaluation ran
    calib_tokens_per_s: float | None = None  # time budget: the calibration's throughput
    schedule: dict[str, Any] | None = None  # time budget: TimeBudgetSchedule.state_dict()
    h0_version: int = H0_VERSION  # how training draws h0 (workers/train/trainer.py's docstring)
    # the batch sampler (workers.data.shards.window_offsets); a checkpoint from before it was recorded resumes
    # with the one it was made with, so the default is that one; a new run's is workers.data.shards.sampler_for
    sampler: int = SAMPLER_WITH_REPLACEMENT
    # What the steps computed, counted from each step's real forwards (`Trainer._count_step`): FLOPs of
    # the timed steps with the padded rounds (computed) and with each row's own rounds only (useful),
    # the training seconds they took, and over every step the recurrent rounds' FLOPs and their padding.
    # A checkpoint from before these were kept counts from its resume on.
    flops_computed: float = 0.0
    flops_useful: float = 0.0
    flops_seconds: float = 0.0
    round_flops: float = 0.0
    round_flops_padded: float = 0.0
    # Loss spikes rewound (workers/train/rewind.py): the data steps skipped, the rewinds made, and the last
    # train losses the spike test reads (saved, so a resume replays the same rewinds)
    skipped_steps: list[int] = dataclasses.field(default_factory=list)
    rewinds: int = 0
    loss_window: list[float] = dataclasses.field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainerState:
        """A saved state; one saved before `h0_version` existed drew h0 the old way (version 0)."""
        state = cls(**{"h0_version": 0, **d})
        if state.h0_version not in (0, H0_VERSION):
            raise ConfigError(f"checkpoint: h0_version {state.h0_version} is newer than this trainer")
        return state
