"""What a job's log (`job_logs`, `looplab logs N`) holds beyond the lines a job writes itself with
`reporter.log`: its progress and the warnings raised while it runs. (The error that ended an attempt is
stored there by `jobqueue.finish`, attempt by attempt.)

Before, a job's log held what its code chose to say (often two start lines). Now, on the worker, around
every attempt (`orchestrator/task.py run_attempt`):
- progress becomes a line at each tenth of the way (`progress 40% (48/120), eta 12 s`): the log shows
  how far an attempt got and how fast, without a line per step;
- a Python warning (`warnings.warn`, e.g. from torch) and a WARNING-or-worse record of the `logging`
  module, raised in the thread that runs the job, become WARNING/ERROR lines (a record a job already
  reported itself carries `extra={REPORTED: True}` and is not repeated). A Python warning is said once
  per place in the code per worker process (Python's default filter), not once per step.
The lines go through the reporter, like the job's own: the driver writes them, the worker never opens
the database.
"""

from __future__ import annotations

import logging
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from looplab.workers.reporter import REPORTED

PROGRESS_STEPS = 10


class ProgressLines:
    """Progress events -> a log line each time the attempt passes another tenth of its total."""

    def __init__(self) -> None:
        self._passed = 0  # tenths already said

    def line(self, done: float, total: float, eta_s: float | None) -> str | None:
        if not total or total <= 0:
            return None
        tenth = min(PROGRESS_STEPS, int(PROGRESS_STEPS * done / total))
        if tenth <= self._passed:
            return None
        self._passed = tenth
        eta = "" if eta_s is None or tenth == PROGRESS_STEPS else f", eta {eta_s:.0f} s"
        return f"progress {100 * tenth // PROGRESS_STEPS}% ({done:g}/{total:g}){eta}"


class _ToJobLog(logging.Handler):
    def __init__(self, rep: Any, thread: int) -> None:
        super().__init__(logging.WARNING)
        self.rep, self.thread = rep, thread

    def emit(self, record: logging.LogRecord) -> None:
        if record.thread != self.thread or getattr(record, REPORTED, False):
            return
        try:
            self.rep.log(f"{record.name}: {record.getMessage()}", record.levelname)
        except Exception:  # a log line must never fail the job
            self.handleError(record)


@contextmanager
def captured(rep: Any) -> Iterator[None]:
    """Within: the running thread's warnings and WARNING+ logging records go to `rep.log` too."""
    handler = _ToJobLog(rep, threading.get_ident())
    root = logging.getLogger()
    root.addHandler(handler)
    shown = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        if threading.get_ident() == handler.thread:
            rep.log(f"{category.__name__}: {message} ({filename}:{lineno})", "WARNING")
        shown(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = shown
        root.removeHandler(handler)
