"""The test-vs-validation agreement figure on hand-worked numbers."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis import heldout


def _depth(rows):
    return pd.DataFrame(rows, columns=["variant_label", "seed", "loops", "val_loss", "test_loss"])


def test_signs_of_each_pair_on_validation_and_test():
    depth = _depth(
        [
            # loops 1: b − a is -0.5 on validation (means over seeds 2.0 and 1.5) and -0.25 on test
            ("a", 0, 1, 2.0, 2.1),
            ("a", 1, 1, 2.0, 2.1),
            ("b", 0, 1, 1.4, 1.8),
            ("b", 1, 1, 1.6, 1.9),
            # loops 4: b − a is +0.1 on validation, -0.1 on test (they disagree); c has no test loss
            ("a", 0, 4, 1.0, 1.2),
            ("b", 0, 4, 1.1, 1.1),
            ("c", 0, 4, 0.9, None),
        ]
    )
    pairs = heldout.sign_agreement(depth)
    assert pairs[["loops", "variant", "reference"]].values.tolist() == [[1, "b", "a"], [4, "b", "a"]]
    assert pairs["val_diff"].tolist() == pytest.approx([-0.5, 0.1])
    assert pairs["test_diff"].tolist() == pytest.approx([-0.25, -0.1])
    assert pairs["agree"].tolist() == [True, False]
    assert heldout.agreement_share(pairs) == 0.5
    assert heldout.summary(pairs).startswith("1 of 2 variant pairs (50%)")


def test_without_test_losses_there_is_no_figure():
    depth = _depth([("a", 0, 1, 2.0, None), ("b", 0, 1, 1.0, None)])
    pairs = heldout.sign_agreement(depth)
    assert pairs.empty and list(pairs.columns) == heldout.COLUMNS
    assert heldout.agreement_share(pairs) is None
    assert heldout.sign_agreement(depth.drop(columns="test_loss")).empty  # a frame from before 0020
    assert "no two variants" in heldout.summary(pairs)
