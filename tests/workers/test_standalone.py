"""`run_standalone`, the part every job's `python -m workers.<job>` shares: the exit statuses (0 done,
2 bad input wherever it is found, 130 stopped), the messages, and what reaches the job and the printer.
A stand-in job on the decode bench's Spec and parser: nothing is trained or timed."""

from __future__ import annotations

import signal

import pytest

from looplab.model.errors import ConfigError
from looplab.workers.evaluate import decode_bench
from looplab.workers.reporter import JobInterrupted
from looplab.workers.spec_cli import run_standalone


@pytest.fixture(autouse=True)
def _keep_signal_handlers():
    """`run_standalone` installs Ctrl-C / SIGTERM handlers (a stop request); give pytest its own back."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def standalone(job, argv: list[str], **kwargs):
    """(exit status, what the printer was given) of a standalone run of `job`."""
    shown = []
    status = run_standalone(
        decode_bench.build_parser(),
        decode_bench.Spec,
        job,
        lambda spec, result, args: shown.append((spec, result, args.out)),
        desc="test job",
        argv=["--quiet", *argv],
        **kwargs,
    )
    return status, shown


def test_a_finished_job_gets_its_spec_and_out_dir_and_its_result_is_printed(tmp_path):
    calls = []

    def job(spec, reporter, out):
        calls.append((spec, out))
        return {"rows": 3}

    status, shown = standalone(job, ["--batch-sizes", "2,4", "--out", str(tmp_path)])
    assert status == 0
    [(spec, out)] = calls
    assert spec.batch_sizes == [2, 4] and spec.recipe == "lean" and out == str(tmp_path)
    assert shown == [(spec, {"rows": 3}, str(tmp_path))]


@pytest.mark.parametrize(
    "where", ["spec", "before", "job"], ids=["bad flag value", "before check", "inside the job"]
)
def test_bad_input_anywhere_is_one_error_line_and_status_2(where, capsys):
    calls = []

    def before(spec):
        if where == "before":
            raise ConfigError("checkpoint: no such file")

    def job(spec, reporter, out):
        calls.append(spec)
        if where == "job":
            raise ConfigError("checkpoint: vocab mismatch")
        return {}

    argv = ["--steps", "0"] if where == "spec" else []
    status, shown = standalone(job, argv, before=before)
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and shown == []
    expected = {
        "spec": "error: steps: ",
        "before": "error: checkpoint: no such file",
        "job": "error: checkpoint: vocab mismatch",
    }[where]
    assert err[-1].startswith(expected), err
    assert len(calls) == (1 if where == "job" else 0)  # a refused spec or check runs nothing


def test_a_stopped_job_says_how_to_resume_and_exits_130(capsys):
    def job(spec, reporter, out):
        raise JobInterrupted("stopped at step 7")

    status, shown = standalone(job, [], resume_hint="rerun the same command to resume")
    assert status == 130 and shown == []
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "interrupted (stopped at step 7); rerun the same command to resume"
    )
