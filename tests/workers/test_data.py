"""Data pipeline: offline corpus, byte and BPE tokenizers with no network, cached shards, pure batches."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from looplab.model.errors import ConfigError
from looplab.workers.data import shards as data


def test_offline_corpus_is_deterministic_and_splits_by_document():
    a = list(data.documents("offline"))
    b = list(data.documents("offline"))
    assert [d for d, _ in a] == [d for d, _ in b]
    assert len({d for d, _ in a}) == len(a)  # unique ids
    assert sum(len(t) for _, t in a) > 1_000_000  # a corpus worth training on
    n_val = sum(data.is_val(d) for d, _ in a)
    assert 0.03 * len(a) < n_val < 0.15 * len(a)


def test_byte_shards_are_reused_without_retokenizing(looplab_cache):
    s1 = data.prepare(data.DataSpec(corpus="offline", tokenizer="byte"))
    count, mtime = data.TOKENIZE_COUNT, os.stat(s1.dir / "train.bin").st_mtime_ns
    s2 = data.prepare(data.DataSpec(corpus="offline", tokenizer="byte"))
    assert data.TOKENIZE_COUNT == count  # second run: no re-tokenization
    assert os.stat(s2.dir / "train.bin").st_mtime_ns == mtime
    assert s2.vocab_size == 256 and s2.train.dtype == np.uint16
    assert s2.meta["train"]["tokens"] == s2.meta["train"]["bytes"]  # byte level: one token per byte
    assert s2.tokenizer.decode([int(t) for t in s2.val[:50]]) == bytes(s2.val[:50].astype(np.uint8)).decode(
        "utf-8", "replace"
    )


def test_bpe_trains_offline_saves_tokenizer_and_is_reused(looplab_cache, tmp_path):
    spec = data.DataSpec(corpus="offline", tokenizer="bpe", vocab_size=512)
    s = data.prepare(spec)
    assert (s.dir / "tokenizer.json").exists() and s.vocab_size == 512
    assert s.meta["train"]["tokens"] < 0.7 * s.meta["train"]["bytes"]  # it compresses
    assert int(s.train.max()) < 512
    assert (s.token_bytes[256:] >= 2).all()  # merged tokens stand for several bytes
    count = data.TOKENIZE_COUNT
    assert data.prepare(spec).dir == s.dir and data.TOKENIZE_COUNT == count
    # an existing tokenizer.json by path gives the same tokens
    s3 = data.prepare(data.DataSpec(corpus="offline", tokenizer=str(s.dir / "tokenizer.json")))
    assert np.array_equal(np.asarray(s3.val[:1000]), np.asarray(s.val[:1000]))


def test_local_text_file_through_datasets(looplab_cache, tmp_path):
    f = tmp_path / "corpus.txt"
    f.write_text(
        "\n\n".join(f"paragraph {i}: the quick brown fox jumps over the lazy dog." for i in range(400))
    )
    s = data.prepare(data.DataSpec(corpus=str(f), tokenizer="byte"))
    assert s.meta["train"]["docs"] + s.meta["val"]["docs"] == 400
    assert s.meta["val"]["docs"] > 0


def test_batches_are_a_pure_function_of_seed_and_step(looplab_cache):
    s = data.prepare(data.DataSpec())
    x1, y1 = data.get_batch(s.train, 4, 16, seed=3, step=7)
    x2, y2 = data.get_batch(s.train, 4, 16, seed=3, step=7)
    x3, _ = data.get_batch(s.train, 4, 16, seed=3, step=8)
    assert torch.equal(x1, x2) and torch.equal(y1, y2) and not torch.equal(x1, x3)
    assert torch.equal(x1[:, 1:], y1[:, :-1])
    v = data.val_chunks(s.val, 1000, 16)
    assert v.shape == (62, 17) and torch.equal(v[0], torch.from_numpy(np.asarray(s.val[:17], dtype=np.int64)))


@pytest.mark.parametrize(
    "kw,field",
    [
        ({"corpus": "/no/such/file.txt"}, "data.corpus"),
        ({"tokenizer": "/no/such/tokenizer.json"}, "data.tokenizer"),
        ({"vocab_size": 10}, "data.vocab_size"),
        ({"corpus": "hf:"}, "data.corpus"),
    ],
)
def test_bad_data_spec_names_the_field(kw, field):
    with pytest.raises(ConfigError, match=field):
        data.DataSpec.from_dict(kw)


@pytest.mark.slow  # docs/testing.md: builds the corpus in two fresh processes
def test_offline_corpus_does_not_depend_on_what_the_caller_imported():
    """torch and ray patch stdlib functions and load lazy attributes; a Ray worker and a plain process
    once built corpora 3 documents apart, so the same seed trained to different losses."""
    import subprocess
    import sys
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[2])
    code = (
        "import hashlib, sys\n{imports}\nfrom workers.data.corpus import documents\n"
        "h = hashlib.sha256()\nfor i, t in documents('offline'):\n    h.update(i.encode()); h.update(t.encode())\n"
        "print(h.hexdigest())"
    )
    digests = [
        subprocess.run(
            [sys.executable, "-c", code.format(imports=imports)],
            cwd=root,
            text=True,
            capture_output=True,
            check=True,
        ).stdout.strip()
        for imports in ("", "import torch, ray, datasets, pandas")
    ]
    assert len(digests[0]) == 64 and digests[0] == digests[1]


def test_the_unigram_baseline_is_computed_once_per_preparation(looplab_cache, tmp_path):
    f = tmp_path / "ab.txt"  # a corpus whose token frequencies are known: the bytes 'a', 'b' and '\n'
    f.write_text("\n\n".join("aaab" * 50 for _ in range(300)))
    s = data.prepare(data.DataSpec(corpus=str(f), tokenizer="byte"))
    counts = np.bincount(np.asarray(s.train), minlength=256)
    assert set(np.flatnonzero(counts)) <= {ord("a"), ord("b"), ord("\n")}
    p = counts[counts > 0] / counts.sum()
    assert data.unigram_xent(s) == pytest.approx(float(-(p * np.log(p)).sum()), rel=1e-12)
    assert 0.5 < data.unigram_xent(s) < np.log(3)  # mostly 'a': under a uniform guess over 3 tokens
    # kept beside the preparation's meta.json and read back, not counted again (a counted figure would
    # not be 1.25); a run on a prefix of the same preparation reads the same figure
    (s.dir / data.UNIGRAM_FILE).write_text('{"nats": 1.25, "tokens": 1}')
    assert data.unigram_xent(data.prepare(data.DataSpec(corpus=str(f), tokenizer="byte"))) == 1.25


def test_the_byte_corpus_unigram_baseline_is_far_above_a_trained_tiny_model(looplab_cache):
    """The figure docs/health.md gives for the demo's corpus: 3.30 nats, which the demo's 120-step runs
    are under from their first evaluation (val_loss 2.69-2.82 at step 19, ~1.9-2.1 at step 119)."""
    s = data.prepare(data.DataSpec(corpus="offline", tokenizer="byte"))
    assert 3.25 < data.unigram_xent(s) < 3.35 < np.log(256)


def test_a_preparation_the_run_cannot_write_to_still_gives_its_baseline(looplab_cache, tmp_path, monkeypatch):
    f = tmp_path / "ab.txt"
    f.write_text("\n\n".join("abbb" * 40 for _ in range(300)))
    s = data.prepare(data.DataSpec(corpus=str(f), tokenizer="byte"))
    expected = data._unigram(s)["nats"]

    def read_only(*a, **k):  # as a shared cache mounted read-only refuses the lock and the file
        raise PermissionError(13, "Read-only file system")

    monkeypatch.setattr(data, "_write_json", read_only)
    monkeypatch.setattr("filelock.FileLock.acquire", read_only)
    assert data.unigram_xent(s) == expected and not (s.dir / data.UNIGRAM_FILE).exists()
