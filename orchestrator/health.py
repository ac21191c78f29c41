"""Health rules: what the queue watches in every run, as small pure pieces with stated defaults.

The rules run where a run's events are written (the writer for the curves, the driver for the step
clock), so no extra process watches the queue. Each rule's result is a `Finding` (the rule, the step,
the figure that tripped it, a level and a sentence), stored as a row of `health_events` with the job
and attempt (`store`). Why these rules and these defaults (docs/health.md):

- non-finite: a NaN or infinite train loss or gradient norm. A deterministic run replays the same steps into
  the same NaN, so the job fails at that step without further attempts unless the grid asks for them
  (`retry_non_finite`); the trainer raises before it can checkpoint the step.
- loss spike: train loss above `spike_k` x its running median over the last `spike_window` points (the median
  ignores the spike itself, a mean would follow it). One warning per episode.
- stall: a running attempt whose step has not advanced for max(`stall_s`, `stall_factor` x its median seconds
  per step): a warning, then at `stall_kill_factor` times that limit the attempt is killed and retried from
  its checkpoint (a stopped or deadlocked process never reaches a step boundary, but its reporter thread still
  heartbeats, so the heartbeat alone cannot tell).
- slowdown: tokens per second over the last `slow_window` intervals under `slow_fraction` of the run's own
  median rate: one warning per episode (it ends when the rate is back above the fraction).
- eval divergence: validation loss rising at each of the last `eval_count` evaluations and by more than
  `eval_noise` (relative) in all: a warning, once per episode.
- at chance: the train loss within `chance_tol` (relative) of ln V, the loss of a uniform guess over the
  vocabulary, at every point of the last `chance_window` steps, from step `chance_after` on: a collapsed run
  (its logits went flat) that would otherwise end "succeeded". It raises nothing, so no other rule sees it.
  Action `chance_action` (stop by default).
- plateau: the train loss's range over the last `plateau_window` steps under `plateau_rel` of its mean, from
  step `plateau_after` on: a loss that stopped moving (a minibatch loss of a learning run moves by percents
  from step to step). Action `plateau_action` (warn by default).
- unigram: the validation loss above the unigram cross-entropy of the run's training data (the loss of
  predicting each token by its frequency; computed once per preparation, workers/data/shards.py, and reported
  as the metric `unigram_xent`) at an evaluation from step `unigram_after` on: a run that has not learned even
  the token frequencies. Action `unigram_action` (warn by default).
A rule's action: `warn` (a warning; the run goes on), `stop` (the attempt is killed at once and the job fails,
not retried: a deterministic run would collapse again) or `hold` (the run is asked to stop at its next step
with a checkpoint, and the job fails, not retried, for a person to look at and `looplab retry`, which resumes
it from that checkpoint).

Torch-free and Ray-free: the writer, the driver, the CLI and the dashboard read the same names.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
import time
from collections import deque
from collections.abc import Callable
from enum import StrEnum
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection

from looplab.model import fields
from looplab.model.errors import ConfigError
from looplab.orchestrator.states import JobStatus
from looplab.workers.reporter import UNIGRAM_XENT


class Rule(StrEnum):
    """A health rule's name as stored in `health_events.rule` and shown to people."""

    NON_FINITE = "non_finite"
    LOSS_SPIKE = "loss_spike"
    STALL = "stall"
    SLOWDOWN = "slowdown"
    EVAL_DIVERGENCE = "eval_divergence"
    AT_CHANCE = "at_chance"  # the train loss sits at ln V: the run collapsed to a uniform guess
    PLATEAU = "plateau"  # the train loss stopped moving
    UNIGRAM = "unigram"  # the validation loss is above the training data's unigram baseline
    REWIND = "rewind"  # the trainer rewound a loss spike (its spec's spike_rewind)
    PREEMPTED = "preempted"  # the driver stopped a preemptible job for an urgent one (admission.py)
    UNSTARTED = "unstarted"  # Ray did not start the job's task, launch after launch (ray_watch.py)


class Level(StrEnum):
    """How bad a finding is: a warning lets the attempt go on; an error ended it."""

    WARNING = "warning"
    ERROR = "error"


# the figures the non-finite rule checks (a NaN elsewhere, e.g. in an MFU estimate, is no divergence)
NON_FINITE_KEYS = ("train_loss", "grad_norm", "val_loss")
TRAIN_LOSS, VAL_LOSS = "train_loss", "val_loss"
# what a rule that does not raise does when it trips (HealthSettings.chance_action, plateau_action)
WARN, STOP, HOLD = "warn", "stop", "hold"
ACTIONS = (WARN, STOP, HOLD)
# How the error of a job a `hold` stopped opens (`Finding.error`), and its state as `looplab status`
# shows it: its stored state is failed (states are the queue's, orchestrator/states.py), which alone
# would not tell it from a crash.
HELD = "held"


@dataclasses.dataclass(frozen=True)
class HealthSettings:
    """Every rule's knobs, with the defaults docs/health.md justifies. Set globally ($LOOPLAB_HEALTH, a
    JSON object of these keys) and per grid (`Grid(..., health={...})`, which wins per key)."""

    spike_k: float = 3.0
    spike_window: int = 50
    stall_s: float = 900.0
    stall_factor: float = 20.0
    stall_kill_factor: float = 2.0
    slow_fraction: float = 0.5
    slow_window: int = 20
    eval_count: int = 3
    eval_noise: float = 0.01
    retry_non_finite: bool = False
    # at chance: a run stuck at ln V for 50 steps after step 20 is no run that learns (a healthy one
    # leaves ln V within its first few steps, down to the corpus's unigram entropy and below)
    chance_tol: float = 0.01
    chance_window: int = 50
    chance_after: int = 20
    chance_action: str = STOP
    # plateau: a minibatch loss that moves by under 0.1 % of itself for 50 steps, after step 100
    plateau_rel: float = 1e-3
    plateau_window: int = 50
    plateau_after: int = 100
    plateau_action: str = WARN
    # unigram: a val_loss above the data's unigram cross-entropy at step 100 or later (the demo's byte
    # runs are under it from their first evaluation, step 19: 2.8 against 3.30 nats; docs/health.md)
    unigram_after: int = 100
    unigram_action: str = WARN
    # a program error (config, shape, type) repeats on every attempt: not retried unless asked
    retry_program_errors: bool = False

    @classmethod
    def of(cls, where: str, values: Any, base: HealthSettings | None = None) -> HealthSettings:
        """`base` (default: the defaults) with `values` (a mapping of these keys) checked and applied; a
        ConfigError names `where`.key and what it accepts."""
        given = fields.known_keys(where, fields.mapping(where, values, "a dict of health settings"), cls)
        checked: dict[str, Any] = {}
        for key, value in given.items():
            name = f"{where}.{key}"
            if key in ("retry_non_finite", "retry_program_errors"):
                checked[key] = fields.boolean(name, value)
            elif key in ("chance_action", "plateau_action", "unigram_action"):
                checked[key] = fields.choice(name, value, ACTIONS)
            elif key in ("chance_window", "plateau_window") or key.endswith("_after"):
                checked[key] = fields.integer(name, value, lo=0 if key.endswith("_after") else 1)
            elif key in ("spike_window", "slow_window", "eval_count"):
                checked[key] = fields.integer(name, value, lo=2 if key != "eval_count" else 1)
            elif key in ("spike_k", "stall_kill_factor"):
                checked[key] = fields.number(name, value, lo=1.0, lo_open=True)
            elif key in ("slow_fraction", "chance_tol", "plateau_rel"):
                checked[key] = fields.number(name, value, lo=0.0, lo_open=True, hi=1.0, hi_open=True)
            else:
                checked[key] = fields.number(name, value, lo=0.0, lo_open=key != "eval_noise")
        return dataclasses.replace(base or cls(), **checked)

    def stall_limit(self, median_step_s: float | None) -> float:
        """Seconds without a step advance that count as a stall."""
        return max(self.stall_s, self.stall_factor * (median_step_s or 0.0))


def check_grid_health(where: str, values: Any) -> dict[str, Any] | None:
    """A grid's `health` field, checked (the keys it sets, as given), or None for no field."""
    if values is None:
        return None
    HealthSettings.of(f"{where}: health", values)
    return dict(values)


@dataclasses.dataclass(frozen=True)
class Finding:
    """One rule's result: at `step`, the figure `value` of metric `key` tripped `rule`."""

    rule: Rule
    level: Level
    step: int | None
    key: str | None
    value: float | None
    message: str
    action: str | None = None  # a rule that does not raise: what the driver does (WARN, STOP, HOLD)

    @property
    def stops(self) -> bool:
        return self.action in (STOP, HOLD)

    def error(self, job_id: int) -> str:
        """The error of job `job_id` when this finding stopped its run: the message, and for a hold first
        the word HELD, the step and the one command that resumes it from its checkpoint, so every view
        that cuts an error short (`looplab status`, the Queue page) still says so (`is_held`)."""
        if self.action != HOLD:
            return self.message
        resume = f"`looplab retry {job_id}` resumes it from its checkpoint"
        return f"{HELD} for a person at step {self.step}: {resume}; {self.message}"


def shown_states(statuses, errors) -> list[str]:
    """Each job's state as a person reads it (`looplab status`, the Queue page): `held` for a failed job
    a hold stopped for a person (`is_held`), its own state otherwise."""
    return [HELD if is_held(s, e) else s for s, e in zip(statuses, errors)]


def is_held(status: str, error: object) -> bool:
    """Whether a job of `status` with `error` is one a `hold` stopped (`Finding.error`), not a failure."""
    return (
        status == JobStatus.FAILED
        and isinstance(error, str)
        and error.startswith(f"{HELD} for a person at step ")
    )


def non_finite(key: str, step: int, value: float) -> Finding | None:
    """A NaN or infinite value of a figure in NON_FINITE_KEYS."""
    if key not in NON_FINITE_KEYS or math.isfinite(value):
        return None
    return Finding(
        Rule.NON_FINITE,
        Level.ERROR,
        step,
        key,
        value,
        f"{key} is {value} at step {step}: the run diverged (lower lr, or check the data)",
    )


def rewound(p: dict[str, Any]) -> Finding | None:
    """The finding of a `rewound` event (workers/reporter.py); None for a payload the writer refuses."""
    if not all(isinstance(p.get(k), int) for k in ("step", "spiked_step", "n")) or not isinstance(
        p.get("rows"), list
    ):
        return None
    rows = p["rows"]
    shown = ", ".join(str(r) for r in rows[:8]) + (f" and {len(rows) - 8} more" if len(rows) > 8 else "")
    return Finding(
        Rule.REWIND,
        Level.WARNING,
        p["spiked_step"],
        TRAIN_LOSS,
        None,
        f"loss spike at step {p['spiked_step']} rewound (rewind {p['n']}): back to the checkpoint at step "
        f"{p['step']}, {len(rows)} data row(s) skipped ({shown})",
    )


def _onset(now: bool, before: bool, what: tuple, say: Callable[[], str]) -> Finding | None:
    """A warning rule's finding as its episode begins (`now` and not `before`): `what` is its (rule,
    step, key, value), `say` writes the message (called only then: its figures exist only inside an
    episode); None otherwise, so a rule warns once per episode."""
    if not now or before:
        return None
    rule, step, key, value = what
    return Finding(rule, Level.WARNING, step, key, value, say())


class SpikeRule:
    """Train loss above k x the running median of the last n points; one warning per episode."""

    def __init__(self, k: float, window: int) -> None:
        self.k, self.points, self.spiking = k, deque(maxlen=window), False

    def observe(self, step: int, value: float) -> Finding | None:
        full = len(self.points) == self.points.maxlen
        median = statistics.median(self.points) if full else None
        spike = median is not None and median > 0 and value > self.k * median
        found = _onset(
            spike,
            self.spiking,
            (Rule.LOSS_SPIKE, step, TRAIN_LOSS, value),
            lambda: (
                f"train_loss {value:.4g} at step {step} is {value / median:.1f}x its running median "
                f"{median:.4g} (limit {self.k:g}x over {self.points.maxlen} points)"
            ),
        )
        self.spiking = spike
        if not spike:  # a spike would lift the median it is measured against
            self.points.append(value)
        return found


class SlowdownRule:
    """Tokens/s over the last `window` intervals under `fraction` of the run's own median interval rate;
    one warning per episode. Fed (tokens, wall_s) of successive train-loss points."""

    def __init__(self, fraction: float, window: int) -> None:
        self.fraction, self.window = fraction, window
        # the run's own rate: the median of its recent intervals (bounded: a curve has 10^5 points)
        self.rates: deque[float] = deque(maxlen=max(500, 10 * window))
        self.recent: deque[tuple[int, float]] = deque(maxlen=window + 1)
        self.slow = False
        self.median: float | None = None  # refreshed every `window` intervals: per point it would cost
        self.since_median = 0  # the writer more than the rest of the rules together

    def observe(self, step: int, tokens: int | None, wall_s: float | None) -> Finding | None:
        if tokens is None or wall_s is None:
            return None
        if self.recent and (wall_s <= self.recent[-1][1] or tokens <= self.recent[-1][0]):
            return None  # no time or no tokens passed (a resumed attempt's first point): no rate
        if self.recent:
            self.rates.append((tokens - self.recent[-1][0]) / (wall_s - self.recent[-1][1]))
            self.since_median += 1
        self.recent.append((tokens, wall_s))
        if len(self.rates) < 2 * self.window:  # the median needs a history longer than the window
            return None
        if self.median is None or self.since_median >= self.window:
            self.median, self.since_median = statistics.median(self.rates), 0
        (t0, w0), (t1, w1) = self.recent[0], self.recent[-1]
        rate, median = (t1 - t0) / (w1 - w0), self.median
        slow = rate < self.fraction * median
        found = _onset(
            slow,
            self.slow,
            (Rule.SLOWDOWN, step, "tokens_per_s", rate),
            lambda: (
                f"{rate:.4g} tokens/s over the last {self.window} intervals at step {step}, under "
                f"{self.fraction:g} x the run's median {median:.4g}"
            ),
        )
        self.slow = slow
        return found


class EvalDivergenceRule:
    """Validation loss rising at each of the last `count` evaluations, by more than `noise` (relative to
    where the rise began) in all; once per episode."""

    def __init__(self, count: int, noise: float) -> None:
        self.count, self.noise = count, noise
        self.values: deque[float] = deque(maxlen=count + 1)
        self.warned = False

    def observe(self, step: int, value: float) -> Finding | None:
        self.values.append(value)
        v = list(self.values)
        rising = len(v) == self.count + 1 and all(b > a for a, b in zip(v, v[1:]))
        diverging = rising and v[-1] - v[0] > self.noise * abs(v[0])
        found = _onset(
            diverging,
            self.warned,
            (Rule.EVAL_DIVERGENCE, step, VAL_LOSS, value),
            lambda: (
                f"val_loss rose at each of the last {self.count} evaluations, {v[0]:.4g} -> {v[-1]:.4g} "
                f"at step {step} (noise floor {self.noise:.2%})"
            ),
        )
        if not rising or v[-1] < v[-2]:
            self.warned = False
        self.warned = self.warned or diverging
        return found


def _acted(action: str) -> tuple[Level, str]:
    """The level of a finding with `action`, and what the sentence says happens."""
    if action == STOP:
        return Level.ERROR, "the run is stopped and the job failed, not retried"
    if action == HOLD:
        return (
            Level.ERROR,
            f"the run stops at its next step with a checkpoint, {HELD} for a person (looplab retry)",
        )
    return Level.WARNING, "a warning; the run goes on"


class ChanceRule:
    """The train loss within `tol` x ln V of ln V (a uniform guess over V tokens) at every point of the
    last `window` steps, from step `after` on: the run collapsed. Once per attempt."""

    def __init__(self, vocab: int | None, tol: float, window: int, after: int, action: str) -> None:
        self.chance = math.log(vocab) if vocab and vocab > 1 else None
        self.tol, self.window, self.after, self.action = tol, window, after, action
        self.since: int | None = None  # the step the current run of points at chance began
        self.done = False

    def near(self, value: float) -> bool:
        return self.chance is not None and abs(value - self.chance) <= self.tol * self.chance

    def observe(self, step: int, value: float) -> Finding | None:
        if not self.near(value):
            self.since = None
            return None
        self.since = step if self.since is None else self.since
        if self.done or step < self.after or step - self.since < self.window:
            return None
        self.done = True
        level, then = _acted(self.action)
        return Finding(
            Rule.AT_CHANCE,
            level,
            step,
            TRAIN_LOSS,
            value,
            f"train_loss {value:.6g} at step {step} has been at chance, ln V = {self.chance:.6g} (within "
            f"{self.tol:.0%}), since step {self.since}: the run collapsed to a uniform guess over its "
            f"vocabulary (lower lr?); {then}",
            self.action,
        )


class PlateauRule:
    """The train loss's range over the last `window` steps under `rel` of its mean, from step `after`
    on: the loss stopped moving. Once per episode; a loss at chance is the chance rule's."""

    def __init__(self, rel: float, window: int, after: int, action: str) -> None:
        self.rel, self.window, self.after, self.action = rel, window, after, action
        self.points: deque[tuple[int, float]] = deque()
        self.flat = False

    def observe(self, step: int, value: float, at_chance: bool) -> Finding | None:
        self.points.append((step, value))
        while len(self.points) > 2 and step - self.points[1][0] >= self.window:
            self.points.popleft()
        span = step - self.points[0][0]
        values = [v for _, v in self.points]
        mean = statistics.fmean(values)
        moved = max(values) - min(values)
        flat = span >= self.window and step >= self.after and mean != 0 and moved < self.rel * abs(mean)
        found = None
        if flat and not self.flat and not at_chance:
            level, then = _acted(self.action)
            found = Finding(
                Rule.PLATEAU,
                level,
                step,
                TRAIN_LOSS,
                value,
                f"train_loss moved by {moved:.3g} ({moved / abs(mean):.2e} of its mean {mean:.6g}) over "
                f"steps {self.points[0][0]}-{step}, under {self.rel:g}: the loss stopped moving; {then}",
                self.action,
            )
        self.flat = flat
        return found


class UnigramRule:
    """A val_loss above the training data's unigram cross-entropy (`baseline`, None until the run reports
    it) at an evaluation from step `after` on. Once per episode (it ends when the loss is under it)."""

    def __init__(self, after: int, action: str) -> None:
        self.after, self.action = after, action
        self.baseline: float | None = None
        self.above = False

    def observe(self, step: int, value: float) -> Finding | None:
        if self.baseline is None or step < self.after:
            return None
        above, was = value > self.baseline, self.above
        self.above = above
        if not above or was:
            return None
        level, then = _acted(self.action)
        return Finding(
            Rule.UNIGRAM,
            level,
            step,
            VAL_LOSS,
            value,
            f"val_loss {value:.4g} at step {step} is above the unigram baseline {self.baseline:.4g} (the "
            f"cross-entropy of predicting each token by its frequency in the training data): the run has "
            f"not learned even the token frequencies (lr, data or model?); {then}",
            self.action,
        )


class RunHealth:
    """The curve rules of one attempt of one job, fed its metric points in order; a point at or before
    the last one seen of its key (a replayed spool, a batch written again) is not counted twice."""

    def __init__(self, settings: HealthSettings, vocab: int | None = None) -> None:
        s = self.settings = settings
        self.spike = SpikeRule(s.spike_k, s.spike_window)
        self.slowdown = SlowdownRule(s.slow_fraction, s.slow_window)
        self.divergence = EvalDivergenceRule(s.eval_count, s.eval_noise)
        self.chance = ChanceRule(vocab, s.chance_tol, s.chance_window, s.chance_after, s.chance_action)
        self.plateau = PlateauRule(s.plateau_rel, s.plateau_window, s.plateau_after, s.plateau_action)
        self.unigram = UnigramRule(s.unigram_after, s.unigram_action)
        self.last_step: dict[str, int] = {}
        self.rearmed: set[Rule] = set()  # stops the replay of a resumed attempt found again

    def rearm(self, finding: Finding) -> None:
        """`finding`, a stop, replays one the job has: armed anew once the attempt resumes (`fresh`)."""
        self.rearmed.add(finding.rule)

    def fresh(self) -> None:
        """The attempt resumed: windows count its new points (the replayed were judged); replayed stops re-arm."""
        self.chance.since = None
        self.plateau.points.clear()
        self.chance.done = self.chance.done and Rule.AT_CHANCE not in self.rearmed
        self.plateau.flat = self.plateau.flat and Rule.PLATEAU not in self.rearmed
        self.unigram.above = self.unigram.above and Rule.UNIGRAM not in self.rearmed

    def observe(self, key: str, step: int, value: float, tokens=None, wall_s=None) -> list[Finding]:
        if step <= self.last_step.get(key, -1):
            return []
        self.last_step[key] = step
        bad = non_finite(key, step, value)
        if bad is not None:
            return [bad]
        found: list[Finding | None] = []
        if key == TRAIN_LOSS:
            found += [self.spike.observe(step, value), self.slowdown.observe(step, tokens, wall_s)]
            found.append(self.chance.observe(step, value))
            found.append(self.plateau.observe(step, value, self.chance.since is not None))
        elif key == VAL_LOSS:
            found += [self.divergence.observe(step, value), self.unigram.observe(step, value)]
        elif key == UNIGRAM_XENT:
            self.unigram.baseline = value
        return [f for f in found if f is not None]


class StepClock:
    """When an attempt's step last advanced (on the driver's clock) and its median seconds per step: the
    stall rule. The clock starts at the attempt's first step: before it a run may build its data or
    compile for a long time, which is no stall.

    An attempt's progress comes in phases, each with its own total (a train job prepares its data first,
    counting bytes, then counts steps): a new total starts the clock again, so a phase is never judged by
    another's count (with one clock, the training steps after a fresh data preparation, all below its byte
    count, were ignored and a healthy run was called stalled after `stall_s`), and a phase that reached its
    total stops the clock until the next one reports."""

    def __init__(self, settings: HealthSettings) -> None:
        self.settings = settings
        self.step: int | None = None
        self.total: float | None = None
        self.at = self.made = 0.0
        self.per_step: deque[float] = deque(maxlen=200)
        self.warned = False

    def advance(self, step: int, now: float, ts: float | None = None, total: float | None = None) -> None:
        """The attempt reported `step` done (of `total`, its phase's), seen at `now` (the driver's clock) and
        made at `ts` (the worker's: step times come from one clock's differences; the driver drains in
        batches)."""
        if total != self.total:  # a new phase: its own count and its own pace
            self.restart()
            self.per_step.clear()
            self.total = total
        if self.step is not None and step <= self.step:
            return
        made = now if ts is None else ts
        if self.step is not None and made > self.made:
            self.per_step.append((made - self.made) / (step - self.step))
        self.step, self.at, self.made, self.warned = step, now, made, False
        if total is not None and step >= total:  # the phase is done: what follows (building the model,
            self.step = None  # compiling, the final evaluation) is no stall; the next phase starts it again

    def restart(self) -> None:
        """The attempt (re)started or resumed from a checkpoint: the clock waits for its next step (points
        replayed from an earlier attempt's spool, or a restore, are no progress of this one)."""
        self.step, self.warned = None, False

    def limit(self) -> float:
        return self.settings.stall_limit(statistics.median(self.per_step) if self.per_step else None)

    def check(self, now: float) -> tuple[Finding | None, bool]:
        """(a warning to record, whether to kill the attempt) at time `now`."""
        if self.step is None:
            return None, False
        idle, limit = now - self.at, self.limit()
        kill = idle >= limit * self.settings.stall_kill_factor
        if idle < limit or (self.warned and not kill):
            return None, False
        self.warned = True
        what = "killed to be retried from its checkpoint" if kill else "a warning"
        finding = Finding(
            Rule.STALL,
            Level.ERROR if kill else Level.WARNING,
            self.step,
            "step",
            idle,
            f"no step after step {self.step} for {idle:.0f} s (limit {limit:.0f} s): {what}",
        )
        return finding, kill


# ---------------------------------------------------------------- settings of a job, storage


def grid_settings(conn: Connection, job_id: int, base: HealthSettings) -> HealthSettings:
    """`base` with the `health` field of job `job_id`'s grid applied (base when it has none)."""
    from looplab.orchestrator.schema import GridRow, Job

    spec = conn.execute(
        sa.select(GridRow.spec).join(Job, Job.grid_id == GridRow.id).where(Job.id == job_id)
    ).scalar()
    health = json.loads(spec).get("health") if spec else None
    if health is None:
        return base
    try:
        return HealthSettings.of("grid health", health, base)
    except ConfigError:  # checked at submission; a row edited by hand falls back to the global settings
        return base


def job_vocab(conn: Connection, job_id: int) -> int | None:
    """The vocabulary size job `job_id` trains with (filled at submission; None for a job that trains
    nothing): the chance rule's ln V."""
    from looplab.orchestrator.schema import Job

    return conn.execute(sa.select(Job.vocab_size).where(Job.id == job_id)).scalar()


def store(
    conn: Connection, job_id: int, attempt: int | None, finding: Finding, ts: float | None = None
) -> int | None:
    """One finding as a `health_events` row; returns its id, or None when the job has it already (the
    same rule, level, figure key and step: a point replayed from the spool by a later attempt, or a
    finding given twice, is one event). A preemption is the driver's, never replayed: each attempt's is
    its own event, though two attempts may stop at the same checkpoint's step."""
    from looplab.orchestrator.schema import HealthEvent

    t = HealthEvent.__table__
    if finding.step is not None:
        same = (t.c.job_id == job_id) & (t.c.rule == str(finding.rule)) & (t.c.step == finding.step)
        same &= (t.c.level == str(finding.level)) & (
            t.c.key.is_(None) if finding.key is None else t.c.key == finding.key
        )
        if finding.rule == Rule.PREEMPTED:
            same &= t.c.attempt.is_(None) if attempt is None else t.c.attempt == attempt
        if conn.execute(sa.select(t.c.id).where(same).limit(1)).first() is not None:
            return None
    value = finding.value
    return conn.execute(
        t.insert().values(
            job_id=job_id,
            attempt=attempt,
            ts=time.time() if ts is None else ts,
            step=finding.step,
            rule=str(finding.rule),
            level=str(finding.level),
            key=finding.key,
            value=value if value is None or math.isfinite(value) else None,
            figure=None if value is None else repr(value),
            message=finding.message,
        )
    ).inserted_primary_key[0]


class HealthWatch:
    """The writer's side of the rules: a `RunHealth` per job (a new one for each attempt), with the
    settings of the job's grid over `base`, and each finding stored (and handed to `on_finding`, e.g. the
    alert outbox) in the writer's transaction. The driver owns one for its lifetime; after a restart the
    rules start afresh (their windows refill within `spike_window` points)."""

    def __init__(self, base: HealthSettings | None = None, on_finding=None) -> None:
        self.base = base or HealthSettings()
        self.on_finding = on_finding  # (conn, job_id, attempt, finding) -> None
        self.runs: dict[int, tuple[int, RunHealth]] = {}
        self._settings: dict[int, HealthSettings] = {}
        # findings whose action stops the run (STOP, HOLD), for the driver to act on (`take_stops`)
        self.stops: list[tuple[int, int | None, Finding]] = []

    def settings(self, conn: Connection, job_id: int) -> HealthSettings:
        if job_id not in self._settings:
            self._settings[job_id] = grid_settings(conn, job_id, self.base)
        return self._settings[job_id]

    def take_stops(self) -> list[tuple[int, int | None, Finding]]:
        """The (job, attempt, finding) whose rule's action stops its run, found since the last call."""
        stops, self.stops = self.stops, []
        return stops

    def observe(self, conn: Connection, job_id: int, attempt: int, events: list[Any]) -> list[Finding]:
        """Feed the metric events of one job's batch (reported under `attempt`) to its rules; store and
        return the findings (a rewind the trainer made is one too: it shows and alerts as a spike does)."""
        found = [rewound(e.payload) for e in events if e.kind == "rewound" and isinstance(e.payload, dict)]
        found = [f for f in found if f is not None]
        for finding in found:
            self.record(conn, job_id, attempt, finding)
        points = [e for e in events if e.kind in ("metric", "resumed") and isinstance(e.payload, dict)]
        if not points:
            return found
        held = self.runs.get(job_id)
        if held is None or held[0] != attempt:
            run = RunHealth(self.settings(conn, job_id), job_vocab(conn, job_id))
            held = self.runs[job_id] = (attempt, run)
        for e in points:
            p = e.payload
            if e.kind == "resumed":  # after the replay of the points before its checkpoint
                held[1].fresh()
                continue
            if not (isinstance(p.get("key"), str) and isinstance(p.get("step"), int)):
                continue  # the writer refuses it with the reason
            if not isinstance(p.get("value"), int | float) or isinstance(p.get("value"), bool):
                continue
            for finding in held[1].observe(
                p["key"], p["step"], float(p["value"]), p.get("tokens"), p.get("wall_s")
            ):
                if not self.record(conn, job_id, attempt, finding) and finding.stops:
                    held[1].rearm(finding)  # a replay of a stop found before: the resumed run is watched on
                found.append(finding)
        return found

    def record(self, conn: Connection, job_id: int, attempt: int | None, finding: Finding, ts=None) -> bool:
        """Store `finding` and alert it; False (nothing done) when the job has it already (`store`)."""
        if store(conn, job_id, attempt, finding, ts) is None:
            return False
        if finding.stops:
            self.stops.append((job_id, attempt, finding))
        if self.on_finding is not None:
            self.on_finding(conn, job_id, attempt, finding)
        return True

    def forget(self, job_id: int) -> None:
        """A job finished: its rules' state goes."""
        self.runs.pop(job_id, None)
        self._settings.pop(job_id, None)
