"""Tokenizers behind one interface: byte level (vocab 256, no training), a byte-level BPE trained with
the `tokenizers` library on a corpus' train split, or any tokenizer.json by path.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from model.errors import ConfigError
from workers.corpus import documents, is_val

log = logging.getLogger("looplab.workers.tokenizer")

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


def train_bpe(corpus: str, vocab_size: int, out: Path) -> None:
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


def load_tokenizer(path: str | Path | None) -> Tokenizer:
    if path is None:
        return Tokenizer()
    from tokenizers import Tokenizer as HFTokenizer

    try:
        return Tokenizer(HFTokenizer.from_file(str(path)), Path(path))
    except Exception as e:
        raise ConfigError(f"data.tokenizer: cannot load {str(path)!r}: {e}") from e
