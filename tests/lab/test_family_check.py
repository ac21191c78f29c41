"""`looplab family check NAME`: the contract's conformance check from the command line, with the
capability table, from another directory, and refusals that name what is wrong (exit 1 for a family
that breaks the contract, 2 for a bad flag)."""

from __future__ import annotations

import pytest
from torch import nn

from looplab.lab.cli import main

HERE = "tests.lab.test_family_check"


class _IgnoresLoops(nn.Module):
    """A broken family: its forward takes a loop count and ignores it."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.embed, self.head = nn.Embedding(vocab, 8), nn.Linear(8, vocab)

    def forward(self, idx, loops: int = 1):
        return self.head(self.embed(idx))


def ignores_loops(config):
    return _IgnoresLoops(config["vocab_size"])


def wrong_shape(config):
    class Half(_IgnoresLoops):
        def forward(self, idx, loops: int = 1):
            return self.head(self.embed(idx))[..., :2] * loops

    return Half(config["vocab_size"])


def test_a_conforming_family_prints_its_capability_table(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # from another directory: the family is found by its package
    assert (
        main(["family", "check", "families.ouro:factory", "--config", '{"d_model": 32}', "--loops", "3"]) == 0
    )
    out = capsys.readouterr().out
    assert "family 'families.ouro:factory': conforms" in out
    rows = {line.split()[0]: line.split()[1] for line in out.splitlines()[5:]}
    assert rows["exit_gate"] == rows["training_loss"] == rows["readout"] == "present"
    assert rows["sample_loops"] == "fallback" and "the grid's fixed loops" in out
    assert "at loops=3 (its own flops_per_token)" in out


def test_the_example_family_shows_its_fallbacks_and_measured_flops(capsys):
    assert (
        main(["family", "check", "examples.universal_transformer:factory", "--config", '{"d_model": 16}'])
        == 0
    )
    out = capsys.readouterr().out
    assert "measured with FlopCounterMode" in out and "exits emulated from separate forwards" in out


def test_looplabs_own_family_is_checked_and_priced_by_its_flop_model(capsys):
    assert main(["family", "check", "looped"]) == 0
    out = capsys.readouterr().out
    assert "looplab's own FLOP model" in out and "exit_gate        fallback" in out


@pytest.mark.parametrize(
    ("name", "config", "said"),
    [
        (f"{HERE}:ignores_loops", None, "same logits at loops=1 and loops=2"),
        (f"{HERE}:wrong_shape", None, "expected a tensor of shape (B, T, V)"),
        ("families.ouro:factory", '{"objective": "kl"}', "family_config: objective: expected one of entropy"),
        ("families.nosuch:factory", None, "module 'families.nosuch' does not import"),
        (f"{HERE}:nosuch", None, "nosuch"),
    ],
)
def test_a_broken_family_is_refused_naming_what_is_wrong(capsys, name, config, said):
    argv = ["family", "check", name] + (["--config", config] if config else [])
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("looplab family check: refused: family ") and said in err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--config", "[1, 2]"], "--config: expected a JSON object"),
        (["--config", '{"d_model": 32'], "--config: expected a JSON object; Expecting"),
        (["--config", '{"vocab_size": 9}'], "--config: vocab_size is set by looplab"),
        (["--vocab-size", "1"], "--vocab-size: expected an int >= 2"),
        (["--loops", "0"], "--loops: expected an int >= 1"),
    ],
)
def test_bad_flags_are_refused_naming_the_flag(capsys, argv, said):
    assert main(["family", "check", "families.ouro:factory", *argv]) == 2
    assert said in capsys.readouterr().err
