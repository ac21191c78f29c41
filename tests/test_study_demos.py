"""The three CPU studies as a user runs them: `looplab demo --study lean | iso-depth | loop-design --fast`
in a fresh directory (a real local Ray, a SQLite file, real training). Each ends with its study's
scorecard (every claim of that study with a verdict) and writes its report with the scorecard in it; the
command's exit status is 0 only when both were made. Slow tier: docs/testing.md lists each with its time."""

from __future__ import annotations

import os
import re
import subprocess
import time

import pytest

from looplab.analysis import claims
from looplab.lab import demo
from tests.attribution import misattributed, seed_numbers
from tests.test_end_to_end import LOOPLAB, ROOT
from tests.test_misattribution import SEEDS

pytestmark = [pytest.mark.demo, pytest.mark.ray, pytest.mark.slow]

REPORTS = {
    "lean": demo.LEAN_REPORT,
    "iso-depth": demo.ISO_DEPTH_REPORT,
    "loop-design": demo.LOOP_DESIGN_REPORT,
}


def run_fast_study(study: str, tmp_path, looplab_cache) -> str:
    """`looplab demo --study STUDY --fast` in `tmp_path`; its stdout, once it exited 0 (its time printed:
    the docs state it)."""
    env = {**os.environ, "LOOPLAB_CACHE": str(looplab_cache), "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    t0 = time.monotonic()
    out = subprocess.run(
        [*LOOPLAB, "--db", str(tmp_path / "looplab.db"), "demo", "--study", study, "--fast"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    took = time.monotonic() - t0
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    print(f"demo --study {study} --fast: {took:.0f} s")  # the time docs/testing.md states
    return out.stdout


@pytest.mark.parametrize("study", list(REPORTS))
def test_a_fast_study_prints_its_scorecard_and_writes_its_report(study, tmp_path, looplab_cache):
    stdout = run_fast_study(study, tmp_path, looplab_cache)
    assert f"== the {study} study's claims against this run ==" in stdout
    n = len(claims.claims_of(study))
    tally = re.search(rf"^{n} claims: (.*)$", stdout, re.MULTILINE)
    assert tally, stdout[-3000:]
    counted = sum(int(part.split()[0]) for part in tally.group(1).split(", "))
    assert counted == n  # every claim of the study has exactly one verdict
    for fmt in ("html", "md"):
        report = tmp_path / f"{REPORTS[study]}.{fmt}"
        assert report.exists(), f"{report.name} not written"
    md = (tmp_path / f"{REPORTS[study]}.md").read_text()
    assert "## Scorecard of" in md
    rows = [line for line in md.splitlines() if line.startswith(("| lean.", "| iso.", "| loop."))]
    assert len(rows) == n  # the report's scorecard has every claim of the study, once
    # nothing the demo prints or writes attributes to the study a figure it did not print
    seeds = [SEEDS / s.file for s in claims.STUDIES.values()]
    if all(f.is_file() for f in seeds) or os.environ.get("LOOPLAB_REQUIRE_SEEDS") == "1":
        printed = seed_numbers(f.read_text(encoding="utf-8") for f in seeds)
        assert not misattributed(stdout, printed) and not misattributed(md, printed)


# The families study's demo test runs it from the installed wheel in a directory outside the checkout
# (tests/test_install.py), which is what a user does; the checkout's PYTHONPATH here would hide a
# family that the wheel lacks.
