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


def test_looplabs_own_family_declares_the_parcae_layout_by_its_class_name():
    from looplab.families.looped import parcae_layout
    from looplab.model.names import BUILTIN_FAMILY

    found = layouts.published_classes()
    assert found == {"ParcaeConfig": parcae_layout}  # known by `_class_name`, not among the model_types
    assert found["ParcaeConfig"].FAMILY == BUILTIN_FAMILY
    assert "ParcaeConfig" not in layouts.published_layouts()


def test_a_layout_known_by_neither_key_is_refused_naming_its_owner():
    named = types.SimpleNamespace(CLASS_NAME="MineConfig", FAMILY="mine:factory")
    owners = [("a", types.SimpleNamespace(PUBLISHED_LAYOUTS=(named, _layout("mine"))))]
    assert layouts.collect(owners, "CLASS_NAME") == {"MineConfig": named}
    assert layouts.collect(owners) == {"mine": owners[0][1].PUBLISHED_LAYOUTS[1]}
    bare = [("theirs", types.SimpleNamespace(PUBLISHED_LAYOUTS=(types.SimpleNamespace(FAMILY="x:f"),)))]
    with pytest.raises(ConfigError, match="of theirs: declares neither MODEL_TYPE nor CLASS_NAME"):
        layouts.collect(bare)
