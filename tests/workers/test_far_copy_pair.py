"""A small grid of real runs, lean and parcae at three seeds each, swept with the far-copy split: the
paired lean − parcae far-copy difference on the same tokens comes with an interval over the seeds."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from looplab.analysis import far_copy
from looplab.workers.evaluate import depth_sweep
from looplab.workers.reporter import MemoryReporter
from looplab.workers.train import job as train
from tests.workers.conftest import tiny_spec

SEEDS = (0, 1, 2)
DISTANCE = 8  # the tiny runs' sequences are 32 tokens: a distance inside them has far tokens


def test_lean_vs_parcae_far_copy_difference_with_an_interval(looplab_cache, tmp_path):
    rows = []
    for recipe in ("lean", "parcae"):
        for seed in SEEDS:
            out = tmp_path / f"{recipe}{seed}"
            spec = train.Spec.from_dict(tiny_spec(recipe=recipe, seed=seed, tokens=8 * 32 * 10))
            train.run(spec, MemoryReporter(), out)
            rep = MemoryReporter()
            sweep = {"checkpoint": str(out), "loops": [2, 4], "eval_tokens": 512, "device": "cpu"}
            sweep |= {"far_distance": DISTANCE, "interaction_loops": []}
            depth_sweep.run(depth_sweep.Spec.from_dict(sweep), rep, tmp_path / f"sweep-{recipe}{seed}")
            for r in rep.of("result"):
                if r["table"] == "depth_evals":
                    rows.append({"variant_label": recipe, "seed": seed, **r["row"]})
    depth = pd.DataFrame(rows)
    # every sweep scored the same tokens: the far share is one number for every run and loop count
    assert depth["far_share"].nunique() == 1 and 0 < depth["far_share"].iloc[0] < 1
    table = far_copy.paired_difference(depth, "lean", "parcae", distance=DISTANCE)
    assert sorted(set(table["loops"])) == [2, 4] and set(table["metric"]) == set(far_copy.METRICS)
    far = table[(table["metric"] == "far_copy_loss") & (table["loops"] == 4)].iloc[0]
    assert far["method"] == "paired t" and far["n"] == far["n_ref"] == 3
    assert math.isfinite(far["low"]) and far["low"] < far["diff"] < far["high"]
    lean = depth[(depth["variant_label"] == "lean") & (depth["loops"] == 4)].set_index("seed")
    parcae = depth[(depth["variant_label"] == "parcae") & (depth["loops"] == 4)].set_index("seed")
    expected = {s: lean.loc[s, "far_copy_loss"] - parcae.loc[s, "far_copy_loss"] for s in SEEDS}
    assert far["per_seed"] == expected
    assert far["diff"] == pytest.approx(sum(expected.values()) / 3, rel=1e-9)
    # another distance is another definition of the tokens: nothing to compare
    assert far_copy.paired_difference(depth, "lean", "parcae", distance=500).empty
