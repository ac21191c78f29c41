"""This machine's calibration, measured once and cached (`calibrate`, `cached_calibration`), and what
`plan_grids` takes as one (`resolve_calibration`). The measuring is workers/calibrate.py's (`measure`,
runnable on a box with only torch: `python -m looplab.workers.calibrate --out FILE`, whose file `looplab plan
--calibration FILE` reads); here it adds the queue's own start-up (a driver starting Ray) and caches the
result per machine, device and thread count in `$LOOPLAB_CACHE/planner/calibration.json`, measured again
after a week (the machine, its load or the code may have changed) or when the format's version changes.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import time
from pathlib import Path

from looplab.workers.calibrate import DEFAULT_STARTUP_S, VERSION, Calibration, measure, subprocess_seconds

__all__ = ["DEFAULT_STARTUP_S", "Calibration", "cached_calibration", "calibrate", "resolve_calibration"]

CALIBRATION_FILE = "calibration.json"
CALIBRATION_MAX_AGE_S = 7 * 24 * 3600.0  # older calibrations are measured again


def _calibration_key(device: str, threads: int) -> str:
    return f"{socket.gethostname()}|{device}|{threads}"


def calibration_path() -> Path:
    from looplab.workers.data.corpus import cache_root

    return cache_root() / "planner" / CALIBRATION_FILE


def cached_calibration(device: str = "cpu", threads: int = 1) -> Calibration | None:
    """This machine's cached calibration for `device`, or None (never measures)."""
    try:
        saved = json.loads(calibration_path().read_text())
        entry = saved[_calibration_key(device, threads)]
        if not isinstance(entry, dict) or entry.get("version") != VERSION:
            return None  # an older format: measured again
        cal = Calibration.from_file(entry)
    except (OSError, ValueError, KeyError, TypeError):  # ConfigError is a ValueError
        return None
    if time.time() - cal.measured_at > CALIBRATION_MAX_AGE_S:
        return None  # stale: the machine, its load or the code may have changed
    return cal


def calibrate(
    device: str = "cpu", threads: int = 1, steps: int = 15, save: bool = True, driver: bool = True
) -> Calibration:
    """Measure this machine (`workers.calibrate.measure`: about 15 s on a CPU core) and, with `driver`,
    the start-up of a fresh Python that starts a local Ray as `looplab run` does; cache the result."""
    result = measure(device, threads=threads, steps=steps)
    if driver:
        result = dataclasses.replace(result, driver_start_s=subprocess_seconds(_DRIVER_START) or 0.0)
    if save:
        _save_calibration(result)
    return result


# what `looplab run` does before its first job: import the driver, start a local Ray (and stop it)
_DRIVER_START = (
    "import ray, looplab.orchestrator.scheduler; ray.init(address='local', num_cpus=1, num_gpus=0, "
    "include_dashboard=False, log_to_driver=False, configure_logging=False); ray.shutdown()"
)


def _save_calibration(cal: Calibration) -> None:
    path = calibration_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError):
        saved = {}
    saved[_calibration_key(cal.device, cal.threads)] = cal.to_file()
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(saved, indent=1))
    os.replace(tmp, path)


def resolve_calibration(calibration: Calibration | None | str, device: str) -> Calibration | None:
    """`calibration` as plan_grids takes it: "auto" (the cached one, else measure now and cache it),
    "cached" (never measure), "fresh" (measure now), a Calibration, or None (no FLOP model)."""
    if calibration == "auto":
        return cached_calibration(device) or calibrate(device)
    if calibration == "cached":
        return cached_calibration(device)
    if calibration == "fresh":
        return calibrate(device)
    if calibration is None or isinstance(calibration, Calibration):
        return calibration
    raise ValueError(
        f"calibration: expected 'auto', 'cached', 'fresh', a Calibration or None, got {calibration!r}"
    )
