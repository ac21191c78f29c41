"""Releasing the queue: a signal that means "this machine is going away, hand the work back".

A batch system ends an allocation at its time limit, or takes it for a job of higher priority. SLURM
warns first: `#SBATCH --signal=B:USR1@120` sends SIGUSR1 to the batch script two minutes before the
limit, and a preemption sends SIGTERM. Neither is a user's Ctrl-C (which stops and says "stopped",
exit 130): both are a normal event of a queue that lives longer than any one allocation. So a driver
told `--release-on USR1,TERM` answers such a signal with the path preemption already takes
(orchestrator/admission.py, `Scheduler._preempt`): every running attempt is asked to stop at its
next step boundary (the trainer checkpoints first), ends `preempted` (not a failure, costs none of
its attempts), a health event `preempted` with the reason ("slurm time limit ...") is stored for each,
its job goes back to the queue, nothing new is claimed, and the driver exits 0 once all have stopped.
The next allocation's driver claims the jobs and each resumes from its checkpoint, bit for bit.

A second release signal (SLURM's own SIGTERM at the limit after the warning) changes nothing: the
stop is under way. A Ctrl-C still means what it always meant.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterable
from typing import Any

from looplab.orchestrator.errors import ConfigError

# the signals a batch system sends before it takes the machine, as `--release-on` names them
SIGNALS = {"USR1": signal.SIGUSR1, "USR2": signal.SIGUSR2, "TERM": signal.SIGTERM, "HUP": signal.SIGHUP}
# why, as recorded in each released attempt's health event and the driver's output
WHY = {
    signal.SIGUSR1: "slurm time limit (SIGUSR1, sbatch --signal)",
    signal.SIGUSR2: "slurm time limit (SIGUSR2, sbatch --signal)",
    signal.SIGTERM: "allocation ending (SIGTERM: a preemption or the time limit)",
    signal.SIGHUP: "allocation ending (SIGHUP)",
}


def parse(names: str | Iterable[str] | None) -> tuple[signal.Signals, ...]:
    """`--release-on USR1,TERM` as signals; a name not in SIGNALS is refused naming the option."""
    if not names:
        return ()
    if isinstance(names, str):
        names = names.split(",")
    out = []
    for raw in names:
        if isinstance(raw, signal.Signals):
            raw = raw.name
        name = raw.strip().upper().removeprefix("SIG")
        if name not in SIGNALS:
            raise ConfigError(
                f"--release-on: {raw.strip()!r} is not a signal a driver releases on; accepted: "
                f"{', '.join(SIGNALS)} (comma-separated, e.g. USR1,TERM)"
            )
        if SIGNALS[name] not in out:
            out.append(SIGNALS[name])
    return tuple(out)


PENDING: list[int] = []  # release signals that came before a driver took them (`early`)


def early(signals: tuple[signal.Signals, ...]) -> None:
    """Hold a release signal that comes while the driver starts (Python's default for SIGUSR1 would
    end the process); the driver's `Release.install` acts on it at once."""
    for s in signals:
        signal.signal(s, lambda signum, _frame: PENDING.append(signum))


def ignore(signals: tuple[signal.Signals, ...]) -> None:
    """The driver is done: a release signal now has nothing to release. Ignored, not left to Python's exit,
    which puts back the default action of every signal it handled (for SIGUSR1: end the process, so the
    batch script, which repeats the signal until the driver is gone, would see it killed)."""
    for s in signals:
        signal.signal(s, signal.SIG_IGN)


class Release:
    """The release of one driver (a `Scheduler`): `why` once a release signal came, else None."""

    def __init__(self, sched: Any, signals: tuple[signal.Signals, ...]) -> None:
        self.sched, self.signals = sched, signals
        self.why: str | None = None
        self.old: dict[int, Any] = {}

    def install(self) -> None:
        """Take the release signals (main thread only, as any Python signal handler)."""
        for s in self.signals:
            self.old[s] = signal.signal(s, self.on_signal)
        if PENDING:
            self.on_signal(PENDING.pop(0), None)

    def restore(self) -> None:
        for s, h in self.old.items():
            signal.signal(s, h)
        self.old = {}

    def on_signal(self, signum: int, _frame: Any) -> None:
        if self.why is not None or self.sched.stopping:  # a stop is under way: this changes nothing
            return
        self.why = WHY[signal.Signals(signum)]
        release_all(self.sched, self.why)


def release_all(sched: Any, why: str) -> list[int]:
    """Ask every running attempt of `sched` to checkpoint and stop, each to end as preempted with `why`
    (its health event, recorded when it has stopped, says so: `Scheduler._collect`); the driver claims
    nothing more and ends when they have. The jobs asked."""
    sched.stopping = max(sched.stopping, 1)
    asked = []
    for job_id, _, _ in list(sched.running.values()):
        if job_id in sched.preemptions.asked:
            continue
        sched.preemptions.asked[job_id] = why
        sched.sink.request_stop.remote(job_id)
        asked.append(job_id)
    if sched.progress:
        print(
            f"{time.strftime('%H:%M:%S')} {why}: releasing {len(asked)} running job(s) {asked}; "
            "claiming nothing more",
            flush=True,
        )
    return asked
