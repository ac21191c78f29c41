"""Whose fault a failed attempt is, and so whether a retry can help.

A retry is for a fault of the machine: a node lost, out of memory, a full disk, the database away, the
process killed. The next attempt, elsewhere or later, may well go through. A program error (a bad
config, a shape or type error, a NaN at the same step) repeats on every attempt of a deterministic
run: retrying it spends `max_attempts` x the attempt's time to learn nothing, and the person who must
fix it learns of it that much later. So such an attempt is final by default, and says so; a grid may
ask for retries anyway (`health={"retry_program_errors": True}`, e.g. for code that is flaky on
purpose). An error of neither kind is retried, as before this rule: when in doubt, retry.

Torch-free and Ray-free: the task classifies what its run raised (orchestrator/task.py `fault_of`), the
driver decides (`retried`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from enum import StrEnum
from typing import TYPE_CHECKING

from looplab.model.errors import ConfigError

if TYPE_CHECKING:
    from looplab.orchestrator.health import Finding, HealthSettings


class Fault(StrEnum):
    MACHINE = "machine"
    PROGRAM = "program"


# errors of the machine's, by type name (no import of sqlalchemy, ray or torch needed to tell them):
# the database unreachable, a connection or a worker lost, memory gone
MACHINE_NAMES = {
    "OperationalError",  # sqlalchemy: the server away, a file locked past its busy timeout
    "InterfaceError",
    "DisconnectionError",
    "OutOfMemoryError",
    "NodeDiedError",
    "WorkerCrashedError",
    "RayActorError",
    "ActorDiedError",
    "OwnerDiedError",
    "ObjectLostError",
    "TaskCancelledError",
}
MACHINE_TYPES = (MemoryError, ConnectionError, TimeoutError, OSError, KeyboardInterrupt, SystemExit)
# errors of the program's: the same input gives the same error
PROGRAM_TYPES = (
    ConfigError,
    TypeError,
    ValueError,
    IndexError,
    KeyError,
    AttributeError,
    NameError,
    AssertionError,
    ZeroDivisionError,
    NotImplementedError,
    ImportError,
    SyntaxError,
)
# a RuntimeError of torch about shapes (e.g. "mat1 and mat2 shapes cannot be multiplied", "The size of
# tensor a (128) must match the size of tensor b (64)", "index out of range")
SHAPE = re.compile(r"shape|size of tensor|must match|dimension|out of range|expected .* got", re.I)


def classify(errors: Iterable[BaseException], machine: bool = False) -> Fault | None:
    """The fault of a failure, from its error and those behind it (`errors`, the raised one first);
    `machine`: the caller recognised a fault of the machine (out of memory, a full disk). A fault of
    the machine anywhere in the chain wins (a shape error raised while the disk was full is the disk's);
    None when neither kind is recognised."""
    chain = list(errors)
    if machine or any(
        type(e).__name__ in MACHINE_NAMES
        or (isinstance(e, MACHINE_TYPES) and not isinstance(e, PROGRAM_TYPES))
        for e in chain
    ):
        return Fault.MACHINE
    if any(
        isinstance(e, PROGRAM_TYPES) or (type(e) is RuntimeError and SHAPE.search(str(e)) is not None)
        for e in chain
    ):
        return Fault.PROGRAM
    return None


def program_note(error: BaseException) -> str:
    """The first line of a program error's record: the error itself (it names the field or the shape)
    and why it is not retried."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return (
        f"{type(error).__name__}: {text} (a program error: it repeats on every attempt, so the job is not "
        "retried unless its grid sets health.retry_program_errors). Traceback follows.\n"
    )


def retried(finding: Finding | None, fault: str | None, settings: HealthSettings) -> bool:
    """Whether a failed attempt is retried (while attempts are left): a finding that ended it is final
    (a non-finite figure unless `retry_non_finite`; spikes past their rewinds; a rule whose action
    stops the run), so is a program error unless `retry_program_errors`; anything else is retried."""
    from looplab.orchestrator.health import Rule

    if finding is not None:
        if finding.rule == Rule.NON_FINITE:
            return settings.retry_non_finite
        if finding.rule == Rule.REWIND or finding.stops:
            return False
    if fault == Fault.PROGRAM:
        return settings.retry_program_errors
    return True
