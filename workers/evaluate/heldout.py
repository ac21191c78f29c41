"""The test split: the validation stream's next `VAL_TOKENS` tokens, built the first time it is asked.

The validation split (workers/data/shards.py) is the first `VAL_TOKENS` tokens of the validation documents'
stream (each document followed by the separator's tokens, in corpus order), cut wherever that count
falls, even inside a document. The test split is what follows in the same stream: tokens
`VAL_TOKENS .. 2 * VAL_TOKENS` of it (fewer when the corpus has fewer; `test.json` says how many and
the build logs a warning). No train or validation byte changes, and no preparation is touched: the
split lives beside the preparations of a (corpus, tokenizer), in `<base>/test/`, so every stored run,
its resume and its identity stay as they are.

The build re-tokenizes the validation documents with the preparation's own tokenizer and checks, token
for token, that the stream it regenerates begins with the preparation's `val.bin` before it keeps
anything after it (a mismatch is refused: the split would not continue that validation set). It runs
under a file lock; `test.bin` is written to a temporary file and renamed, and `test.json` is written
last (its presence means the split is complete), as a preparation's `meta.json` is.

A corpus whose validation documents hold no tokens after the validation split is refused, naming the
corpus and how many validation tokens it has.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from looplab.model.errors import ConfigError
from looplab.workers.data import shards as data
from looplab.workers.data.tokenizer import ParallelEncoder
from looplab.workers.reporter import Reporter

TEST_DIR = "test"  # under the base directory of a (corpus, tokenizer): shared by its preparations
TEST_VERSION = 1


def heldout_dir(shards: data.Shards) -> Path:
    """Where the test split of `shards`' corpus and tokenizer lives: beside its preparations."""
    return shards.dir.parent / TEST_DIR


def heldout_tokens(spec: data.DataSpec, shards: data.Shards, reporter: Reporter | None = None) -> np.ndarray:
    """The test split of `spec`'s corpus and tokenizer (memory-mapped), built on first use from the
    validation documents, after the `VAL_TOKENS` tokens that `shards.val` holds."""
    from filelock import FileLock

    d = heldout_dir(shards)
    d.mkdir(parents=True, exist_ok=True)
    with FileLock(str(d / ".lock")):
        if not (d / "test.json").exists():
            _build(spec, shards, d, reporter)
    meta = json.loads((d / "test.json").read_text())
    _check(meta, shards, d)
    return np.memmap(d / "test.bin", dtype=meta["dtype"], mode="r")


def refuse_short(corpus: str) -> None:
    """At submission: refuse a test split of a corpus that cannot have one, before its run is trained. The
    test split starts after the validation split's `VAL_TOKENS` tokens of the validation stream, and no
    tokenizer gives more tokens than the stream's UTF-8 bytes (a byte-level BPE merges bytes; byte fallback
    gives one token a byte): a local corpus whose validation stream holds at most `VAL_TOKENS` bytes has
    none, whatever its tokenizer. A hub corpus (`hf:`) is not read at submission; its build checks it."""
    if corpus.startswith("hf:"):
        return
    held = _val_bytes(corpus, data.VAL_TOKENS)
    if held <= data.VAL_TOKENS:
        raise ConfigError(
            f"test_split: corpus {corpus!r} has no tokens left for a test split: its validation documents "
            f"hold {held:,} bytes (so at most as many tokens), all inside the validation split of "
            f"{data.VAL_TOKENS:,} tokens; leave test_split out, or train on a corpus whose validation "
            "documents hold more (a local corpus or hf:NAME; docs/evaluation.md)"
        )


def _val_bytes(corpus: str, limit: int) -> int:
    """UTF-8 bytes of `corpus`' validation stream (documents and separators), counted until past `limit`."""
    sep, n = len(data.DOC_SEP.encode()), 0
    for batch in _val_texts(corpus):
        n += sum(len(t.encode()) + sep for t in batch if t is not None)
        if n > limit:
            break
    return n


def _val_digest(val: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(val).tobytes()).hexdigest()


def _check(meta: dict[str, Any], shards: data.Shards, d: Path) -> None:
    """The split in `d` continues this preparation's validation split (the same tokens, tokenizer, cut)."""
    if meta["val_sha256"] != _val_digest(shards.val) or meta["dtype"] != shards.meta["dtype"]:
        raise ConfigError(
            f"data: the test split in {d} does not continue the validation split of {shards.dir} "
            "(another tokenizer or cut); delete that directory to rebuild it"
        )


def _val_texts(corpus: str) -> Iterator[list[str | None]]:
    """Batches of the corpus' documents in order, each validation document's text, None for the others."""
    batch: list[str | None] = []
    for doc_id, text in data.documents(corpus):
        batch.append(text if data.is_val(doc_id) else None)
        if len(batch) >= data.BATCH_DOCS:
            yield batch
            batch = []
    if batch:
        yield batch


def _build(spec: data.DataSpec, shards: data.Shards, d: Path, reporter: Reporter | None) -> None:
    """Regenerate the validation stream, check its first len(val) tokens against `shards.val`, and keep
    its tokens VAL_TOKENS .. 2 * VAL_TOKENS as test.bin; then test.json (last)."""
    val, cap = shards.val, data.VAL_TOKENS
    if len(val) < cap:
        raise ConfigError(
            f"data.corpus: {spec.corpus!r} has no tokens left for a test split: its validation documents "
            f"hold {len(val):,} tokens, all in the validation split (the test split takes the next "
            f"{cap:,} after the first {cap:,})"
        )
    dtype = np.dtype(shards.meta["dtype"])
    pos = 0  # tokens of the validation stream seen
    tmp = d / "test.bin.tmp"
    with open(tmp, "wb") as out, ParallelEncoder(shards.tokenizer, 1, data.DOC_SEP, dtype) as encoder:
        for flat, _, _ in encoder.map(_val_texts(spec.corpus)):
            lo, hi = pos, pos + len(flat)
            if lo < cap:  # the part inside the validation split must be that split, token for token
                n = min(hi, cap) - lo
                if not np.array_equal(flat[:n], val[lo : lo + n]):
                    raise ConfigError(
                        f"data: the validation documents of {spec.corpus!r} no longer tokenize to the "
                        f"validation split in {shards.dir} (first difference within tokens {lo:,}..{lo + n:,}); "
                        "no test split is built from a stream that does not continue it"
                    )
            keep = flat[max(cap - lo, 0) : max(2 * cap - lo, 0)]
            out.write(keep.tobytes())
            pos = hi
            if pos >= 2 * cap:
                break
        out.flush()
        os.fsync(out.fileno())
    tokens = min(pos, 2 * cap) - cap
    if tokens <= 0:
        tmp.unlink()
        raise ConfigError(
            f"data.corpus: {spec.corpus!r} has no tokens left for a test split: its validation documents "
            f"hold exactly the {cap:,} tokens of the validation split"
        )
    os.replace(tmp, d / "test.bin")
    if tokens < cap:
        _say(
            reporter,
            f"test split of {spec.corpus!r}: {tokens:,} tokens, fewer than {cap:,} (the corpus ends)",
        )
    meta = {
        "v": TEST_VERSION,
        "ident": data._ident(spec),
        "dtype": dtype.name,
        "start": cap,  # the test split is tokens start .. start + tokens of the validation stream
        "tokens": tokens,
        "short": tokens < cap,
        "val_tokens": len(val),
        "val_sha256": _val_digest(val),
    }
    data._write_json(d / "test.json", meta)  # last: its presence means the split is complete


def _say(reporter: Reporter | None, message: str) -> None:
    data.log.warning(message)
    if reporter is not None:
        reporter.log(message, "WARNING")
