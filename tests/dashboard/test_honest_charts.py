"""Charts that cannot suggest what is not there: "Loss by architecture" draws points (no line through
variants of different recipes), named series take distinct colour-blind-safe hues, and the Iso-FLOP
table lists only blocks with something to compare."""

from __future__ import annotations

import itertools
import json

import pandas as pd
from streamlit.testing.v1 import AppTest

from looplab.analysis import comparison
from looplab.dashboard import ui
from tests.dashboard.test_curve_smoothing import APP, layers, mark


def _rgb(hex_colour: str) -> tuple[int, int, int]:
    return tuple(int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))


def test_the_palette_has_sixteen_distinct_hues_and_every_named_colour_uses_it():
    assert len(set(ui.PALETTE)) == len(ui.PALETTE) == 16
    closest = min(
        sum((x - y) ** 2 for x, y in zip(_rgb(a), _rgb(b))) ** 0.5
        for a, b in itertools.combinations(ui.PALETTE, 2)
    )
    assert closest > 55  # no two the light and dark of one hue (tableau20's nearest pair: 31)
    scale = ui.color("variant_label").to_dict()["scale"]
    assert scale == {"range": list(ui.PALETTE)}
    assert ui.color("d_model", numeric=True).to_dict()["scale"] == {"scheme": "viridis"}


def test_loss_by_architecture_draws_points_not_a_line(monkeypatch, fixture_db):
    monkeypatch.setenv("LOOPLAB_DB", fixture_db[0])
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.switch_page("views/compare.py").run()
    assert not at.exception, [e.message for e in at.exception]
    x = at.selectbox(key="arch_x").value
    charts = [layers(json.loads(c.proto.spec)) for c in at.get("vega_lite_chart")]
    (arch,) = [
        leaves for leaves in charts if any(leaf["encoding"].get("x", {}).get("field") == x for leaf in leaves)
    ]
    kinds = sorted(mark(leaf)["type"] for leaf in arch)
    assert kinds == ["point", "rule"], kinds  # the mean as points, the min–max as rules; no line
    colours = [leaf["encoding"]["color"] for leaf in arch if "color" in leaf["encoding"]]
    assert colours and all(
        "scheme" not in c.get("scale", {}) or c["scale"]["scheme"] == "viridis" for c in colours
    )
    assert "points, not a line" in "\n".join(c.value for c in at.caption)


def _evals(flops: dict[str, float]) -> pd.DataFrame:
    rows = []
    for label, train_flops in flops.items():
        for seed in (0, 1):
            rows.append(
                dict(
                    job_id=len(rows) + 1,
                    variant_id=label,
                    variant_label=label,
                    recipe=label,
                    size="small",
                    seed=seed,
                    train_flops=train_flops,
                    tokens=61440,
                    budget_tokens=61440,
                    eval_loss=2.0 + 0.01 * seed,
                    eval_loops=4,
                    loop_rule="sweep @ trained",
                )
            )
    return pd.DataFrame(rows)


def test_the_iso_flop_table_lists_only_blocks_with_two_variants():
    # the demo's case: every variant alone in its FLOP class (2x apart) -> nothing to compare
    apart = comparison.iso_flop_table(_evals({"parcae": 2.0e12, "lean": 1.0e12, "plain": 4.0e11}))
    assert apart.empty
    near = comparison.iso_flop_table(_evals({"parcae": 2.0e12, "lean8": 1.96e12, "plain": 4.0e11}))
    assert sorted(near["variant_label"]) == ["lean8", "parcae"]
    assert near["flops"].nunique() == 1
