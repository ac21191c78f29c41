"""Exact resume of the Ouro-style family (trained with its entropy-regularised objective, the
contract's training_loss) and of the MoR-style family (expert-choice router with its auxiliary loss):
neither draws randomness, so a training process SIGKILLed after a checkpoint and resumed reproduces
the uninterrupted run bit for bit (the example family's resume test, tests/workers/test_family_resume.py)."""

from __future__ import annotations

import pytest

from tests.workers.test_family_resume import killed_and_resumed_matches
from tests.workers.test_resume import _cmd

CASES = {
    "families.ouro:factory": ("d_model=32", "n_heads=2", "mlp=48", "objective=entropy"),
    "families.mor:factory": ("d_model=32", "n_heads=2", "mlp=48", "router=expert"),
}


@pytest.mark.slow  # three training processes, one killed
@pytest.mark.parametrize("family", list(CASES))
def test_a_run_killed_and_resumed_matches_the_uninterrupted_run(family, looplab_cache, tmp_path):
    def make_cmd(out, events) -> list[str]:
        config = [arg for c in CASES[family] for arg in ("--family-config", c)]
        return [*_cmd(out, events), "--family", family, "--optimizer", "adamw", *config]

    facts = killed_and_resumed_matches(make_cmd, tmp_path)
    assert facts["family"] == family and not facts["split_dependent"]
    assert facts["capabilities"]["training_loss"]
