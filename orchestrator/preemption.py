"""Preemption by priority, the driver's side: which of its running jobs may be preempted now, and asking
the admission's victims to stop. Which job is preempted for which is the admission's rule
(orchestrator/admission.py, `Preempt`); this module keeps what the rule needs from the running attempts.

A job may be preempted only when it opted in (`preemptible` in its grid: its owner's to set, since row-level
security lets no other member change the job, orchestrator/roles.py) or the urgent job is an admin's
(issue 56; `owners.Admins` says whose, the reason recorded says so), checkpointed in this attempt (a
stop before that would lose its work) and was not preempted within the cool-down ($LOOPLAB_PREEMPT_COOLDOWN_S,
default 1800 s: a run stopped every few minutes by a stream of urgent jobs would redo its steps since the
last checkpoint each time and never progress). A victim is asked to stop at its next step boundary, after a
checkpoint; its attempt ends as preempted and its job goes back to the queue; a health event says why.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Iterable

from looplab.orchestrator.admission import Preempt, Running
from looplab.orchestrator.health import Finding, Level, Rule


class Preemptions:
    """The preemption state of one driver's running jobs."""

    def __init__(self, cooldown_s: float) -> None:
        self.cooldown_s = cooldown_s
        # running job that checkpointed in its attempt -> the step of its last checkpoint
        self.checkpointed: dict[int, int | None] = {}
        self.preempted_at: dict[int, float | None] = {}  # running job -> when it was last preempted
        self.asked: dict[int, str] = {}  # job asked to stop -> why
        self.opted: set[int] = set()  # running jobs whose owner opted them in to preemption

    def started(self, job_id: int, last_preempted: float | None) -> None:
        """An attempt of `job_id` started; it was last preempted at `last_preempted` (None: never)."""
        self.checkpointed.pop(job_id, None)
        self.preempted_at[job_id] = last_preempted

    def checkpoint(self, job_id: int, step: int | None) -> None:
        self.checkpointed[job_id] = step

    def ended(self, job_id: int) -> tuple[str, int | None] | None:
        """The attempt of `job_id` ended: why it was asked to stop and the step of its last checkpoint (where
        it stopped: it checkpoints before it stops), if it was asked."""
        self.preempted_at.pop(job_id, None)
        step = self.checkpointed.pop(job_id, None)
        why = self.asked.pop(job_id, None)
        return None if why is None else (why, step)

    def running_now(self, running: Iterable[Running]) -> list[Running]:
        """The running jobs as the admission books them, each saying whether it may be preempted now; one
        asked to stop already is `stopping`."""
        running = list(running)
        self.opted = {r.job for r in running if r.request.preemptible}
        since = time.time() - self.cooldown_s
        cooling = {j for j in self.checkpointed if (self.preempted_at.get(j) or -math.inf) > since}
        stoppable = {r.job for r in running if r.job in self.checkpointed and r.job not in cooling}
        return [
            dataclasses.replace(
                r,
                preemptible=r.job in self.opted and r.job in stoppable,
                stoppable=r.job in stoppable,  # an admin's urgent job may stop it (admission.py)
                stopping=r.job in self.asked,
            )
            for r in running
        ]

    def ask(self, decision: Preempt) -> list[tuple[int, str]]:
        """The victims of `decision` not asked yet, each with why; the caller asks each to stop."""
        asked = []
        for victim in decision.victims:
            if victim in self.asked:
                continue
            why = f"preempted for job {decision.job.id} (effective priority {decision.candidate.priority})"
            owner = getattr(decision.job, "owner", None)
            if owner:  # the audit trail (revision 0024) puts the preempted job's owner beside this
                why += f", submitted by {owner}"
            if victim not in self.opted:  # only an admin's job may do this (admission.py)
                why += " (an admin's job: this one had not opted in to preemption)"
            self.asked[victim] = why
            asked.append((victim, why))
        return asked


def stopped(why: str, step: int | None) -> Finding:
    """The health event of an attempt that stopped as asked, at the step of the checkpoint it stopped at,
    recorded when the attempt ends: the run's own step, not what the driver had seen when it asked."""
    at = f" at step {step}" if step is not None else ""
    message = f"{why}: it stopped{at}, checkpointed, and resumes from there"
    return Finding(Rule.PREEMPTED, Level.WARNING, step, None, None, message)
