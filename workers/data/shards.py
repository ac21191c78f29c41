"""Text → token shards on disk → batches that are a pure function of (seed, step, row).

`DataSpec` names a corpus (see workers/data/corpus.py: "offline", a local file or dir, "hf:NAME[:CONFIG]"), a
tokenizer (see workers/data/tokenizer.py: "byte", "bpe" with `vocab_size`, or a tokenizer.json path) and how
many train tokens to prepare (`max_tokens`; none: the whole corpus).

A *preparation* tokenizes the corpus in its fixed document order into `train.bin` / `val.bin` (uint16, or
uint32 for vocabularies over 65,536; each document followed by the separator's tokens), the train split
cut at exactly `max_tokens` tokens and the validation split at `VAL_TOKENS`. Both splits are prefixes of
the same two streams (a document's split is `is_val` of its id), so:

- a preparation of N train tokens is byte for byte the first N tokens of any larger one (or of the whole
  corpus), and the validation split is the same documents however much is prepared: a run of N tokens
  may read the prefix of a larger preparation (`prepare` takes the smallest complete one that covers N,
  else builds one of exactly N), so jobs of different budgets on one corpus tokenize it once, while a
  run's identity stays (corpus, tokenizer, N): which preparation served it changes no byte it reads;
- a preparation is immutable once complete (`meta.json` written last): a larger need makes a new one
  beside it, never grows one that a running job reads.

Layout: `$LOOPLAB_CACHE/p2-<key>/` per (corpus, tokenizer, split rule), holding the tokenizer (a BPE is
trained there once, on a capped sample of the train split) and one directory per preparation, `all/`
or `n<N>/`. Building is resumable: every `piece_docs` documents the shards are flushed and fsynced and
`progress.json` records how far they are complete (atomically); a build killed at any point restarts
from the last piece, truncating what came after it, and ends byte-identical to an uninterrupted one.
Tokenization runs on `processes` worker processes (tokenizer.ParallelEncoder), in order.

`get_batch` reads the windows of a step. Sampler 1 draws window offsets uniformly with replacement from
a generator seeded by (seed, step): what every run did before samplers were versioned, and what a run on
a whole corpus (which it rarely reads through) still does. Sampler 2 cuts the train tokens into
non-overlapping windows and visits them in a seeded permutation per epoch, so every window is seen once
per epoch: a run whose data is sized to it (`max_tokens`) would otherwise see only ~63 % of its tokens.
`sampler_for` picks a new run's; the trainer keeps it in its checkpoint, so a run resumes with the
sampler it started with. Either way row r of step s is a pure function of (seed, s, r): resuming needs
no loader state, and `rows=` reads only some global rows of a step's batch (micro-batches, ranks).
`val_chunks` is the fixed validation set: the first `eval_tokens` of the val shard in `seq_len` windows.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import shutil
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

from looplab.model import fields
from looplab.model.errors import ConfigError
from looplab.workers.data.corpus import (
    LOCAL_EXTS,
    VAL_PERMILLE,
    cache_root,
    corpus_identity,
    documents,
    is_val,
    row_count,
)
from looplab.workers.data.tokenizer import (
    ParallelEncoder,
    Tokenizer,
    load_tokenizer,
    smaller_vocab_message,
    train_bpe,
)
from looplab.workers.reporter import REPORTED, JobInterrupted, Reporter

__all__ = ["DataSpec", "Shards", "prepare", "get_batch", "val_chunks", "documents", "is_val", "cache_root"]

log = logging.getLogger("looplab.workers.data.shards")

CACHE_VERSION = 2  # 2: preparations of max_tokens under one directory per corpus and tokenizer
DOC_SEP = "\n\n"  # joins documents in a shard (byte vocab has no room for a special token)
BUDGET = "budget"  # data.max_tokens derived from the train job's own budget (workers/train/spec.py)
# The validation split: the first VAL_TOKENS tokens of the validation documents, in corpus order, in
# every preparation (so runs on differently sized preparations of one corpus evaluate alike).
VAL_TOKENS = 1 << 21
PIECE_DOCS = 16_384  # documents per committed piece of a build
BATCH_DOCS, BATCH_CHARS = 256, 1 << 21  # one encoding batch: at most this many documents / characters
SAMPLER_WITH_REPLACEMENT, SAMPLER_PERMUTATION = 1, 2

# Incremented whenever a preparation is tokenized: tests prove later runs reuse the cache.
TOKENIZE_COUNT = 0


@dataclass(frozen=True)
class DataSpec:
    corpus: str = "offline"
    """offline (the Python standard library's sources and docs), a local file or dir, or hf:NAME[:CONFIG]"""
    tokenizer: str = "byte"
    """byte, bpe (trained on the corpus) or a path to a tokenizer.json"""
    vocab_size: int = 512
    """BPE vocabulary size (bpe only)"""
    max_tokens: int | None = None
    """train tokens to prepare and train on (the first ones of the corpus' train split); none: the whole
    corpus; "budget": the train job's own budget (the tokens of its whole steps, + 1; a time budget gets
    the whole corpus)"""

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> DataSpec:
        d = fields.known_keys("data", {} if d is None else d, cls)
        if "vocab_size" in d:  # 512.0 from JSON is 512, so equal specs hash equally
            d["vocab_size"] = fields.integer("data.vocab_size", d["vocab_size"], lo=257, hi=2**31)
        if d.get("max_tokens") is not None and d["max_tokens"] != BUDGET:
            d["max_tokens"] = _max_tokens(d["max_tokens"])
        spec = cls(**d)
        spec.check()
        return spec

    def to_dict(self) -> dict[str, Any]:
        """Canonical; `max_tokens` only when given, so specs from before it existed keep their identity."""
        d = asdict(self)
        if d["max_tokens"] is None:
            del d["max_tokens"]
        return d

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
        if self.max_tokens != BUDGET:
            _max_tokens(self.max_tokens, allow_none=True)

    def budgeted(self, tokens: int | None) -> DataSpec:
        """This spec with max_tokens "budget" replaced by what a run training `tokens` tokens reads:
        those tokens plus the last window's last target (None, a time budget: the whole corpus)."""
        if self.max_tokens != BUDGET:
            return self
        return DataSpec(self.corpus, self.tokenizer, self.vocab_size, None if tokens is None else tokens + 1)

    def corpus_and_tokenizer(self) -> DataSpec:
        """The spec without max_tokens: what preparations that can serve one another share."""
        return DataSpec(self.corpus, self.tokenizer, self.vocab_size)


def _max_tokens(v: Any, allow_none: bool = False) -> int | None:
    if isinstance(v, str) and v != BUDGET:
        raise ConfigError(f"data.max_tokens: expected a number of tokens, {BUDGET!r} or null, got {v!r}")
    return fields.integer("data.max_tokens", v, lo=1, allow_none=allow_none)


def _key(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _tokenizer_identity(spec: DataSpec) -> dict[str, Any]:
    if spec.tokenizer == "byte":
        return {"byte": 256}
    if spec.tokenizer == "bpe":
        return {"bpe": spec.vocab_size}
    return {"file_sha256": hashlib.sha256(Path(spec.tokenizer).expanduser().read_bytes()).hexdigest()}


def _ident(spec: DataSpec) -> dict[str, Any]:
    """What every preparation of a (corpus, tokenizer) shares: its directory's key."""
    return {
        "v": CACHE_VERSION,
        "corpus": corpus_identity(spec.corpus),
        "val_permille": VAL_PERMILLE,
        "val_tokens": VAL_TOKENS,
        "sep": DOC_SEP,
        "tok": _tokenizer_identity(spec),
    }


def _limit(spec: DataSpec) -> int | None:
    if spec.max_tokens == BUDGET:
        raise ConfigError(
            f"data.max_tokens: {BUDGET!r} is resolved from a train job's budget; give a number of tokens here"
        )
    return spec.max_tokens


def base_dir(spec: DataSpec) -> Path:
    """The directory of every preparation of `spec`'s corpus and tokenizer."""
    return cache_root() / f"p{CACHE_VERSION}-{_key(_ident(spec))}"


def preparation_dir(spec: DataSpec) -> Path:
    """Where a preparation of exactly `spec.max_tokens` is built."""
    limit = _limit(spec)
    return base_dir(spec) / ("all" if limit is None else f"n{limit}")


# ------------------------------------------------------------------------------------------- shards


@dataclass
class Shards:
    """A run's tokens: the memory-mapped train split (a prefix of the preparation in `dir` when that
    one is larger) and validation split, plus what bits-per-byte needs."""

    dir: Path
    train: np.ndarray
    val: np.ndarray
    tokenizer: Tokenizer
    token_bytes: np.ndarray  # (vocab,) bytes per token id
    meta: dict[str, Any]

    @property
    def vocab_size(self) -> int:
        return int(self.meta["vocab_size"])


def _serves(meta: dict[str, Any], limit: int | None) -> bool:
    """Whether a complete preparation holds the first `limit` train tokens (None: all of them)."""
    return (
        meta["max_tokens"] is None or meta["exhausted"] or (limit is not None and meta["max_tokens"] >= limit)
    )


def serving(spec: DataSpec) -> Path | None:
    """The smallest complete preparation that holds what `spec` reads, else None."""
    limit, base = _limit(spec), base_dir(spec)
    if not base.is_dir():
        return None
    found = []
    for meta_path in base.glob("*/meta.json"):
        meta = json.loads(meta_path.read_text())
        if _serves(meta, limit):
            found.append((meta["train"]["tokens"], meta_path.parent.name, meta_path.parent))
    return min(found)[2] if found else None


def is_cached(spec: DataSpec) -> bool:
    """True when `prepare(spec)` would only memory-map existing shards."""
    try:
        return serving(spec) is not None
    except (OSError, ConfigError):
        return False


def prepare(
    spec: DataSpec, reporter: Reporter | None = None, processes: int = 1, piece_docs: int = PIECE_DOCS
) -> Shards:
    """The shards of `spec`: read from the smallest complete preparation that covers it, else built
    (exactly `spec.max_tokens` train tokens, on `processes` processes, resuming a build that was
    interrupted) and then read. `reporter` gets the build's progress, logs and stop requests."""
    from filelock import FileLock

    spec.check()
    limit = _limit(spec)
    d = serving(spec)
    if d is None:
        d = preparation_dir(spec)
        d.mkdir(parents=True, exist_ok=True)
        with FileLock(str(d / ".lock")):
            if not (d / "meta.json").exists():
                tok_path = _tokenizer_file(spec, reporter)
                _build(spec, load_tokenizer(tok_path), d, limit, reporter, processes, piece_docs)
    return _open(spec, d, limit)


def _tokenizer_file(spec: DataSpec, reporter: Reporter | None) -> Path | None:
    """The tokenizer every preparation of `spec` uses: None (bytes), else a tokenizer.json in the base
    directory, trained there once (BPE) or copied there (a file)."""
    from filelock import FileLock

    if spec.tokenizer == "byte":
        return None
    base = base_dir(spec)
    base.mkdir(parents=True, exist_ok=True)
    path = base / "tokenizer.json"
    with FileLock(str(base / ".tokenizer.lock")):
        if not path.exists():
            if spec.tokenizer == "bpe":
                _say(reporter, f"training a {spec.vocab_size:,}-token BPE on {spec.corpus}")
                got = train_bpe(spec.corpus, spec.vocab_size, path)
                if got < spec.vocab_size:
                    _say(reporter, smaller_vocab_message(spec.vocab_size, got), "WARNING")
            else:
                tmp = path.with_suffix(".tmp")
                tmp.write_bytes(Path(spec.tokenizer).expanduser().read_bytes())
                os.replace(tmp, path)
    return path


def _open(spec: DataSpec, d: Path, limit: int | None) -> Shards:
    meta = json.loads((d / "meta.json").read_text())
    if meta["train"]["tokens"] < 2 or meta["val"]["tokens"] < 2:
        raise ConfigError(
            f"data.corpus: {spec.corpus!r} is too small to split into train and validation "
            f"({meta['train']['docs']} train / {meta['val']['docs']} val documents)"
        )
    tok = load_tokenizer(d / meta["tokenizer"] if meta["tokenizer"] else None)
    mm = {s: np.memmap(d / f"{s}.bin", dtype=meta["dtype"], mode="r") for s in ("train", "val")}
    train = mm["train"] if limit is None else mm["train"][:limit]  # a prefix of a larger preparation
    return Shards(d, train, mm["val"], tok, np.load(d / "token_bytes.npy"), meta)


UNIGRAM_FILE = "unigram.json"
UNIGRAM_CHUNK = 1 << 24  # tokens counted at a time: a whole split as int64 would be 8 bytes a token


def unigram_xent(shards: Shards) -> float:
    """The unigram cross-entropy (nats per token) of the preparation's whole train split: the loss of a
    model that predicts every token with its frequency, the bar a validation loss must get under (the
    `unigram` health rule, orchestrator/health.py). Computed once per preparation from its token counts
    and kept beside its meta.json (a preparation is immutable, so the figure never goes stale; one made
    before this figure existed gets it on its first use)."""
    from filelock import FileLock

    path = shards.dir / UNIGRAM_FILE
    if path.exists():
        return float(json.loads(path.read_text())["nats"])
    try:
        with FileLock(str(shards.dir / ".lock")):
            if not path.exists():
                _write_json(path, _unigram(shards))
    except OSError:  # a cache the run may read but not write (shared, read-only): counted, not kept
        return float(_unigram(shards)["nats"])
    return float(json.loads(path.read_text())["nats"])


def _unigram(shards: Shards) -> dict[str, Any]:
    """The token counts of the preparation's whole train split, in chunks, as `unigram_xent` keeps them."""
    train = np.memmap(shards.dir / "train.bin", dtype=shards.meta["dtype"], mode="r")
    counts = np.zeros(shards.vocab_size, dtype=np.int64)
    for at in range(0, len(train), UNIGRAM_CHUNK):
        counts += np.bincount(train[at : at + UNIGRAM_CHUNK], minlength=shards.vocab_size)
    return {"nats": token_entropy(counts), "tokens": int(counts.sum())}


def token_entropy(counts: np.ndarray) -> float:
    """The entropy (nats) of the distribution `counts` (per token id) describe."""
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


def _say(reporter: Reporter | None, message: str, level: str = "INFO") -> None:
    # marked: the job's log gets it from the reporter, not again from orchestrator/joblog.py's capture
    log.log(logging.getLevelName(level), message, extra={REPORTED: True})
    if reporter is not None:
        reporter.log(message, level)


# -------------------------------------------------------------------------------------------- build

SPLITS = ("train", "val")


class _Build:
    """The state of one preparation being built in `d`: per split its tokens, documents and bytes so far,
    and how many corpus documents were read; committed to `progress.json` after each piece."""

    def __init__(self, d: Path, caps: dict[str, int | None], itemsize: int) -> None:
        self.d, self.caps, self.itemsize = d, caps, itemsize
        path = d / "progress.json"
        saved = json.loads(path.read_text()) if path.exists() else {}
        self.docs = saved.get("docs", 0)  # corpus documents read (kept or not)
        self.counts = saved.get("counts") or {s: {"tokens": 0, "docs": 0, "bytes": 0} for s in SPLITS}
        self.files = {}
        for s in SPLITS:  # drop whatever was written after the last committed piece
            f = open(d / f"{s}.bin", "r+b" if (d / f"{s}.bin").exists() else "w+b")
            f.truncate(self.counts[s]["tokens"] * itemsize)
            f.seek(0, os.SEEK_END)
            self.files[s] = f

    def full(self, s: str) -> bool:
        cap = self.caps[s]
        return cap is not None and self.counts[s]["tokens"] >= cap

    def add(self, s: str, tokens: np.ndarray, nbytes: int) -> None:
        """Append one document of split `s` (cut where the split reaches its cap)."""
        c, cap = self.counts[s], self.caps[s]
        if cap is not None:
            tokens = tokens[: cap - c["tokens"]]
        self.files[s].write(tokens.tobytes())
        c["tokens"] += len(tokens)
        c["docs"] += 1
        c["bytes"] += nbytes

    def commit(self) -> None:
        for f in self.files.values():
            f.flush()
            os.fsync(f.fileno())
        _write_json(self.d / "progress.json", {"docs": self.docs, "counts": self.counts})

    def close(self) -> None:
        for f in self.files.values():
            f.close()


def _write_json(path: Path, obj: Any) -> None:
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        f.write(json.dumps(obj, indent=1, sort_keys=True))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _build(
    spec: DataSpec,
    tok: Tokenizer,
    d: Path,
    limit: int | None,
    reporter: Reporter | None,
    processes: int,
    piece_docs: int,
) -> None:
    """Tokenize into `d` (resuming from its last committed piece), then write meta.json (complete)."""
    global TOKENIZE_COUNT
    TOKENIZE_COUNT += 1
    dtype = np.dtype(np.uint16 if tok.vocab_size <= 2**16 else np.uint32)
    build = _Build(d, {"train": limit, "val": VAL_TOKENS}, dtype.itemsize)
    rows = row_count(spec.corpus)
    progress = _Progress(reporter, limit, rows, sum(c["tokens"] for c in build.counts.values()))
    if build.docs:
        _say(reporter, f"resuming the preparation in {d} after {build.docs:,} documents")
    splits: deque[list[str]] = deque()  # the split of each document of the batches in flight

    def batches() -> Iterator[list[str | None]]:
        """Batches of the documents after the committed ones; a document whose split is already full
        is sent as None (read, counted, not tokenized)."""
        texts: list[str | None] = []
        names: list[str] = []
        chars = 0
        for doc_id, text in islice(documents(spec.corpus), build.docs, None):
            s = "val" if is_val(doc_id) else "train"
            keep = not build.full(s)
            texts.append(text if keep else None)
            names.append(s)
            chars += len(text) if keep else 0
            if len(texts) >= BATCH_DOCS or chars >= BATCH_CHARS:
                splits.append(names)
                yield texts
                texts, names, chars = [], [], 0
            if build.full("train") and build.full("val"):
                break
        if texts:
            splits.append(names)
            yield texts

    try:
        with ParallelEncoder(tok, processes, DOC_SEP, dtype) as encoder:
            for flat, n_tokens, n_bytes in encoder.map(batches()):
                names, start = splits.popleft(), 0
                for s, n, b in zip(names, n_tokens.tolist(), n_bytes.tolist()):
                    if n and not build.full(s):
                        build.add(s, flat[start : start + n], b)
                    start += n
                    build.docs += 1
                    if build.docs % piece_docs == 0:
                        build.commit()
                        progress.piece(build)
                    if build.full("train") and build.full("val"):
                        break
                progress.tick(build)
                if build.full("train") and build.full("val"):
                    break
        build.commit()
    finally:
        build.close()
    _finish(spec, tok, d, limit, build, dtype)
    progress.done(build)


class _Progress:
    """A build's progress through the reporter: tokens so far out of what it will hold (`_total`),
    tokens/s and the ETA; logs, heartbeats and stop requests (the build commits, then stops with
    JobInterrupted: rerunning resumes it)."""

    def __init__(self, reporter: Reporter | None, limit: int | None, rows: int | None, start: int) -> None:
        self.rep, self.limit, self.rows, self.start = reporter, limit, rows, start
        self.t0 = self.last = self.last_beat = time.monotonic()
        self.pieces = 0

    def _rate(self, done: int) -> float:
        """Tokens per second of this attempt (a resumed build does not count what it found)."""
        return (done - self.start) / max(time.monotonic() - self.t0, 1e-9)

    def _tokens(self, build: _Build) -> int:
        return sum(build.counts[s]["tokens"] for s in SPLITS)

    def _total(self, build: _Build, done: int) -> float:
        """The tokens the build will hold: its caps, at most what the whole corpus holds (estimated
        from the documents read so far when its row count is known); 0 when unknown."""
        whole = max(float(done), done * self.rows / build.docs) if self.rows and build.docs else None
        if self.limit is not None:
            capped = float(self.limit + VAL_TOKENS)
            return capped if whole is None else min(capped, whole)
        return 0.0 if whole is None else whole

    def tick(self, build: _Build, force: bool = False) -> None:
        done, now = self._tokens(build), time.monotonic()
        if self.rep is None or (not force and now - self.last < 1.0):
            return
        self.last = now
        rate = self._rate(done)
        total = self._total(build, done)
        eta = (total - done) / rate if total and rate > 0 else None
        self.rep.progress(done, total, eta)
        if now - self.last_beat > 10:
            self.rep.heartbeat()
            self.last_beat = now
        if self.rep.should_stop():
            build.commit()
            raise JobInterrupted(f"stopped after {build.docs:,} documents ({done:,} tokens)")

    def piece(self, build: _Build) -> None:
        self.pieces += 1
        done, wall = self._tokens(build), time.monotonic() - self.t0
        if self.rep is not None:
            self.rep.metric("tokens_per_s", self.pieces, self._rate(done), tokens=done, wall_s=wall)
        self.tick(build, force=True)

    def done(self, build: _Build) -> None:
        done, wall = self._tokens(build), time.monotonic() - self.t0
        c = build.counts
        _say(
            self.rep,
            f"prepared {c['train']['tokens']:,} train + {c['val']['tokens']:,} val tokens from "
            f"{build.docs:,} documents in {wall:.1f}s "
            f"({self._rate(done):,.0f} tokens/s)",
        )
        if self.rep is not None:  # the whole build's rate as its last point (the Queue page's tokens/s)
            self.rep.metric("tokens_per_s", self.pieces + 1, self._rate(done), tokens=done, wall_s=wall)
            self.rep.progress(done, done, 0.0)


# ------------------------------------------------------------------------------------------ batches


def _finish(
    spec: DataSpec, tok: Tokenizer, d: Path, limit: int | None, build: _Build, dtype: np.dtype
) -> None:
    """Write what a prepared dir holds besides its shards: the token bytes, the tokenizer file and,
    last, meta.json (its presence means the preparation is complete)."""
    np.save(d / "token_bytes.npy", tok.token_bytes())
    if tok.path is not None:
        shutil.copyfile(tok.path, d / "tokenizer.json")
    meta = {
        "ident": _ident(spec),
        "spec": {**spec.to_dict(), "max_tokens": limit},
        "max_tokens": limit,
        # the train split ended before max_tokens: this is the whole train split, it serves any size
        "exhausted": not build.full("train"),
        "dtype": dtype.name,
        "vocab_size": tok.vocab_size,
        "tokenizer": "tokenizer.json" if tok.path is not None else None,
        "docs_read": build.docs,
        **build.counts,
    }
    _write_json(d / "meta.json", meta)  # last: its presence means the preparation is complete
    (d / "progress.json").unlink()


def sampler_for(spec: DataSpec) -> int:
    """The sampler a new run on `spec` uses: without replacement on a preparation of `max_tokens`, with
    replacement on a whole corpus (as before samplers were versioned, so such runs are unchanged)."""
    return SAMPLER_WITH_REPLACEMENT if spec.max_tokens is None else SAMPLER_PERMUTATION


@functools.lru_cache(maxsize=2)  # a step spans two epochs at most (unless its batch outnumbers the windows)
def _permutation(seed: int, epoch: int, windows: int) -> np.ndarray:
    """The order in which epoch `epoch` visits `windows` windows (read-only, shared by the steps)."""
    rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, int(epoch), int(windows), 0x5A3D1E])
    perm = rng.permutation(windows).astype(np.int64)
    perm.flags.writeable = False
    return perm


def window_offsets(
    n_tokens: int,
    batch_size: int,
    seq_len: int,
    seed: int,
    step: int,
    sampler: int = SAMPLER_WITH_REPLACEMENT,
) -> np.ndarray:
    """(B,) token offsets of the `seq_len + 1`-token windows of step `step` (row r at index r).

    Sampler 1: uniform with replacement, from a generator seeded by (seed, step). Sampler 2: windows
    w = 0 .. W-1 start at w * seq_len (W = (n_tokens - 1) // seq_len, consecutive windows share one
    token: the last target of one is the first input of the next); the g-th sample of the run
    (g = step * B + row) is window perm_e[g mod W] of epoch e = g // W, perm_e a seeded permutation."""
    if n_tokens <= seq_len + 1:
        raise ConfigError(f"seq_len: {seq_len} is longer than the train shard ({n_tokens} tokens)")
    if sampler == SAMPLER_WITH_REPLACEMENT:
        rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, int(step), 0x10091AB])
        return rng.integers(0, n_tokens - seq_len - 1, size=batch_size)
    if sampler != SAMPLER_PERMUTATION:
        raise ValueError(f"unknown sampler {sampler!r}")
    windows = (n_tokens - 1) // seq_len
    g = int(step) * batch_size + np.arange(batch_size, dtype=np.int64)
    epochs, pos = np.divmod(g, windows)
    out = np.empty(batch_size, dtype=np.int64)
    for e in np.unique(epochs):
        at = epochs == e
        out[at] = _permutation(seed, int(e), windows)[pos[at]]
    return out * seq_len


def get_batch(
    tokens: np.ndarray,
    batch_size: int,
    seq_len: int,
    seed: int,
    step: int,
    sampler: int = SAMPLER_WITH_REPLACEMENT,
    rows=None,
):
    """The training batch at `step`: the windows `window_offsets` gives, so a resumed run needs no loader
    state. Returns int64 tensors x, y of shape (B, T); with `rows` (global row indices of the batch of
    `batch_size`), just those rows of it, in that order, (len(rows), T): every row's window is a function
    of (seed, step, row, sampler), whatever micro-batch or rank reads it."""
    import torch

    offs = window_offsets(len(tokens), batch_size, seq_len, seed, step, sampler)
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
