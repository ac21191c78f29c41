"""Loss spikes rewound (a train spec's `spike_rewind`): what a long run's owner does by hand, done exactly.

When a step's train loss is above `k` x the median of the last `window` losses (the health rule's test,
orchestrator/health.py `SpikeRule`, with the same defaults), the trainer goes back to its newest
checkpoint from *before* the spiked step (a checkpoint at step c holds the state after c steps; one at
the spiked step itself would replay it, so it takes an earlier one: why a job keeps at least two,
workers/artifacts.py), skips the data of the spiked step and goes on; after `max_rewinds` it fails with
the reason.

What is skipped is a *data step*: training step t reads the batch of data step `data_step(t, skipped)`,
the t-th one not skipped. The loop counts and initial states stay those of step t (they are drawn from
the step, not the data), so a run that never rewinds reads exactly what it read before rewinds existed.
The skipped data steps, the rewind count and the window of losses are trainer state, saved in every
checkpoint: a resume (or a rerun, or a kill at any point) replays the same rewinds, bit for bit on CPU.
The rows skipped are listed as data-row numbers, data step x batch_size + row: the n-th sequence the
run's sampler draws.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from looplab.model import fields
from looplab.model.errors import ConfigError
from looplab.workers.artifacts import resume_from

_KEYS = ("k", "window", "max_rewinds")
# Tests only, never a user option: "DATA_STEP:FACTOR" in LOOPLAB_TEST_SPIKE scales the loss of the batch
# read at that data step, a spike a test can place (a rewind skips that data step, so it fires once).
TEST_SPIKE = tuple(float(x) for x in os.environ.get("LOOPLAB_TEST_SPIKE", "-1:1").split(":"))


@dataclass(frozen=True)
class RewindRule:
    k: float = 3.0  # as the health rule's spike_k
    window: int = 50  # as its spike_window
    max_rewinds: int = 3  # then the run fails: a run that keeps spiking needs a person

    @classmethod
    def from_value(cls, name: str, v: Any) -> RewindRule | None:
        """None (off), or a mapping of k (> 1), window (>= 2) and max_rewinds (>= 1), any left out at
        its default; a bad one is refused naming the key."""
        if v is None:
            return None
        given = fields.mapping(name, v, "a mapping of k, window and max_rewinds, or null")
        unknown = sorted(set(given) - set(_KEYS))
        if unknown:
            raise ConfigError(f"{name}: unknown key {unknown[0]!r}; accepted: {', '.join(_KEYS)}")
        d = {**asdict(cls()), **given}
        return cls(
            k=fields.number(f"{name}.k", d["k"], lo=1, lo_open=True),
            window=fields.integer(f"{name}.window", d["window"], lo=2),
            max_rewinds=fields.integer(f"{name}.max_rewinds", d["max_rewinds"], lo=1),
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def spiked(self, window: list[float], loss: float) -> float | None:
        """The median `loss` is measured against when it is a spike (a full window needed), else None."""
        if len(window) < self.window:
            return None
        median = statistics.median(window[-self.window :])
        return median if median > 0 and loss > self.k * median else None


def data_step(step: int, skipped: list[int]) -> int:
    """The data step training step `step` reads: the step-th one (from 0) not in `skipped`."""
    d = step
    for s in sorted(skipped):
        if s <= d:
            d += 1
    return d


def rows_of(data_step_: int, batch_size: int) -> list[int]:
    """The data-row numbers of a data step."""
    return list(range(data_step_ * batch_size, (data_step_ + 1) * batch_size))


class SpikeError(RuntimeError):
    """A spike that cannot be rewound (its rewinds used up, or no checkpoint from before it): the job
    fails with this reason and without a retry (a retry would replay the same spikes: the queue reads
    it, orchestrator/task.py). Args (message, step, loss), so it survives pickling from a gang's rank."""

    def __init__(self, message: str, step: int | None = None, loss: float | None = None) -> None:
        super().__init__(message, step, loss)

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True)
class Rewind:
    """Where a spike sends the run: the checkpoint `path`, the data steps skipped from then on (the
    spiked one among them), the rewind's number `n`."""

    path: Path
    spiked_step: int
    loss: float
    median: float
    data_step: int
    skipped: list[int]
    n: int

    @classmethod
    def of(
        cls, rule: RewindRule | None, state: Any, artifact_dir: Path, step: int, loss: float
    ) -> Rewind | None:
        """The rewind step `step`'s `loss` calls for under `rule`, or None (no spike: the loss joins
        `state.loss_window`). SpikeError when the rewinds are used up or no checkpoint precedes it."""
        median = None if rule is None else rule.spiked(state.loss_window, loss)
        if median is None:
            if rule is not None:
                state.loss_window = [*state.loss_window, loss][-rule.window :]
            return None
        what = f"loss spike at step {step}: train_loss {loss:.4g} is {loss / median:.1f}x its median {median:.4g}"
        if state.rewinds >= rule.max_rewinds:
            raise SpikeError(
                f"{what}; {rule.max_rewinds} rewind(s) used (spike_rewind.max_rewinds)", step, loss
            )
        back = resume_from(artifact_dir, before_step=step)  # not one at `step`: it would replay the spike
        if back is None:
            raise SpikeError(f"{what}; no checkpoint from before it to go back to (ckpt_every)", step, loss)
        spiked = data_step(step, state.skipped_steps)
        return cls(
            back, step, loss, median, spiked, sorted([*state.skipped_steps, spiked]), state.rewinds + 1
        )

    def rows(self, batch_size: int) -> list[int]:
        return rows_of(self.data_step, batch_size)

    def message(self, batch_size: int) -> str:
        rows = self.rows(batch_size)
        return (
            f"loss spike at step {self.spiked_step}: train_loss {self.loss:.4g} is "
            f"{self.loss / self.median:.1f}x its median {self.median:.4g}; rewind {self.n}: back to "
            f"{self.path.name}, data rows {rows[0]}-{rows[-1]} (data step {self.data_step}) skipped"
        )
