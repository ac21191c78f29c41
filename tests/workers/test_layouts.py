"""workers/layouts.py: the importer learns published layouts from the families that declare them."""

from __future__ import annotations

import types

import pytest

from looplab.model.errors import ConfigError
from looplab.workers import layouts


def _layout(model_type: str) -> types.SimpleNamespace:
    return types.SimpleNamespace(MODEL_TYPE=model_type, FAMILY=f"{model_type}:factory")


def test_every_family_package_is_asked_and_huginn_and_ouro_answer():
    found = layouts.published_layouts()
    assert set(found) == {"huginn_raven", "ouro"}  # MoR publishes no layout of its own (published-models.md)
    assert found["huginn_raven"].FAMILY == "families.huginn:factory"
    assert found["ouro"].FAMILY == "families.ouro:factory"


def test_a_family_outside_looplab_adds_its_layout_and_a_second_claim_is_refused():
    mine, other = _layout("mine"), _layout("huginn_raven")
    owners = [("a", types.SimpleNamespace(PUBLISHED_LAYOUTS=(mine,))), ("b", types.SimpleNamespace())]
    assert layouts.collect(owners) == {"mine": mine}
    clash = [("families.huginn", types.SimpleNamespace(PUBLISHED_LAYOUTS=(_layout("huginn_raven"),)))]
    with pytest.raises(ConfigError, match="'huginn_raven': declared by both families.huginn and theirs"):
        layouts.collect([*clash, ("theirs", types.SimpleNamespace(PUBLISHED_LAYOUTS=(other,)))])
