"""A family whose forward cannot take a context the decode benchmark will ask for is refused at
submission (model.contract `check_context`), naming `context_lens` and the family's limit, and nothing is
stored: else the bench fails with the same shape error on every attempt."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from looplab import Grid, Queue
from looplab.model.contract import check_context
from looplab.model.errors import ConfigError
from looplab.workers.evaluate.decode_bench import RECOMPUTE_MAX_CONTEXT
from tests.db_rows import rows
from tests.workers.conftest import tiny_spec

HERE = "tests.workers.test_family_context"


class Positions(nn.Module):
    """A looped MLP with a learned position table of the training length (`seq_len`), as GPT-2's."""

    def __init__(self, vocab_size: int, seq_len: int, d: int = 16) -> None:
        super().__init__()
        self.emb, self.pos = nn.Embedding(vocab_size, d), nn.Embedding(seq_len, d)
        self.fc, self.head = nn.Linear(d, d), nn.Linear(d, vocab_size)

    def forward(self, idx, loops: int = 1):
        h = self.emb(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for _ in range(loops):
            h = h + torch.tanh(self.fc(h))
        return self.head(h)


def positions(config):
    """Declares nothing: the submission finds the limit by a forward at the bench's context."""
    return Positions(config["vocab_size"], config["seq_len"])


def declared(config):
    """Declares its limit, the table's length."""
    module = Positions(config["vocab_size"], config["seq_len"])
    module.max_context = config["seq_len"]
    return module


def long_table(config):
    """A table of 4x the training length, declared: a bench up to that length is accepted."""
    module = Positions(config["vocab_size"], 4 * config["seq_len"])
    module.max_context = 4 * config["seq_len"]
    return module


def grid(family: str, context_lens: list[int]) -> Grid:
    bench = {"context_lens": context_lens, "batch_sizes": [1], "warmup": 1, "steps": 2}
    return Grid("pos", base=tiny_spec(family=family), then=["decode_bench"], follow={"decode_bench": bench})


@pytest.mark.parametrize(
    ("family", "expected"),
    [
        (
            "positions",
            "grid 'pos': follow.decode_bench.context_lens: family 'tests.workers.test_family_context:positions' "
            "cannot take a context of 128 tokens: its forward on (1, 128) token ids raised IndexError",
        ),
        (
            "declared",
            "grid 'pos': follow.decode_bench.context_lens: 128 tokens is more than family "
            "'tests.workers.test_family_context:declared' can take (its max_context is 32); accepted: "
            "context lengths up to 32",
        ),
    ],
)
def test_a_family_that_cannot_take_the_benchs_context_is_refused_naming_the_field(tmp_path, family, expected):
    q = Queue(db=tmp_path / "q.db", artifacts=tmp_path / "art")
    with pytest.raises(ConfigError) as e:
        q.submit([grid(f"{HERE}:{family}", [16, 128])])  # the training length is tiny_spec's 32
    assert expected in str(e.value)
    assert "trained at seq_len 32" in str(e.value) or "max_context" in str(e.value)
    assert rows(q, "SELECT COUNT(*) FROM jobs") == [(0,)]  # nothing stored, not even the train job


def test_a_family_that_takes_the_context_is_submitted(tmp_path):
    q = Queue(db=tmp_path / "q.db", artifacts=tmp_path / "art")
    q.submit([grid(f"{HERE}:long_table", [16, 128]), grid(f"{HERE}:positions", [8, 32])])
    assert rows(q, "SELECT kind, COUNT(*) FROM jobs GROUP BY kind ORDER BY kind") == [
        ("decode_bench", 2),
        ("train", 2),
    ]


def alone(family: str, context_lens: list[int]) -> Grid:
    """A decode bench on its own (no train job before it): the family, its shape and the bench's cells."""
    base = {"family": f"{HERE}:{family}", "seq_len": 32, "context_lens": context_lens, "batch_sizes": [1]}
    return Grid("alone", job="decode_bench", base={**base, "warmup": 1, "steps": 2})


@pytest.mark.parametrize(
    ("family", "expected"),
    [
        (
            "positions",
            "cannot take a context of 128 tokens: its forward on (1, 128) token ids raised IndexError",
        ),
        (
            "declared",
            "128 tokens is more than family 'tests.workers.test_family_context:declared' can take (its ",
        ),
    ],
)
def test_a_bench_on_its_own_that_its_family_cannot_take_is_refused_naming_the_field(
    tmp_path, family, expected
):
    """The same check as a follow-up's, for a grid of decode benches that follows no run: the longest
    context of any of its points, refused before anything is stored."""
    q = Queue(db=tmp_path / "q.db", artifacts=tmp_path / "art")
    fine = Grid("fine", job="decode_bench", base={"recipe": "lean", "size": "tiny", "context_lens": [64]})
    with pytest.raises(ConfigError) as e:
        q.submit([fine, alone(family, [16, 128])])
    assert "grid 'alone': context_lens: " in str(e.value)
    assert expected in str(e.value)
    assert rows(q, "SELECT COUNT(*) FROM jobs") == [(0,)]  # nothing stored, not even the other grid's


def test_a_bench_on_its_own_within_the_limit_is_submitted(tmp_path):
    """Within the limit it is stored; a context past the declared limit of a family without a KV cache is
    not refused, since the bench times such a family only up to RECOMPUTE_MAX_CONTEXT (the capability is
    discovered by the conformance check, as there is no train job's to read)."""
    q = Queue(db=tmp_path / "q.db", artifacts=tmp_path / "art")
    over = RECOMPUTE_MAX_CONTEXT + 1
    q.submit([alone("positions", [8, 32]), alone("declared", [16, over]), alone("long_table", [128])])
    assert rows(q, "SELECT kind, COUNT(*) FROM jobs GROUP BY kind") == [("decode_bench", 3)]
    with pytest.raises(
        ConfigError, match=r"grid 'alone': context_lens: 129 tokens is more than .*max_context is 128"
    ):
        q.submit([alone("long_table", [16, 129])])
    assert rows(q, "SELECT COUNT(*) FROM jobs") == [(3,)]


def test_the_check_itself_and_a_bad_declaration():
    config = {"vocab_size": 11, "seq_len": 8}
    assert check_context(f"{HERE}:declared", config, 8) == 8
    assert check_context(f"{HERE}:positions", config, 8) is None  # takes it, declares nothing
    with pytest.raises(ConfigError, match="cannot take a context of 9 tokens"):
        check_context(f"{HERE}:positions", config, 9)
    with pytest.raises(ConfigError, match=r"max_context 'long'; expected an int >= 1"):
        check_context(f"{HERE}:bad_declaration", config, 8)


def bad_declaration(config):
    module = Positions(config["vocab_size"], config["seq_len"])
    module.max_context = "long"
    return module
