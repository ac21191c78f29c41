"""Text → token shards on disk → batches that are a pure function of (seed, step).

`DataSpec` names a corpus (see workers/corpus.py: "offline", a local file or dir, "hf:NAME[:CONFIG]")
and a tokenizer (see workers/tokenizer.py: "byte", "bpe" with `vocab_size`, or a tokenizer.json path).

`prepare(spec)` tokenizes once into `$LOOPLAB_CACHE/<key>/{train,val}.bin` (uint16, or uint32 for
vocabularies over 65,536), where key hashes (corpus identity, tokenizer identity), and memory-maps
them; later runs reuse the files. Shards are written to temp names and renamed, `meta.json` last,
under a file lock, so concurrent jobs build a cache once and a crash never leaves a half shard.

`get_batch(train, B, T, seed, step)` draws random windows from a generator seeded by (seed, step):
resuming at step s needs no loader state (`rows=` reads only some global rows of that batch).
`val_chunks` is the fixed validation set: the first `eval_tokens` of the val shard in `seq_len` windows.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from model import fields
from model.errors import ConfigError
from workers.corpus import LOCAL_EXTS, VAL_PERMILLE, cache_root, corpus_identity, documents, is_val
from workers.tokenizer import Tokenizer, load_tokenizer, train_bpe

__all__ = ["DataSpec", "Shards", "prepare", "get_batch", "val_chunks", "documents", "is_val", "cache_root"]

CACHE_VERSION = 1
DOC_SEP = "\n\n"  # joins documents in a shard (byte vocab has no room for a special token)

# Incremented whenever a shard is tokenized: tests prove the second run reuses the cache.
TOKENIZE_COUNT = 0


@dataclass(frozen=True)
class DataSpec:
    corpus: str = "offline"
    """offline (the Python standard library's sources and docs), a local file or dir, or hf:NAME[:CONFIG]"""
    tokenizer: str = "byte"
    """byte, bpe (trained on the corpus) or a path to a tokenizer.json"""
    vocab_size: int = 512
    """BPE vocabulary size (bpe only)"""

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> DataSpec:
        d = fields.known_keys("data", {} if d is None else d, cls)
        if "vocab_size" in d:  # 512.0 from JSON is 512, so equal specs hash equally
            d["vocab_size"] = fields.integer("data.vocab_size", d["vocab_size"], lo=257, hi=2**31)
        spec = cls(**d)
        spec.check()
        return spec

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def check(self) -> None:
        """Everything that can be checked without reading the corpus (existence of local paths)."""
        c, t, v = self.corpus, self.tokenizer, self.vocab_size
        if not isinstance(c, str) or not c:
            raise ConfigError("data.corpus: must be 'offline', 'hf:NAME[:CONFIG]' or a local path")
        if c != "offline" and not c.startswith("hf:"):
            p = Path(c).expanduser()
            if not p.exists():
                raise ConfigError(f"data.corpus: path {c!r} does not exist")
            if p.is_file() and p.suffix not in LOCAL_EXTS:
                raise ConfigError(
                    f"data.corpus: {c!r} has suffix {p.suffix!r}; accepted: {sorted(LOCAL_EXTS)}"
                )
        if c.startswith("hf:") and not c[3:].split(":")[0]:
            raise ConfigError("data.corpus: 'hf:' needs a dataset name, e.g. 'hf:HuggingFaceFW/fineweb-edu'")
        if not isinstance(t, str) or not t:
            raise ConfigError("data.tokenizer: must be 'byte', 'bpe' or a path to a tokenizer.json")
        if t not in ("byte", "bpe") and not Path(t).expanduser().is_file():
            raise ConfigError(f"data.tokenizer: {t!r} is neither 'byte', 'bpe' nor an existing file")
        fields.integer("data.vocab_size", v, lo=257, hi=2**31)


def _key(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _tokenizer_identity(spec: DataSpec) -> dict[str, Any]:
    if spec.tokenizer == "byte":
        return {"byte": 256}
    if spec.tokenizer == "bpe":
        return {"bpe": spec.vocab_size}
    return {"file_sha256": hashlib.sha256(Path(spec.tokenizer).expanduser().read_bytes()).hexdigest()}


# ------------------------------------------------------------------------------------------- shards


@dataclass
class Shards:
    """A tokenized corpus: memory-mapped train/val tokens plus what bits-per-byte needs."""

    dir: Path
    train: np.ndarray
    val: np.ndarray
    tokenizer: Tokenizer
    token_bytes: np.ndarray  # (vocab,) bytes per token id
    meta: dict[str, Any]

    @property
    def vocab_size(self) -> int:
        return int(self.meta["vocab_size"])


def _write_shards(spec: DataSpec, tok: Tokenizer, d: Path, dtype: np.dtype) -> dict[str, Any]:
    from tqdm import tqdm

    global TOKENIZE_COUNT
    TOKENIZE_COUNT += 1
    sep = tok.encode_batch([DOC_SEP])[0]
    files = {s: open(d / f"{s}.bin.tmp", "wb") for s in ("train", "val")}  # noqa: SIM115
    counts = {s: {"tokens": 0, "docs": 0, "bytes": 0} for s in files}
    batch: list[tuple[str, str]] = []

    def flush() -> None:
        for (doc_id, text), ids in zip(batch, tok.encode_batch([t for _, t in batch])):
            s = "val" if is_val(doc_id) else "train"
            arr = np.asarray(ids + sep, dtype=dtype)
            files[s].write(arr.tobytes())
            c = counts[s]
            c["tokens"] += len(arr)
            c["docs"] += 1
            c["bytes"] += len(text.encode("utf-8")) + len(DOC_SEP)
        batch.clear()

    try:
        for item in tqdm(
            documents(spec.corpus),
            desc="tokenizing",
            unit="doc",
            file=sys.stderr,
            mininterval=2.0,
            disable=None,
        ):
            batch.append(item)
            if len(batch) >= 512:
                flush()
        flush()
        for s, f in files.items():
            f.flush()
            os.fsync(f.fileno())
            f.close()
            os.replace(d / f"{s}.bin.tmp", d / f"{s}.bin")
    finally:
        for f in files.values():
            f.close()
    return counts


def _ident(spec: DataSpec) -> dict[str, Any]:
    return {
        "v": CACHE_VERSION,
        "corpus": corpus_identity(spec.corpus),
        "val_permille": VAL_PERMILLE,
        "tok": _tokenizer_identity(spec),
    }


def is_cached(spec: DataSpec) -> bool:
    """True when `prepare(spec)` would only memory-map existing shards."""
    try:
        return (cache_root() / _key(_ident(spec)) / "meta.json").exists()
    except (OSError, ConfigError):
        return False


def prepare(spec: DataSpec) -> Shards:
    """Tokenize `spec.corpus` once (cached under $LOOPLAB_CACHE) and memory-map the shards."""
    from filelock import FileLock

    spec.check()
    ident = _ident(spec)
    d = cache_root() / _key(ident)
    d.mkdir(parents=True, exist_ok=True)
    with FileLock(str(d / ".lock")):
        meta_path = d / "meta.json"
        if not meta_path.exists():
            tok_path: Path | None = None
            if spec.tokenizer == "bpe":
                tok_path = d / "tokenizer.json"
                if not tok_path.exists():
                    train_bpe(spec.corpus, spec.vocab_size, tok_path)
            elif spec.tokenizer != "byte":
                tok_path = d / "tokenizer.json"
                tok_path.write_bytes(Path(spec.tokenizer).expanduser().read_bytes())
            tok = load_tokenizer(tok_path)
            dtype = np.dtype(np.uint16 if tok.vocab_size <= 2**16 else np.uint32)
            counts = _write_shards(spec, tok, d, dtype)
            np.save(d / "token_bytes.npy", tok.token_bytes())
            meta = {
                "ident": ident,
                "spec": spec.to_dict(),
                "dtype": dtype.name,
                "vocab_size": tok.vocab_size,
                "tokenizer": "tokenizer.json" if tok_path else None,
                **counts,
            }
            tmp = d / "meta.json.tmp"
            tmp.write_text(json.dumps(meta, indent=1, sort_keys=True))
            os.replace(tmp, meta_path)  # meta.json last: its presence means the cache is complete
    meta = json.loads(meta_path.read_text())
    if meta["train"]["tokens"] < 2 or meta["val"]["tokens"] < 2:
        raise ConfigError(
            f"data.corpus: {spec.corpus!r} is too small to split into train and validation "
            f"({meta['train']['docs']} train / {meta['val']['docs']} val documents)"
        )
    tok = load_tokenizer(d / meta["tokenizer"] if meta["tokenizer"] else None)
    mm = {s: np.memmap(d / f"{s}.bin", dtype=meta["dtype"], mode="r") for s in ("train", "val")}
    return Shards(d, mm["train"], mm["val"], tok, np.load(d / "token_bytes.npy"), meta)


# ------------------------------------------------------------------------------------------ batches


def get_batch(tokens: np.ndarray, batch_size: int, seq_len: int, seed: int, step: int, rows=None):
    """The training batch at `step`: random windows drawn from a generator seeded by (seed, step), so a
    resumed run needs no loader state. Returns int64 tensors x, y of shape (B, T); with `rows` (global
    row indices of the batch of `batch_size`), just those rows of it, in that order, (len(rows), T):
    every row's window is a function of (seed, step, row), whatever micro-batch or rank reads it."""
    import torch

    if len(tokens) <= seq_len + 1:
        raise ConfigError(f"seq_len: {seq_len} is longer than the train shard ({len(tokens)} tokens)")
    rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, int(step), 0x10091AB])
    offs = rng.integers(0, len(tokens) - seq_len - 1, size=batch_size)
    if rows is not None:
        offs = offs[np.asarray(rows, dtype=np.int64)]
    win = np.stack([np.asarray(tokens[o : o + seq_len + 1], dtype=np.int64) for o in offs])
    win_t = torch.from_numpy(win)
    return win_t[:, :-1].contiguous(), win_t[:, 1:].contiguous()


def val_chunks(tokens: np.ndarray, eval_tokens: int, seq_len: int):
    """The fixed validation set: the first `eval_tokens` of the val shard as (N, seq_len+1) windows."""
    import torch

    n = max(1, min(eval_tokens // seq_len, (len(tokens) - 1) // seq_len))
    if (len(tokens) - 1) < seq_len:
        raise ConfigError(f"seq_len: {seq_len} is longer than the validation shard ({len(tokens)} tokens)")
    arr = np.asarray(tokens[: n * seq_len + 1], dtype=np.int64)
    idx = np.arange(n)[:, None] * seq_len + np.arange(seq_len + 1)[None, :]
    return torch.from_numpy(arr[idx])
