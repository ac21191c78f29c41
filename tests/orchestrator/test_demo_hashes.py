"""Every job of every demo study keeps the config hash it had when its runs were stored: the hashes of
tests/fixtures/demo_hashes/hashes.json were computed by the code before the run's shape became its own
type (model/shape.py) and families stopped needing looplab's recipe and size. A changed hash would make
a resubmitted study queue its finished runs again, so any change to how a spec serialises fails here,
naming the study and the job."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from looplab.orchestrator.grid import assign_hashes, expand
from looplab.workers import jobs

PINNED = json.loads((Path(__file__).parents[1] / "fixtures" / "demo_hashes" / "hashes.json").read_text())


def _studies(fast: bool) -> dict[str, list]:
    from looplab.lab import demo, demo_families

    named = (
        "grids",
        "iso_depth_grids",
        "loop_design_grids",
        "lean_grids",
        "adaptive_grids",
        "learned_exits_grids",
    )
    studies = {f"{name}:{fast}": getattr(demo, name)(fast) for name in named}
    studies[f"families:{fast}"] = demo_families.families_grids(fast)
    return studies


@pytest.mark.parametrize("fast", [False, True], ids=["full", "fast"])
def test_every_demo_job_keeps_its_hash(fast):
    met = 0
    for study, grids in _studies(fast).items():
        plans = expand(grids, jobs)
        assign_hashes(plans, {}, jobs)
        got = [[p.kind, p.config_hash] for p in plans]
        want = PINNED[study]
        assert len(got) == len(want), study
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert g == w, f"{study}: job {i} ({w[0]}) hashes {g[1]}, stored runs have {w[1]}"
            met += 1
    assert met == sum(len(v) for k, v in PINNED.items() if k.endswith(f":{fast}")) > 80
