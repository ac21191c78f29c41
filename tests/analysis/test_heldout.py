"""The test-vs-validation agreement figure on hand-worked numbers."""

from __future__ import annotations

import pandas as pd
import pytest

from looplab.analysis import heldout


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


def test_each_difference_has_its_interval_over_seeds_and_only_resolved_pairs_count_apart():
    """Three seeds each, paired by seed. loops 1: b − a per seed is −0.5, −0.4, −0.6 on validation
    (mean −0.5, sd 0.1: t(2) interval −0.5 ± 4.303·0.1/√3, excludes 0) and +0.1, −0.05, 0.0 on test (mean
    +0.0167, its interval spans 0): the signs differ but the pair is not resolved. loops 2: −0.3 ± 0.1 on
    both, resolved, and they agree."""
    a_val, b_val = [2.0, 2.1, 2.2], [1.5, 1.7, 1.6]
    a_test, b_test = [2.0, 2.0, 2.0], [2.1, 1.95, 2.0]
    rows = [("a", s, 1, a_val[s], a_test[s]) for s in range(3)]
    rows += [("b", s, 1, b_val[s], b_test[s]) for s in range(3)]
    rows += [("a", s, 2, 1.0, 1.1) for s in range(3)]
    rows += [("b", s, 2, 0.7 + d, 0.8 + d) for s, d in enumerate([-0.1, 0.0, 0.1])]
    pairs = heldout.sign_agreement(_depth(rows)).set_index("loops")
    half = 4.302653 * 0.1 / 3**0.5
    assert pairs.loc[1, "val_diff"] == pytest.approx(-0.5)
    assert (pairs.loc[1, "val_low"], pairs.loc[1, "val_high"]) == pytest.approx((-0.5 - half, -0.5 + half))
    assert pairs.loc[1, "test_low"] < 0 < pairs.loc[1, "test_high"]
    assert not pairs.loc[1, "agree"] and not pairs.loc[1, "resolved"]
    assert pairs.loc[2, "agree"] and pairs.loc[2, "resolved"]
    assert heldout.summary(pairs.reset_index()).endswith(
        "of the 1 whose difference is resolved on both (the interval over seeds excludes 0), 1 agree"
    )
