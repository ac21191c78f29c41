"""The driver's settings: `DriverSettings`, one frozen value the scheduler runs under (as Ray's
`ScalingConfig`), and the defaults read from the environment (heartbeat grace, priority aging, retry backoff,
preemption cool-down, the health rules). Apart from the scheduler (which imports Ray) so that the planner
reads the very setting the scheduler will use without starting anything.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

from looplab.model import fields
from looplab.model.errors import ConfigError
from looplab.orchestrator import jobqueue, release
from looplab.orchestrator.gang_watch import DEFAULT_GANG_STALL_S
from looplab.orchestrator.health import HealthSettings
from looplab.orchestrator.ray_watch import DEFAULT_LOST_AFTER_S, DEFAULT_START_S


def _seconds(name: str, value: Any, positive: bool = False) -> float:
    """A number of seconds >= 0 (> 0 when `positive`), or a ConfigError naming `name`."""
    return float(fields.number(name, value, lo=0.0, lo_open=positive))


def _env_seconds(name: str, default: float, positive: bool = False) -> float:
    value = os.environ.get(name)
    if value is None:
        return default
    try:
        parsed: Any = float(value)
    except ValueError:
        parsed = value  # refused below, naming the variable
    return _seconds(f"${name}", parsed, positive)


def grace_seconds() -> float:
    """Heartbeat grace period for recovery ($LOOPLAB_HEARTBEAT_GRACE_S, default 60 s)."""
    return _env_seconds("LOOPLAB_HEARTBEAT_GRACE_S", jobqueue.DEFAULT_GRACE_S, positive=True)


def aging_seconds() -> float:
    """Seconds of waiting that add one to a job's effective priority ($LOOPLAB_AGING_S, default 300;
    > 0: it divides the waiting time)."""
    return _env_seconds("LOOPLAB_AGING_S", jobqueue.DEFAULT_AGING_S, positive=True)


def backoff_seconds() -> tuple[float, float]:
    """(base, cap) of the retry backoff ($LOOPLAB_RETRY_BACKOFF_S, $LOOPLAB_RETRY_BACKOFF_MAX_S)."""
    return (
        _env_seconds("LOOPLAB_RETRY_BACKOFF_S", jobqueue.DEFAULT_BACKOFF_S),
        _env_seconds("LOOPLAB_RETRY_BACKOFF_MAX_S", jobqueue.DEFAULT_BACKOFF_MAX_S),
    )


def ray_lost_seconds() -> float:
    """Seconds without the Ray head confirming the driver's node after which the driver releases its jobs
    and stops ($LOOPLAB_RAY_LOST_S, default 30; orchestrator/ray_watch.py)."""
    return _env_seconds("LOOPLAB_RAY_LOST_S", DEFAULT_LOST_AFTER_S, positive=True)


def ray_start_seconds() -> float:
    """Seconds a launched task may take to say it started before the driver ends its attempt and queues
    its job again ($LOOPLAB_RAY_START_S, default 300: a worker's first start imports torch, minutes on
    a loaded machine; orchestrator/ray_watch.py)."""
    return _env_seconds("LOOPLAB_RAY_START_S", DEFAULT_START_S, positive=True)


def gang_stall_seconds() -> float:
    """Seconds a gang may go without a step before its driver stops it whole and fails the attempt as the
    machine's fault, retried from its checkpoint ($LOOPLAB_GANG_STALL_S, default 600;
    orchestrator/gang_watch.py)."""
    return _env_seconds("LOOPLAB_GANG_STALL_S", DEFAULT_GANG_STALL_S, positive=True)


def preempt_cooldown_seconds() -> float:
    """Seconds after a job was preempted during which it is not preempted again ($LOOPLAB_PREEMPT_COOLDOWN_S,
    default 1800: a run stopped every few minutes by a stream of urgent jobs would redo its steps since
    the last checkpoint each time and never progress)."""
    return _env_seconds("LOOPLAB_PREEMPT_COOLDOWN_S", 1800.0)


def health_settings() -> HealthSettings:
    """The health rules' global settings: the defaults (orchestrator/health.py) with $LOOPLAB_HEALTH, a
    JSON object of the same keys as a grid's `health` field (which wins over it per key), applied."""
    value = os.environ.get("LOOPLAB_HEALTH")
    if not value:
        return HealthSettings()
    try:
        parsed = json.loads(value)
    except ValueError as e:
        raise ConfigError(
            f"$LOOPLAB_HEALTH: expected a JSON object of health settings, got {value!r} ({e})"
        ) from None
    return HealthSettings.of("$LOOPLAB_HEALTH", parsed)


@dataclasses.dataclass(frozen=True)
class DriverSettings:
    """How one driver (`looplab run`, `Queue.run`, `orchestrator.scheduler.Scheduler`) runs. A field left
    None takes its default from the environment when the value is made (`grace_s`, `aging_s` and the retry
    backoff: the functions above); every value is checked here, a bad one refused naming its field.

    - where: `address` (a Ray cluster to join; None starts a local one with `num_cpus` / `num_gpus`);
    - how much: `max_concurrent` jobs of this driver at once (None: as many as admission admits);
    - when to stop: `until_empty` (return once nothing is left to run) or on Ctrl-C / SIGTERM;
    - the queue's clocks: `grace_s` (a heartbeat older than this is another driver's lost job), `aging_s`
      (waiting seconds per point of effective priority), `retry_backoff_s` / `retry_backoff_max_s`,
      `preempt_cooldown_s`, `poll_s` (the loop's tick), `db_retry_s` / `db_retry_max_s` (the first and
      the longest wait between tries while the database is away), `ray_lost_s` (how long without its Ray
      head confirming its node before the driver releases its jobs and stops), `ray_start_s` (how long
      a launched task may take to say it started before its attempt is ended: orchestrator/ray_watch.py),
      `gang_stall_s` (how long a gang may go without a step before it is stopped whole: gang_watch.py);
    - what a person sees: `progress` lines, every `progress_every_s` the live view;
    - `release_on`: signals (names such as "USR1", or a comma-separated string) that hand every running job
      back and end the driver with 0, a batch system's time limit or preemption (orchestrator/release.py).
    """

    address: str | None = None
    num_cpus: int | None = None
    num_gpus: float | None = None
    until_empty: bool = False
    max_concurrent: int | None = None
    grace_s: float | None = None
    poll_s: float = 0.5
    progress: bool = True
    progress_every_s: float = 5.0
    aging_s: float | None = None
    retry_backoff_s: float | None = None
    retry_backoff_max_s: float | None = None
    preempt_cooldown_s: float | None = None
    db_retry_s: float = 1.0
    db_retry_max_s: float = 30.0
    release_on: Any = ()
    ray_lost_s: float | None = None
    ray_start_s: float | None = None
    gang_stall_s: float | None = None

    @classmethod
    def of(cls, base: DriverSettings | None = None, **changes: Any) -> DriverSettings:
        """`base` (or the defaults) with `changes` made; an unknown field is refused, naming it (a default
        read from the environment is read only for a field not given)."""
        names = [f.name for f in dataclasses.fields(cls)]
        for name in changes:
            if name not in names:
                hint = fields.did_you_mean(name, names)
                raise ConfigError(f"driver setting {name!r}: unknown{hint}; accepted: {', '.join(names)}")
        return cls(**changes) if base is None else dataclasses.replace(base, **changes)

    def __post_init__(self) -> None:
        base, cap = backoff_seconds()
        defaults = {
            "grace_s": (grace_seconds, True),
            "aging_s": (aging_seconds, True),
            "retry_backoff_s": (lambda: base, False),
            "retry_backoff_max_s": (lambda: cap, False),
            "preempt_cooldown_s": (preempt_cooldown_seconds, False),
            "ray_lost_s": (ray_lost_seconds, True),
            "ray_start_s": (ray_start_seconds, True),
            "gang_stall_s": (gang_stall_seconds, True),
        }
        for name, (default, positive) in defaults.items():
            value = getattr(self, name)
            object.__setattr__(self, name, default() if value is None else _seconds(name, value, positive))
        for name in ("poll_s", "progress_every_s", "db_retry_s", "db_retry_max_s"):
            object.__setattr__(self, name, _seconds(name, getattr(self, name), positive=True))
        object.__setattr__(self, "release_on", release.parse(self.release_on))
        if self.max_concurrent is not None:
            object.__setattr__(
                self, "max_concurrent", fields.integer("max_concurrent", self.max_concurrent, lo=1)
            )
