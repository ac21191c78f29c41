"""Tokenizers behind one interface: byte level (vocab 256, no training), a byte-level BPE trained with
the `tokenizers` library on a corpus' train split, or any tokenizer.json by path.

`encode_docs` turns a batch of documents into one token array (each document followed by the separator's
tokens) plus each document's token and byte counts: what a shard is written from. `ParallelEncoder` runs
it on a pool of worker processes (the Python side of encoding, and all of byte-level encoding, hold the
GIL), in order and with a bounded number of batches in flight, so memory stays bounded whatever the
corpus size and the output is the serial output byte for byte.
"""

from __future__ import annotations

import collections
import logging
import multiprocessing
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from looplab.model.errors import ConfigError
from looplab.workers.data.corpus import documents, is_val

log = logging.getLogger("looplab.workers.data.tokenizer")

BPE_TRAIN_MAX_CHARS = 400_000_000  # BPE trains on at most this much train text (hub corpora)


class Tokenizer:
    """Byte-level or a `tokenizers` tokenizer, behind one interface."""

    def __init__(self, hf=None, path: Path | None = None) -> None:
        self.hf, self.path = hf, path
        self.vocab_size = 256 if hf is None else hf.get_vocab_size()

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        if self.hf is None:
            return [list(t.encode("utf-8")) for t in texts]
        return [e.ids for e in self.hf.encode_batch(texts)]

    def encode_docs(
        self, texts: list[str | None], sep: str, dtype: np.dtype
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(tokens, token counts, byte counts) of a batch: `tokens` is every document's tokens followed by
        the tokens of `sep`, concatenated; a None entry (a document not wanted) counts 0 and adds nothing."""
        wanted = [t for t in texts if t is not None]
        sep_ids = self.encode_batch([sep])[0]
        per_doc = [np.asarray(ids + sep_ids, dtype=dtype) for ids in self.encode_batch(wanted)]
        sep_bytes = len(sep.encode("utf-8"))
        it = iter(per_doc)
        tokens, nbytes = [], []
        for t in texts:
            tokens.append(0 if t is None else len(next(it)))
            nbytes.append(0 if t is None else len(t.encode("utf-8")) + sep_bytes)
        flat = np.concatenate(per_doc) if per_doc else np.zeros(0, dtype=dtype)
        return flat, np.asarray(tokens, dtype=np.int64), np.asarray(nbytes, dtype=np.int64)

    def decode(self, ids: list[int]) -> str:
        if self.hf is None:
            return bytes(ids).decode("utf-8", errors="replace")
        return self.hf.decode(ids)

    def token_bytes(self) -> np.ndarray:
        """UTF-8 bytes each token stands for (for bits per byte)."""
        if self.hf is None:
            return np.ones(256, dtype=np.int64)
        byte_level = "ByteLevel" in self.hf.to_str()
        out = np.zeros(self.vocab_size, dtype=np.int64)
        for i in range(self.vocab_size):
            tok = self.hf.id_to_token(i) or ""
            # byte-level BPE writes each byte as one printable character
            out[i] = len(tok) if byte_level else len(self.hf.decode([i]).encode("utf-8"))
        return out


def train_bpe(corpus: str, vocab_size: int, out: Path) -> int:
    """Train a byte-level BPE of (at most) `vocab_size` tokens on the train split's first
    `BPE_TRAIN_MAX_CHARS` characters of `corpus`, save it at `out`; returns the vocabulary it got, which is
    smaller than asked when the text has too few distinct pairs left to merge (logged as a warning)."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    def train_texts() -> Iterator[str]:
        n = 0
        for doc_id, text in documents(corpus):
            if not is_val(doc_id):
                yield text
                n += len(text)
                if n > BPE_TRAIN_MAX_CHARS:
                    return

    tok = HFTokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
        show_progress=False,
    )
    log.info("training a %d-token BPE on %s", vocab_size, corpus)
    tok.train_from_iterator(train_texts(), trainer=trainer)
    tmp = out.with_suffix(".tmp")
    tok.save(str(tmp))
    os.replace(tmp, out)
    got = tok.get_vocab_size()
    if got < vocab_size:
        log.warning(smaller_vocab_message(vocab_size, got))
    return got


def smaller_vocab_message(asked: int, got: int) -> str:
    return (
        f"tokenizer: asked a {asked:,}-token BPE, got {got:,} tokens (the corpus has too little text for "
        f"more merges); the model, its parameter count and its FLOPs use {got:,}"
    )


def load_tokenizer(path: str | Path | None) -> Tokenizer:
    if path is None:
        return Tokenizer()
    from tokenizers import Tokenizer as HFTokenizer

    try:
        return Tokenizer(HFTokenizer.from_file(str(path)), Path(path))
    except Exception as e:
        raise ConfigError(f"data.tokenizer: cannot load {str(path)!r}: {e}") from e


# ------------------------------------------------------------------------------------- in parallel

_WORKER: Tokenizer | None = None  # the tokenizer of a ParallelEncoder worker process
# A batch (at most a few MB of text) takes seconds; this long without its result means the workers never
# came up (e.g. a spawned child that failed re-running its parent's __main__, which Pool keeps replacing)
RESULT_TIMEOUT_S = 600.0


def _init_worker(path: str | None) -> None:
    global _WORKER
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one thread per process: the pool is the parallelism
    _WORKER = load_tokenizer(path)


def _encode_in_worker(args: tuple[list[str | None], str, str]):
    texts, sep, dtype = args
    assert _WORKER is not None
    return _WORKER.encode_docs(texts, sep, np.dtype(dtype))


class ParallelEncoder:
    """`encode_docs` over a stream of batches on `processes` worker processes, results in input order.

    At most `2 * processes` batches are in flight (submitted, not yet taken back), so memory is bounded
    by the batch size whatever the stream's length; the stream is pulled lazily, one batch each time a
    result is taken, so a caller's state read by the stream's generator is at most that far behind.
    `processes=1` encodes in the calling process (no pool). Workers are spawned (not forked: the caller
    may hold threads, e.g. torch's or Ray's) and load the tokenizer from its file."""

    def __init__(self, tokenizer: Tokenizer, processes: int, sep: str, dtype: np.dtype) -> None:
        self.tokenizer, self.processes, self.sep, self.dtype = tokenizer, processes, sep, np.dtype(dtype)
        self.pool = None
        if processes > 1:
            path = None if tokenizer.path is None else str(tokenizer.path)
            ctx = multiprocessing.get_context("spawn")
            self.pool = ctx.Pool(processes, initializer=_init_worker, initargs=(path,))

    def map(self, batches: Iterable[list[str | None]]) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        if self.pool is None:
            for texts in batches:
                yield self.tokenizer.encode_docs(texts, self.sep, self.dtype)
            return
        pending: collections.deque = collections.deque()
        it = iter(batches)
        for texts in it:
            pending.append(self.pool.apply_async(_encode_in_worker, ((texts, self.sep, self.dtype.name),)))
            if len(pending) >= 2 * self.processes:
                break
        while pending:
            try:
                result = pending.popleft().get(RESULT_TIMEOUT_S)
            except multiprocessing.TimeoutError:
                raise RuntimeError(
                    f"tokenizing: no result from the {self.processes} tokenizer processes in "
                    f"{RESULT_TIMEOUT_S:.0f} s (they may have failed to start); rerun with processes=1 "
                    "to tokenize in this process"
                ) from None
            nxt = next(it, None)
            if nxt is not None:
                pending.append(self.pool.apply_async(_encode_in_worker, ((nxt, self.sep, self.dtype.name),)))
            yield result

    def close(self) -> None:
        if self.pool is not None:
            self.pool.terminate()
            self.pool.join()
            self.pool = None

    def __enter__(self) -> ParallelEncoder:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
