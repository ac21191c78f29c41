"""Who a driver is, and whether a driver recorded on a job is still alive.

A driver is identified by (host, pid, process start time). The host is the node name (`os.uname()`);
the start time tells a dead driver whose pid was reused by a later process (pid reuse) from the
driver itself. It is read from Linux's /proc (field 22 of /proc/PID/stat: clock ticks after boot,
plus the boot time `btime` of /proc/stat), the portable part of what psutil would do, without the
dependency. Where /proc is missing (macOS) the start time is None and only the pid is checked.

Liveness can only be judged on the driver's own host: `alive` is called by a driver for jobs whose
recorded host is its own. Two machines (or containers with their own pid namespaces) that report the
same node name would confuse it; give them distinct host names.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache

# Start times read twice for one process agree to a clock tick (1/100 s); a reused pid belongs to a
# process started later than the driver that held it, by at least that driver's lifetime.
START_TOLERANCE_S = 1.0


@dataclass(frozen=True)
class DriverId:
    host: str
    pid: int
    started: float | None  # the process's start time, epoch seconds (None: not readable here)


def this_driver() -> DriverId:
    """The identity of the calling process."""
    return DriverId(os.uname().nodename, os.getpid(), process_start_time(os.getpid()))


@cache
def _boot_time() -> float | None:
    try:
        with open("/proc/stat") as f:
            for line in f:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except OSError:
        return None
    return None


def _stat(pid: int) -> tuple[str, float] | None:
    """(state letter, start time in epoch seconds) of process `pid` from /proc, or None."""
    boot = _boot_time()
    if boot is None:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    # the command name (field 2) is in parentheses and may hold spaces: fields after its last ')'
    fields = stat[stat.rindex(")") + 2 :].split()
    # field 3 is the state, field 22 the start time in clock ticks after boot
    return fields[0], boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")


def process_start_time(pid: int) -> float | None:
    """When process `pid` started (epoch seconds), or None when it does not exist or /proc is missing."""
    stat = _stat(pid)
    return None if stat is None else stat[1]


def pid_exists(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        return True
    return True


def alive(pid: int, started: float | None) -> bool:
    """True when the process `pid` of this host exists and, where both start times are known, is the
    process that started at `started` (not a later process that reuses its pid)."""
    if not pid_exists(pid):
        return False
    stat = _stat(pid)
    if stat is None:
        return _boot_time() is None  # /proc missing: the pid is all there is to go by
    state, now_started = stat
    if state in "ZX":  # killed, not yet reaped by its parent: dead all the same
        return False
    return started is None or abs(now_started - started) <= START_TOLERANCE_S
