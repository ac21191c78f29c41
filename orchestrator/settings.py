"""The driver's settings read from the environment: heartbeat grace, priority aging, retry backoff and
the health rules. Apart from the scheduler (which imports Ray) so that the planner reads the very setting the
scheduler will use without starting anything.
"""

from __future__ import annotations

import json
import os
from typing import Any

from looplab.model import fields
from looplab.model.errors import ConfigError
from looplab.orchestrator import jobqueue
from looplab.orchestrator.health import HealthSettings


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
