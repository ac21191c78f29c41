"""Which cases of a parametrised test the fast tier runs (`make check`), the rest marked `slow` and run by
`make test` and CI. For a test repeated over every recipe whose cost is one compile or one forward per
recipe: the fast tier keeps the recipes that exercise each mechanism once (per-row loop counts with
truncated backprop, windowed rounds, no loop), and every recipe still runs in the full suite.
docs/testing.md lists each test that has slow cases, with its duration and why it cannot be cheaper.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest

# parcae: per-row loop counts and gradient-free early rounds; lean: windowed rounds after a full one;
# plain: the transformer without a loop
FAST_RECIPES = ("parcae", "lean", "plain")


def fast_few(values: Iterable[str], fast: Iterable[str] = FAST_RECIPES) -> list:
    """`values` as pytest params (ids unchanged), those not in `fast` marked slow."""
    keep = set(fast)
    return [pytest.param(v, id=str(v), marks=() if v in keep else pytest.mark.slow) for v in values]
