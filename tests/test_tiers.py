"""How `make check` and `make test` split the suite over pytest-xdist workers (tests/conftest.py,
`xdist_group`): the tests of a module with a module-scoped fixture run on one worker, so the fixture is
built once. pytest 9.2 broke this silently (xdist's `--dist loadgroup` rewrites a node id pytest 9.2 no
longer reads, and every group was ignored), so it is checked here on real workers."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from tests.conftest import ONE_AT_A_TIME, SHARED_BUILDS, full_suite_only, xdist_group

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # docs/testing.md: runs a pytest session of two xdist workers
def test_a_module_with_a_module_fixture_runs_on_one_worker():
    # test_init.py: 3 of its tests share a module-scoped model; the rest and test_stats.py are ungrouped
    files = ["tests/model/test_init.py", "tests/analysis/test_stats.py"]
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-n",
            "2",
            "--dist",
            "loadgroup",
            "-v",
            "-p",
            "no:cacheprovider",
            *files,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-3000:]
    workers = defaultdict(set)  # the nodeid of a grouped test ends "@<its group>"
    for worker, nodeid in re.findall(r"\[(gw\d)\] \[ *\d+%\] PASSED (\S+)", out.stdout):
        workers[nodeid.partition("@")[2] or "ungrouped"].add(worker)
    grouped = "tests/model/test_init.py"  # its 3 tests of the module's `model` fixture
    assert len(workers[grouped]) == 1 and len(re.findall(f"PASSED \\S+@{grouped}", out.stdout)) == 3, workers
    assert set().union(*workers.values()) == {"gw0", "gw1"}, workers  # the others: whichever worker is free


class _Item:
    """What `xdist_group` reads of a pytest item."""

    def __init__(
        self,
        nodeid: str,
        markers: tuple[str, ...] = (),
        scopes: tuple[str, ...] = ("function",),
        fixturenames: tuple[str, ...] = (),
    ):
        self.nodeid, self._markers, self.fixturenames = nodeid, markers, fixturenames
        defs = [type("FixtureDef", (), {"scope": scope})() for scope in scopes]
        self._fixtureinfo = type("FixtureInfo", (), {"name2fixturedefs": {"f": defs}})()

    def get_closest_marker(self, name: str):
        return name if name in self._markers else None


def test_the_groups_follow_what_a_test_needs():
    for marker in ONE_AT_A_TIME:  # every cluster, browser and demo test in one group, whatever its fixtures
        assert xdist_group(_Item("tests/a.py::t", (marker,), ("module",))) == "one-at-a-time"
    assert xdist_group(_Item("tests/a.py::t[x]", (), ("session", "module"))) == "tests/a.py"
    assert xdist_group(_Item("tests/a.py::t", (), ("session", "function"))) is None
    assert xdist_group(_Item("tests/a.py::t", ("slow",), ("function",))) is None
    # the tests of a costly session build share one worker, whichever module they are in
    for module in ("tests/a.py", "tests/b.py"):
        item = _Item(f"{module}::t", (), ("session", "module"), fixturenames=("tmp_path", "trained_fixed4"))
        assert xdist_group(item) == "trained_fixed4"


def test_the_shared_builds_are_fixtures_of_the_suite():
    """A name in SHARED_BUILDS that no fixture has would group nothing, silently."""
    source = "\n".join(p.read_text() for p in (ROOT / "tests").rglob("conftest.py"))
    for name in SHARED_BUILDS:
        assert f"def {name}(" in source, name


def test_a_page_module_runs_its_postgresql_cases_in_the_full_suite_only():
    """A module that sets POSTGRES_IN_FULL_SUITE_ONLY has its [postgresql] cases marked slow (deselected
    by `make check`), its [sqlite] cases not; a module without the flag keeps both in the fast tier."""
    from tests.dashboard import test_frames, test_pages

    assert test_pages.POSTGRES_IN_FULL_SUITE_ONLY is True
    pg, lite = (_Item(f"tests/dashboard/test_pages.py::test_x[{b}]") for b in ("postgresql", "sqlite"))
    pg.module = lite.module = test_pages
    assert full_suite_only(pg) and not full_suite_only(lite)
    frames_pg = _Item("tests/dashboard/test_frames.py::test_x[postgresql]")
    frames_pg.module = test_frames
    assert not full_suite_only(frames_pg)
