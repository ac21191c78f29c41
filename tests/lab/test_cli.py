"""The `looplab` handlers of the orchestrator: submit, status, logs, cancel, retry (no Ray needed:
the queue state is made directly in the database)."""

from __future__ import annotations

import pytest

from looplab import Grid, Queue
from looplab.lab.cli import main
from looplab.orchestrator.jobqueue import claim, finish
from tests.orchestrator import fake_jobs


@pytest.fixture
def db(tmp_path):
    return str(tmp_path / "q.db")


def test_submit_file_reports_added_then_present(tmp_path, db, capsys):
    f = tmp_path / "grids.py"
    f.write_text(
        "from looplab import Grid\n"
        "a = Grid('a', base={'size': 'tiny', 'tokens': 1000}, sweep={'recipe': ['lean', 'parcae']})\n"
        "b = Grid('b', base={'size': 'tiny', 'tokens': 1000, 'recipe': 'lean', 'seed': 0})\n"
    )
    assert main(["--db", db, "submit", str(f)]) == 0
    out = capsys.readouterr().out
    assert "2 grid(s), 2 job(s): 2 added, 0 already present" in out  # b is a's lean job: one job
    assert main(["--db", db, "submit", str(f)]) == 0
    assert "0 added, 2 already present" in capsys.readouterr().out


def test_submit_file_with_follow_ups_lists_every_job(tmp_path, db, capsys, monkeypatch):
    """A decode bench has no seed (pd.NA in the status frame): listing it must not crash the command
    after the jobs were written."""
    monkeypatch.setenv("LOOPLAB_JOB_KINDS", "tests.orchestrator.fake_jobs")
    f = tmp_path / "grids.py"
    f.write_text(
        "from looplab import Grid\n"
        "g = Grid('g', base={'tokens': 100}, sweep={'recipe': ['lean']}, then=['depth_sweep', 'decode_bench'])\n"
    )
    assert main(["--db", db, "submit", str(f)]) == 0
    out = capsys.readouterr().out
    assert "3 added" in out and "decode_bench" in out and "depth_sweep  lean tiny seed 0" in out


def test_submit_bad_file_is_one_clear_line(tmp_path, db, capsys):
    f = tmp_path / "bad.py"
    f.write_text("from looplab import Grid\ng = Grid('g', base={'tokens': 10, 'recipe': 'lena'})\n")
    assert main(["--db", db, "submit", str(f)]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "recipe" in err and "accepted" in err
    (tmp_path / "empty.py").write_text("x = 1\n")
    assert main(["--db", db, "submit", str(tmp_path / "empty.py")]) == 2
    assert "defines no Grid" in capsys.readouterr().err


def test_status_logs_cancel_retry(db, tmp_path, capsys):
    q = Queue(db=db, kinds=fake_jobs)
    boom, sweep_src, other = q.submit(
        [Grid("x", job="boom", max_attempts=1), Grid("y", job="noop", sweep={"tag": [1, 2]})]
    )
    n = claim(q.eng, boom, "test", str(tmp_path / "a"))
    finish(q.eng, boom, n, "failed", "Traceback (most recent call last):\nRuntimeError: boom here")
    assert main(["--db", db, "status"]) == 0
    out = capsys.readouterr().out
    assert "noop" in out and "boom" not in out  # finished jobs hidden without --all
    assert main(["--db", db, "status", "--all", "--grid", "x"]) == 0
    out = capsys.readouterr().out
    assert "RuntimeError: boom here" in out and "noop" not in out
    assert main(["--db", db, "logs", str(boom)]) == 0
    assert "RuntimeError: boom here" in capsys.readouterr().out
    assert main(["--db", db, "cancel", str(other), str(boom)]) == 0
    assert (
        capsys.readouterr().out == f"cancelled: [{other}]; not queued/running (left as they are): [{boom}]\n"
    )
    assert q.status().set_index("id").loc[other, "status"] == "cancelled"
    assert main(["--db", db, "retry", str(boom), str(other)]) == 0
    assert set(q.status().set_index("id").loc[[boom, other], "status"]) == {"queued"}
    capsys.readouterr()
    assert main(["--db", db, "retry", str(sweep_src)]) == 1  # queued: nothing to retry
    assert (
        capsys.readouterr().out
        == f"re-queued: none; not failed/cancelled, or still stopping (left as they are): [{sweep_src}]\n"
    )


def test_progress_bar_of_a_job_that_has_not_reported_is_empty_not_full():
    import math

    from looplab.lab.display import bar

    assert bar(None, None).strip() == "" and bar(math.nan, math.nan).strip() == ""
    assert bar(3, 0).strip() == ""
    assert bar(15, 30) == "[##########----------]  50%"
    assert bar(30, 30).endswith("100%")


def test_help_names_the_guide_of_every_command_and_every_guide_exists(capsys):
    """`looplab --help` lists the guides, `looplab COMMAND --help` names its own (e.g. plan ->
    docs/planning.md); every page named exists in the repository."""
    import argparse
    import re
    from pathlib import Path

    from looplab.lab.cli import build_parser

    root = Path(__file__).resolve().parents[2]
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    named = {
        name: re.findall(r"docs/[\w-]+\.md", command.epilog or "") for name, command in sub.choices.items()
    }
    assert all(named.values()), [name for name, pages in named.items() if not pages]
    listed = re.findall(r"docs/[\w-]+\.md", parser.epilog)
    assert {page for pages in named.values() for page in pages} <= set(listed)
    missing = [page for page in listed if not (root / page).is_file()]
    assert not missing, missing
    with pytest.raises(SystemExit) as e:
        main(["plan", "--help"])
    assert e.value.code == 0 and "guide: docs/planning.md" in capsys.readouterr().out


def test_logs_lists_a_jobs_rewinds_with_the_skipped_rows(db, tmp_path, capsys):
    from looplab.orchestrator.writer import write_events
    from looplab.workers.reporter import Event, EventKind

    q = Queue(db=db, kinds=fake_jobs)
    (job,) = q.submit(Grid("r", base={"tokens": 100}))
    n = claim(q.eng, job, "test", str(tmp_path / "a"))
    rewound = {"step": 25, "spiked_step": 30, "rows": [120, 121], "n": 1}
    write_events(q.eng, [(job, n, [Event(EventKind.REWOUND, 2.0, rewound)])])
    assert main(["--db", db, "logs", str(job)]) == 0
    out = capsys.readouterr().out
    assert (
        f"rewind 1 [attempt {n}]: loss spike at step 30, back to step 25, skipped data rows 120, 121" in out
    )
