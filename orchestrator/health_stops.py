"""What ended an attempt that a health rule asked to stop (orchestrator/health.py: at chance, a plateau set
to `stop` or `hold`; the driver acts on it in `Scheduler._health_stops`).

The rules run in the driver, on the points a run shipped: the run goes on for a second or so (the
reporter ships every half second, the driver writes, then asks) before the stop reaches it, and a
`hold` is only a request the run honours at its next step, with a checkpoint. In that time the run may
end on its own: finish, or fail at a NaN it reached first (a run pinned at chance by a huge learning
rate often diverges a few dozen steps later). Recording such an attempt as the rule's failure would be
wrong twice: a hold's error promises "`looplab retry N` resumes it from its checkpoint" where no
checkpoint was written (the retry then starts from step 0), and the run's own cause (the NaN, its
traceback) would be lost. So the rule's failure is the attempt's ending only when the stop is what
ended it: a `hold` when the run stopped as asked (interrupted, after its checkpoint), a `stop` when the
run was killed (any failure but one with a finding of its own). Otherwise the run's own result stands,
and the job's log says that the rule's stop came too late.
"""

from __future__ import annotations

import time

from looplab.orchestrator.health import HOLD, Finding
from looplab.orchestrator.states import AttemptOutcome
from looplab.orchestrator.task import TaskResult
from looplab.workers.reporter import Event, EventKind


def ending(stopped: Finding, out: TaskResult, job_id: int) -> tuple[TaskResult, Event | None]:
    """The result to record for attempt of job `job_id` that health finding `stopped` asked to stop and
    that ended with `out`; with a WARNING log event for the job when the run ended on its own first."""
    if ended_by_stop(stopped, out):
        return TaskResult(AttemptOutcome.FAILED, stopped.error(job_id), finding=stopped), None
    own = out.finding.message if out.finding is not None else str(out.outcome)
    note = (
        f"the {stopped.rule} rule asked at step {stopped.step} to {stopped.action} the run, but it ended "
        f"on its own first ({own}): that ending is recorded"
        + (", and no checkpoint was written for the hold" if stopped.action == HOLD else "")
    )
    return out, Event(EventKind.LOG, time.time(), {"level": "WARNING", "message": note})


def ended_by_stop(stopped: Finding, out: TaskResult) -> bool:
    """Whether the stop that `stopped` asked for is what ended an attempt whose task gave `out`: not when
    it succeeded or failed with a finding of its own (a NaN, spikes); for a hold, only when it stopped as
    asked (interrupted: it wrote the checkpoint the hold's error promises)."""
    if out.outcome == AttemptOutcome.SUCCEEDED or out.finding is not None:
        return False
    return stopped.action != HOLD or out.outcome == AttemptOutcome.INTERRUPTED
