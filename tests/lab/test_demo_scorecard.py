"""`looplab demo --study lean` is run for its scorecard and report: a failure in either fails the command
with the reason, after the runs themselves succeeded (the queue is replaced by a stand-in here; the
whole study runs in the slow tier's demo tests)."""

from __future__ import annotations

import types

import pandas as pd

from lab import demo


def test_a_failing_scorecard_fails_the_lean_demo_with_its_reason(monkeypatch, tmp_path, capsys):
    done = types.SimpleNamespace(url=f"sqlite:///{tmp_path / 'looplab.db'}")
    monkeypatch.setattr(demo, "_run", lambda *a, **k: (done, 0, pd.DataFrame()))

    def broken(url, names):
        raise KeyError("verdict")

    monkeypatch.setattr(demo, "print_findings", broken)
    monkeypatch.chdir(tmp_path)
    assert demo.main_lean(db=None, fast=True) == 1
    err = capsys.readouterr().err
    assert "the scorecard or the report failed: KeyError: 'verdict'" in err


def test_the_lean_demo_passes_when_scorecard_and_report_are_written(monkeypatch, tmp_path, capsys):
    done = types.SimpleNamespace(url=f"sqlite:///{tmp_path / 'looplab.db'}")
    monkeypatch.setattr(demo, "_run", lambda *a, **k: (done, 0, pd.DataFrame()))
    monkeypatch.setattr(demo, "print_findings", lambda url, names: print("scorecard"))
    written = []

    def write_report(url, names, path, fmt):
        written.append(fmt)
        return tmp_path / path

    import lab.report

    monkeypatch.setattr(lab.report, "write_report", write_report)
    monkeypatch.chdir(tmp_path)
    assert demo.main_lean(db=None, fast=True) == 0
    assert written == ["html", "md"] and "scorecard" in capsys.readouterr().out
