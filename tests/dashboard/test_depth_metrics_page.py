"""The Depth page's far-copy and bf16-convergence panels on the fixture database (AppTest)."""

from __future__ import annotations

import pytest

from tests.dashboard.conftest import BF16_RESOLUTION, FAR_SHARE
from tests.dashboard.test_pages import frame_with, render, text_of


def test_depth_page_far_copy_pair_and_bf16_rounds(monkeypatch, fixture_url):
    at = render(monkeypatch, fixture_url, "depth")
    share = frame_with(at, "far_share", "sweeps")
    assert share["far_share"].tolist() == pytest.approx([FAR_SHARE] * len(share))
    at.selectbox(key="far_reference").set_value("parcae").run()
    at.selectbox(key="far_side").set_value("lean").run()
    assert not at.exception, [e.message for e in at.exception]
    paired = frame_with(at, "metric", "diff", "per_seed")
    far = paired[(paired["metric"] == "far_copy_loss") & (paired["loops"] == 4)].iloc[0]
    # lean − parcae at 4 loops: far = loss + 1 (+ 0.02 + 0.01 seed for lean); losses per seed
    # lean 3.105 / 3.125, parcae 3.30 / 3.35: per seed -0.175, -0.195 → mean -0.185
    assert far["diff"] == pytest.approx(-0.185) and far["n"] == 2 and far["method"] == "bootstrap"
    assert far["per_seed"] == "seed 0: -0.1750 · seed 1: -0.1950"
    near = paired[(paired["metric"] == "near_loss") & (paired["loops"] == 4)].iloc[0]
    assert near["diff"] == pytest.approx(-0.21)  # the near losses differ as the mean losses do
    # rel_change 0.5 / r is below 0.07 from round 8 at seed 0 (0.0625) and never at seed 1 (0.0725)
    bf16 = frame_with(at, "bf16_round", "never").set_index("variant_label")
    assert bf16.loc["lean", "bf16_round"] == 8 and bf16.loc["lean", "never"] == 1
    assert BF16_RESOLUTION == 0.07 and "first round whose relative change" in text_of(at)
