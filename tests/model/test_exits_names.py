"""The names of adaptive compute (model/exit_names.py): the strings grid files and the database hold,
the strategy labels, and the cell key written as a row's `config` and read back."""

from __future__ import annotations

import pytest

from looplab.model.errors import ConfigError
from looplab.model.exit_names import FIXED, CellKey, ExitRuleName, KVStrategy, strategy_label
from looplab.model.exits import ExitRule


def test_the_stored_strings_are_the_members_values():
    assert [str(r) for r in ExitRuleName] == ["state", "kl", "entropy", "argmax", "gate"]
    assert [str(s) for s in KVStrategy] == ["per_round", "latest", "first", "last_m"]
    assert FIXED == "fixed" and "kl" == ExitRuleName.KL and KVStrategy("last_m") is KVStrategy.LAST_M
    assert [r for r in ExitRuleName if r.reads_out] == ["kl", "entropy", "argmax"]
    assert [s for s in KVStrategy if s.changes_function] == ["first", "last_m"]


def test_strategy_labels_and_the_cell_key_round_trip():
    assert strategy_label("last_m", 2) == "last_m2" and strategy_label(KVStrategy.LATEST, None) == "latest"
    rule = ExitRule("argmax", 2, 2, 4)
    key = CellKey(rule.label, strategy_label(KVStrategy.LAST_M, 2))
    assert key.label() == "argmax>=2 | last_m2" and CellKey.parse(key.label()) == key
    assert not key.is_fixed and CellKey.parse("fixed | per_round") == CellKey(FIXED, "per_round")
    assert CellKey.parse("fixed | per_round").is_fixed
    for bad in ("fixed", " | per_round", "kl<0.01 | "):
        with pytest.raises(ValueError, match="config: expected 'rule | kv strategy'"):
            CellKey.parse(bad)


def test_an_exit_rule_keeps_its_name_as_the_enum():
    rule = ExitRule("kl", 0.01, 2, 4)
    assert (
        rule.rule is ExitRuleName.KL
        and rule.to_dict()["rule"] == "kl"
        and type(rule.to_dict()["rule"]) is str
    )
    with pytest.raises(
        ConfigError, match="exit.rule: unknown 'halt'; accepted: state, kl, entropy, argmax, gate"
    ):
        ExitRule("halt", 0.1)
