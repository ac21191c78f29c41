"""The soak with the CI seed (tests/cluster/soak.py; docs/guarantees.md#the-soak): about 40 tiny jobs on
the test cluster under a seeded schedule of 10 faults, every promise checked after, within 10 minutes.
Marked like the other cluster tests (`multinode`, `ray`, `slow`): the fast tier skips it."""

from __future__ import annotations

import pytest

from tests.cluster import netns, soak

pytestmark = [pytest.mark.multinode, pytest.mark.ray, pytest.mark.slow]
if netns.available():
    pytestmark.append(pytest.mark.skip(reason=netns.available()))

BUDGET_S = 600  # the bound for the CI run
# a fault waits at most this long for a running job on its target: the CI seed's faults between waves
# would each wait the default 120 s for nothing (962 s in all on 2026-12-05, past BUDGET_S)
ARM_TIMEOUT_CI_S = 20
CURVES = 3  # rerun jobs whose curves are compared with a reference run (each tens of seconds under load)


def test_the_schedule_is_a_function_of_the_seed():
    one, again, other = soak.plan(soak.CI_SEED, 10), soak.plan(soak.CI_SEED, 10), soak.plan(7, 10)
    assert one == again and one != other
    assert all(f.target in soak.TARGETS[f.kind] and "head" != f.target for f in one)
    assert {f.kind for f in one} == set(soak.TARGETS)  # every kind of fault, once at least


def test_the_study_comes_in_one_wave_per_fault_and_one_more():
    from looplab.orchestrator.grid import Grid

    texts = soak.waves(41, 10)
    grids = [[g for g in ns.values() if isinstance(g, Grid)] for ns in map(_run, texts)]
    seeds = [s for wave in grids for g in wave if g.name != "soak-gang" for s in g.sweep["seed"]]
    assert len(texts) == 11 and sorted(seeds) == list(range(20))  # 20 runs and their 20 sweeps
    assert [g.name for g in grids[0]] == ["soak-0", "soak-gang"] and all(len(w) == 1 for w in grids[1:])


def _run(text: str) -> dict:
    ns: dict = {}
    exec(text, ns)
    return ns


def test_the_soak_with_the_ci_seed_keeps_every_promise(looplab_cache, tmp_path):
    out = tmp_path / "soak-summary.txt"
    # every_fault=False: the verdict "every fault met a job, the fence was exercised" is reported, not
    # binding here. Whether a fault meets a job depends on how fast this machine runs the study: on
    # 2026-12-05 6 of 10 faults met none at load 4-9 (the fence exercised once), and at load 0.7 the fence
    # fault met none either. Scheduling faults against queued work is issue 51's open part; `make soak`
    # keeps the whole verdict.
    text, got = soak.soak(
        looplab_cache,
        soak.CI_SEED,
        10,
        41,
        out,
        tmp_path / "ref",
        curves=CURVES,
        every_fault=False,
        arm_timeout_s=ARM_TIMEOUT_CI_S,
    )
    assert got["duplicates"] == 0
    assert got["jobs"] == 41 and got["succeeded"] == 41, text
    assert all(f["at_s"] is not None for f in got["faults"]), text  # each of the 10 faults was injected
    assert any(f["met"] for f in got["faults"]), text  # some fault met a running job
    assert sum(got["attempts"].values()) > got["jobs"], text  # the faults cost attempts: they hit jobs
    assert 1 <= len(got["curves"]) <= CURVES, text  # the faults made a job run again, its curve compared
    assert out.read_text().startswith(text)
    seconds = float(text.rsplit("time: ", 1)[1].split()[0])
    assert seconds < BUDGET_S, text
