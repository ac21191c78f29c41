"""A job's log holds its own lines from every attempt (orchestrator/joblog.py): progress at each tenth,
the warnings it raised (Python warnings and WARNING logging records); `looplab logs N` shows them all,
attempt by attempt, each attempt's error (stored by `jobqueue.finish`) after its lines. No Ray: the reporter's one Ray call is a list
(tests/orchestrator/test_writer.py `LocalReporter`); the writer and the CLI are the real ones."""

from __future__ import annotations

import logging
import warnings

from looplab.lab.cli import main
from looplab.orchestrator import Grid, Queue, jobqueue
from looplab.orchestrator.joblog import ProgressLines
from looplab.orchestrator.states import AttemptOutcome
from looplab.orchestrator.task import run_attempt
from looplab.orchestrator.writer import write_events
from looplab.workers.data import shards as data
from looplab.workers.reporter import EventKind
from tests.orchestrator import fake_jobs
from tests.orchestrator.test_writer import LocalReporter


def _attempt(rep: LocalReporter, fail: str | None):
    """An attempt of 120 steps that warns twice, says one line itself, then fails with `fail` (or not)."""

    def run():
        for step in range(1, 121):
            rep.progress(step, 120, eta_s=120 - step)
        warnings.warn("lr looks high", UserWarning, stacklevel=1)
        logging.getLogger("somelib").warning("disk is slow")
        data._say(rep, "tokenizer rebuilt", "WARNING")  # the job's own line: once, not twice
        if fail:
            raise ValueError(fail)

    return run_attempt(7, rep, "node:1", None, run)


def _lines(events) -> list[tuple[str, str]]:
    return [(e.payload["level"], e.payload["message"]) for e in events if e.kind == EventKind.LOG]


def test_an_attempt_logs_its_progress_warnings_and_error(tmp_path):
    rep = LocalReporter(7, None)
    result = _attempt(rep, "boom at step 120")
    lines = _lines(rep.shipped)
    progress = [m for level, m in lines if m.startswith("progress ")]
    assert progress[0] == "progress 10% (12/120), eta 108 s" and progress[-1] == "progress 100% (120/120)"
    assert len(progress) == 10  # a line each tenth, not one per step
    assert any(level == "WARNING" and "UserWarning: lr looks high" in m for level, m in lines)
    assert ("WARNING", "somelib: disk is slow") in lines
    assert [m for _, m in lines].count("tokenizer rebuilt") == 1
    assert result.outcome == AttemptOutcome.FAILED and "ValueError: boom at step 120" in result.error
    # after the attempt, nothing is captured any more
    logging.getLogger("somelib").warning("after the job")
    assert not any("after the job" in m for _, m in _lines(rep.take()))


def test_progress_lines_need_a_total_and_never_repeat_a_tenth():
    lines = ProgressLines()
    assert lines.line(5, 0, None) is None  # no total: no line
    assert lines.line(1, 10, 9.0) == "progress 10% (1/10), eta 9 s"
    assert lines.line(1, 10, 9.0) is None
    assert lines.line(10, 10, None) == "progress 100% (10/10)"


def test_looplab_logs_shows_every_attempts_own_lines(migrated_db_url, tmp_path, capsys):
    q = Queue(db=migrated_db_url, kinds=fake_jobs)
    (job,) = q.submit([Grid("w", base={"tokens": 100}, max_attempts=2)])
    for attempt, fail in ((1, "first failure"), (2, "second failure")):
        n = jobqueue.claim(q.eng, job, "driver", str(tmp_path / "a"))
        assert n == attempt
        rep = LocalReporter(job, None)
        result = _attempt(rep, fail)
        rep.close()
        write_events(q.eng, [(job, n, rep.shipped)])
        jobqueue.finish(q.eng, job, n, result.outcome, result.error, backoff_s=0.0)
    assert main(["logs", str(job), "--db", migrated_db_url]) == 0
    out = capsys.readouterr().out
    for attempt, fail in ((1, "first failure"), (2, "second failure")):
        assert f"[attempt {attempt}] INFO: progress 50% (60/120), eta 60 s" in out
        assert f"[attempt {attempt}] WARNING: somelib: disk is slow" in out
        assert f"[attempt {attempt}] ERROR:" in out and f"ValueError: {fail}" in out
    assert out.count("[attempt 2] ERROR:") == 1 and "\nerror:\n" not in out  # the last error not twice
    assert out.index("first failure") < out.index("[attempt 2] INFO: progress 10%")
