"""The test split: the validation stream's continuation, built lazily, touching no prepared byte."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from looplab.model.errors import ConfigError
from looplab.workers.data import shards as data
from looplab.workers.evaluate.heldout import heldout_dir, heldout_tokens

CUT = 300  # VAL_TOKENS for these tests: the validation split and the test split hold 300 tokens each


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    """A 400-paragraph text corpus, its own cache, and a validation split of CUT tokens."""
    monkeypatch.setenv("LOOPLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(data, "VAL_TOKENS", CUT)
    f = tmp_path / "corpus.txt"
    f.write_text(
        "\n\n".join(f"paragraph {i}: the quick brown fox jumps over the lazy dog." for i in range(400))
    )
    return data.DataSpec(corpus=str(f), tokenizer="byte")


def _val_stream(corpus: str) -> np.ndarray:
    """The validation documents' bytes in corpus order, each followed by the separator (byte tokens)."""
    text = "".join(t + data.DOC_SEP for i, t in data.documents(corpus) if data.is_val(i))
    return np.frombuffer(text.encode(), dtype=np.uint8).astype(np.uint16)


def _digests(d) -> dict[str, str]:
    return {
        n: hashlib.sha256((d / n).read_bytes()).hexdigest() for n in ("train.bin", "val.bin", "meta.json")
    }


def test_the_split_continues_the_validation_stream_and_changes_no_prepared_byte(tiny):
    shards = data.prepare(tiny)
    before = _digests(shards.dir)
    stream = _val_stream(tiny.corpus)
    assert len(stream) > 2 * CUT  # the corpus has room for both splits
    assert np.array_equal(np.asarray(shards.val), stream[:CUT])
    test = heldout_tokens(tiny, shards)
    assert np.array_equal(np.asarray(test), stream[CUT : 2 * CUT])
    assert _digests(shards.dir) == before  # train.bin, val.bin and meta.json are byte-identical
    assert sorted(p.name for p in heldout_dir(shards).iterdir()) == [".lock", "test.bin", "test.json"]
    # built once: asked again, it is read (a preparation opened afresh reads the same split)
    mtime = (heldout_dir(shards) / "test.bin").stat().st_mtime_ns
    again = heldout_tokens(tiny, data.prepare(tiny))
    assert np.array_equal(np.asarray(again), np.asarray(test))
    assert (heldout_dir(shards) / "test.bin").stat().st_mtime_ns == mtime


def test_a_short_corpus_gives_a_shorter_split_and_says_so(tiny, monkeypatch, caplog):
    n = len(_val_stream(tiny.corpus))
    monkeypatch.setattr(data, "VAL_TOKENS", n - 50)  # only 50 validation tokens follow the split
    shards = data.prepare(tiny)
    with caplog.at_level("WARNING"):
        test = heldout_tokens(tiny, shards)
    assert len(test) == 50 and "fewer than" in caplog.text
    assert np.array_equal(np.asarray(test), _val_stream(tiny.corpus)[n - 50 :])


def test_a_corpus_without_tokens_after_the_validation_split_is_refused(tiny, monkeypatch):
    monkeypatch.setattr(data, "VAL_TOKENS", 1 << 21)  # more than the corpus' validation documents hold
    shards = data.prepare(tiny)
    with pytest.raises(ConfigError, match="no tokens left for a test split.*validation documents hold"):
        heldout_tokens(tiny, shards)
    assert not (heldout_dir(shards) / "test.json").exists()


def test_a_split_that_does_not_continue_the_validation_split_is_refused(tiny):
    shards = data.prepare(tiny)
    heldout_tokens(tiny, shards)
    other = data.Shards(
        shards.dir,
        shards.train,
        np.zeros(CUT, dtype=np.uint16),
        shards.tokenizer,
        shards.token_bytes,
        shards.meta,
    )
    with pytest.raises(ConfigError, match="does not continue the validation split"):
        heldout_tokens(tiny, other)
