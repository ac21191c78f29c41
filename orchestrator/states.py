"""The states of a job and the outcomes of an attempt: the only place their names are spelled.

Both are string enums (`StrEnum`, i.e. `str` + `Enum`): a member is stored in the database as its
plain value ("queued", "failed", ...), so rows written before these enums existed need no migration,
and a value read back from the database compares equal to its member (`"queued" == JobStatus.QUEUED`).
Which transitions are legal, and who makes them, is `orchestrator.jobqueue`'s business.
"""

from __future__ import annotations

from enum import StrEnum


class JobStatus(StrEnum):
    """Where a job stands. queued -> running -> succeeded | failed | queued (retried, interrupted,
    preempted);
    queued | running -> cancelled; failed | cancelled -> queued (a user's retry)."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        """True when nothing will change the job any more unless a user retries it."""
        return self in FINISHED


class AttemptOutcome(StrEnum):
    """How one attempt (one claim of a job by a driver) ended; `running` while it has not."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    INTERRUPTED = "interrupted"  # a kill, a stop asked by the driver, a lost driver: not the job's fault
    PREEMPTED = "preempted"  # stopped for a job of much higher priority (orchestrator/admission.py)
    CANCELLED = "cancelled"  # the job was cancelled while this attempt ran


# outcomes that are not the job's fault: it goes back to the queue, costing none of its max_attempts
REQUEUED = (AttemptOutcome.INTERRUPTED, AttemptOutcome.PREEMPTED)
# jobs a driver may still act on, and jobs that are done (successfully or not)
ACTIVE = (JobStatus.QUEUED, JobStatus.RUNNING)
FINISHED = (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)
# a dependency in one of these states will never succeed: its dependents fail with it
DEAD_ENDS = (JobStatus.FAILED, JobStatus.CANCELLED)
