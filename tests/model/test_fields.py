"""The field toolkit's `optional_text`: None and non-empty strings pass; anything else is refused with
the field's name and what it accepts."""

from __future__ import annotations

import pytest

from looplab.model import fields
from looplab.model.errors import ConfigError


@pytest.mark.parametrize("value", [None, "runs/x", "a"])
def test_optional_text_passes_none_and_non_empty_strings(value):
    assert fields.optional_text("checkpoint", value) == value


@pytest.mark.parametrize("value", ["", 3, ["runs/x"]])
def test_optional_text_refuses_the_rest_naming_field_and_what(value):
    with pytest.raises(ConfigError, match=r"^checkpoint: expected a path string, got "):
        fields.optional_text("checkpoint", value, "a path string")


def test_with_defaults_fills_what_is_left_out_and_refuses_unknown_keys():
    import dataclasses

    import pytest

    from looplab.model import fields
    from looplab.model.errors import ConfigError

    @dataclasses.dataclass
    class Spec:
        a: int = 1
        b: str = "x"

    assert fields.with_defaults("spec", {"b": "y"}, Spec) == {"a": 1, "b": "y"}
    with pytest.raises(ConfigError, match="spec: unknown key 'c'; accepted: a, b"):
        fields.with_defaults("spec", {"c": 2}, Spec)
