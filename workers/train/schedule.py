"""The learning-rate schedule of a time-budget run, whose step count is only known approximately.

A token budget knows its step count up front and uses the fixed `workers.train.optim.lr_factor`. A time
budget (`time_s`) starts from a step count planned by a short calibration, and before every step
re-fits it to the time left at the recent step time (warm-up and a changing machine load change
throughput, so the first plan alone would land far from `time_s`).

Because the total may still move, the cooldown is tracked as a position: once it starts, each step
scales the previous factor by (T-1-s)/(T-s). When T stays put that telescopes to exactly the linear
ramp (T-1-s)/(T-1-s0) of `lr_factor`; when T moves the ramp follows it smoothly; and the factor is
0 on whatever turns out to be the last step. Pure Python, no torch.
"""

from __future__ import annotations

from typing import Any

# Step times kept for re-planning: the last `RECENT_MAX`, of which the mean of the last
# max(RECENT_MIN, min(RECENT_MAX, step // 4)) is used (once at least RECENT_MIN are known).
RECENT_MIN, RECENT_MAX = 3, 50


class TimeBudgetSchedule:
    """Step count and learning-rate factor of a run that must train for `time_s` seconds.

    Call `plan(step, train_s)` before each step (it returns the current total), `factor(step)` once
    per step in order, and `observe(step_seconds)` after each timed step. `state_dict()` holds what a
    checkpoint must keep (the total and the cooldown position); the recent step times are not part of
    it: a resumed attempt measures its own (its first steps warm up again), starting from the
    calibrated rate."""

    def __init__(
        self,
        time_s: float,
        total_steps: int,
        seconds_per_step: float,
        warmup_steps: int = 0,
        cooldown_frac: float = 0.5,
    ) -> None:
        self.time_s = time_s
        self.total_steps = total_steps
        self.calibrated_seconds_per_step = seconds_per_step
        self.warmup_steps = warmup_steps
        self.cooldown_frac = cooldown_frac
        self.in_cooldown = False
        self.cooldown_factor = 1.0  # the cooldown factor of `last_step` (1.0 before the cooldown)
        self.last_step = -1  # the step `factor` was last computed for
        self.recent: list[float] = []  # step times of this attempt, newest last

    def observe(self, step_seconds: float) -> None:
        self.recent = [*self.recent[-(RECENT_MAX - 1) :], step_seconds]

    def plan(self, step: int, train_s: float) -> int:
        """Re-fit the total step count to the time left (`time_s - train_s`) at the recent step time."""
        recent = self.recent[-max(RECENT_MIN, min(RECENT_MAX, step // 4)) :]
        if len(recent) >= RECENT_MIN:
            seconds_per_step = sum(recent) / len(recent)
        else:
            seconds_per_step = self.calibrated_seconds_per_step
        self.total_steps = step + max(1, round((self.time_s - train_s) / seconds_per_step))
        return self.total_steps

    def factor(self, step: int) -> float:
        """Learning-rate multiplier at `step`; steps must come in order (a repeat returns the same)."""
        total = self.total_steps
        if step != self.last_step:
            if step >= total - 1:
                cooldown = 0.0
            elif self.in_cooldown:
                cooldown = self.cooldown_factor * (total - 1 - step) / (total - step)
            else:
                self.in_cooldown = step >= total - max(1, round(self.cooldown_frac * total))
                cooldown = 1.0
            self.cooldown_factor, self.last_step = cooldown, step
        warm = min(1.0, (step + 1) / self.warmup_steps) if self.warmup_steps else 1.0
        return min(self.cooldown_factor, warm)

    def state_dict(self) -> dict[str, Any]:
        return {
            "total_steps": self.total_steps,
            "in_cooldown": self.in_cooldown,
            "cooldown_factor": self.cooldown_factor,
            "last_step": self.last_step,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.total_steps = int(state["total_steps"])
        self.in_cooldown = bool(state["in_cooldown"])
        self.cooldown_factor = float(state["cooldown_factor"])
        self.last_step = int(state["last_step"])
