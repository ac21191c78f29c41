"""Exact resume of the Huginn-style family: its recurrence counts (drawn per step) and initial states
(drawn per row) come from the run's seed, the step and the global row, so a training process
SIGKILLed after a checkpoint and resumed reproduces the uninterrupted run bit for bit: the example
family's resume test (tests/workers/test_family_resume.py) with this family."""

from __future__ import annotations

import pytest

from tests.workers.test_family_resume import killed_and_resumed_matches
from tests.workers.test_resume import _cmd

FAMILY = ["--family", "families.huginn:factory", "--optimizer", "adamw"]
CONFIG = ("d_model=32", "n_heads=2", "mlp=48", "mean_recurrence=3", "backprop_depth=2")


def _huginn_cmd(out, events) -> list[str]:
    config = [arg for pair in (("--family-config", c) for c in CONFIG) for arg in pair]
    return [*_cmd(out, events), *FAMILY, *config]


@pytest.mark.slow  # three training processes, one killed
def test_a_huginn_run_killed_and_resumed_matches_the_uninterrupted_run(looplab_cache, tmp_path):
    facts = killed_and_resumed_matches(_huginn_cmd, tmp_path)
    assert facts["family"] == "families.huginn:factory" and not facts["split_dependent"]
    assert facts["capabilities"]["sample_loops"] and facts["capabilities"]["row_key"]
