"""`looplab demo --study lean | iso-depth | loop-design` are run for their scorecard and report: a failure in
either fails the command with the reason, after the runs themselves succeeded (the queue is replaced by a
stand-in here; the studies' `--fast` forms run whole in the slow tier, tests/lab/test_study_demos.py)."""

from __future__ import annotations

import types

import pandas as pd
import pytest

from looplab.lab import demo
from looplab.lab import report as lab_report

MAINS = {"lean": demo.main_lean, "iso-depth": demo.main_iso_depth, "loop-design": demo.main_loop_design}


@pytest.fixture
def ran(monkeypatch, tmp_path):
    """The queue's part done: every study's runs succeeded, the other summaries print nothing."""
    done = types.SimpleNamespace(url=f"sqlite:///{tmp_path / 'looplab.db'}")
    monkeypatch.setattr(demo, "_run", lambda *a, **k: (done, 0, pd.DataFrame()))
    monkeypatch.setattr(demo, "print_iso_depth_fit", lambda url, grid: None)
    monkeypatch.setattr(demo, "print_extrapolation", lambda url, prefix: None)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("study", list(MAINS))
def test_a_failing_scorecard_fails_the_study_demo_with_its_reason(ran, monkeypatch, capsys, study):
    def broken(url, names, which):
        raise KeyError("verdict")

    monkeypatch.setattr(demo, "print_scorecard", broken)
    assert MAINS[study](db=None, fast=True) == 1
    err = capsys.readouterr().err
    assert f"demo --study {study}: the scorecard or the report failed: KeyError: 'verdict'" in err


@pytest.mark.parametrize("study", list(MAINS))
def test_the_study_demo_passes_when_its_scorecard_and_report_are_written(ran, monkeypatch, capsys, study):
    printed = []
    monkeypatch.setattr(demo, "print_scorecard", lambda url, names, which: printed.append(which))
    written = []

    def write_report(url, names, path, fmt):
        written.append(path)
        return ran / path

    monkeypatch.setattr(lab_report, "write_report", write_report)
    assert MAINS[study](db=None, fast=True) == 0
    assert printed == [study]
    stem = {
        "lean": demo.LEAN_REPORT,
        "iso-depth": demo.ISO_DEPTH_REPORT,
        "loop-design": demo.LOOP_DESIGN_REPORT,
    }
    assert written == [f"{stem[study]}.html", f"{stem[study]}.md"]


def test_a_failing_report_fails_the_demo_too(ran, monkeypatch, capsys):
    monkeypatch.setattr(demo, "print_scorecard", lambda url, names, which: None)

    def write_report(url, names, path, fmt):
        raise OSError("disk full")

    monkeypatch.setattr(lab_report, "write_report", write_report)
    assert demo.main_loop_design(db=None, fast=True) == 1
    assert "the scorecard or the report failed: OSError: disk full" in capsys.readouterr().err
