"""Documents of a corpus, in a deterministic order, and their train/validation split.

- "offline": text every Python install carries: `pydoc_data.topics` (the interpreter's documentation
  topics) and the docstrings of a fixed list of standard-library modules (their classes, functions and
  methods). No network, ~1.6 MB of English and code.
- a local .txt / .jsonl / .parquet file or a directory of them, read through HF `datasets`' packaged
  "text" / "json" / "parquet" builders (a "text" column; .txt files split into documents at blank lines).
- "hf:NAME[:CONFIG]": a Hugging Face hub dataset (for users with internet; never in tests).

Local files and hub data are read the same way: `datasets.load_dataset(..., streaming=True)`, files in
sorted order and rows in file order, so memory stays bounded whatever the corpus size, a reader can stop
anywhere (a preparation of `max_tokens`), and a local directory in the hub's layout (parquet files with a
`text` column) is read exactly as the hub dataset would be.

A document goes to validation when a hash of its id says so (`is_val`), so the split does not depend
on order or on the other documents. A row's id is its `id` column, else its index in the stream.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import os
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from looplab.model.errors import ConfigError

VAL_PERMILLE = 80  # 8 % of documents go to validation
LOCAL_EXTS = {".txt": "text", ".jsonl": "json", ".json": "json", ".parquet": "parquet"}
# Fixed, ordered list: the offline corpus must be the same on every run of the same Python.
OFFLINE_MODULES = (
    "abc argparse ast asyncio base64 bdb binascii bisect builtins bz2 calendar cmd code codecs collections "
    "colorsys compileall concurrent.futures configparser contextlib contextvars copy copyreg csv ctypes "
    "dataclasses datetime decimal difflib dis doctest email email.message email.policy email.utils enum "
    "filecmp fileinput fnmatch fractions ftplib functools gc getopt gettext glob graphlib gzip hashlib "
    "heapq hmac html html.parser http.client http.cookiejar http.cookies http.server imaplib importlib "
    "importlib.metadata inspect io ipaddress itertools json keyword linecache locale logging "
    "logging.handlers lzma mailbox math mimetypes mmap modulefinder multiprocessing netrc numbers "
    "operator optparse os pathlib pdb pickle pickletools pkgutil platform plistlib poplib pprint profile "
    "pstats py_compile pyclbr pydoc queue quopri random re reprlib rlcompleter runpy sched secrets "
    "selectors shelve shlex shutil signal site smtplib socket socketserver sqlite3 ssl stat statistics "
    "string struct subprocess symtable sys sysconfig tabnanny tarfile tempfile textwrap threading time "
    "timeit token tokenize tomllib trace traceback tracemalloc types typing unicodedata unittest "
    "unittest.mock urllib.parse urllib.request urllib.robotparser uuid warnings wave weakref webbrowser "
    "wsgiref.handlers wsgiref.simple_server xml.dom.minidom xml.etree.ElementTree xml.sax xmlrpc.client "
    "zipapp zipfile zlib zoneinfo"
).split()


def cache_root() -> Path:
    return Path(os.environ.get("LOOPLAB_CACHE") or Path.home() / ".cache" / "looplab")


def documents(corpus: str) -> Iterator[tuple[str, str]]:
    """(doc_id, text) pairs in a deterministic order (the same order on every read)."""
    if corpus != "offline":
        yield from _streamed_documents(corpus)
        return
    with warnings.catch_warnings():  # some stdlib attributes warn when touched (typing.io, ...)
        warnings.simplefilter("ignore")
        yield from _offline_documents()


def _offline_documents() -> Iterator[tuple[str, str]]:
    """The offline corpus, walked in a fresh interpreter.

    Why a subprocess: what the calling process imported changes the walk. Libraries patch standard
    functions (inspect.getfile, inspect.isgenerator, sys.excepthook are replaced once torch, ray and
    friends are loaded) and load lazy attributes (concurrent.futures.ThreadPoolExecutor), so a Ray
    worker and a plain `python -m looplab.workers.train` built corpora 3 documents apart, and the same seed
    trained to different losses. A fresh `python -P` sees only the standard library."""
    # the folder that holds the `looplab` package (already imported: this module is inside it)
    root = str(Path(sys.modules["looplab"].__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    code = (
        "import json, sys; from looplab.workers.data.corpus import _walk_offline; "
        "json.dump(list(_walk_offline()), sys.stdout)"
    )
    out = subprocess.run([sys.executable, "-P", "-c", code], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"building the offline corpus failed:\n{out.stderr[-2000:]}")
    yield from (tuple(doc) for doc in json.loads(out.stdout))


def _walk_offline() -> Iterator[tuple[str, str]]:
    import pydoc_data.topics

    for key in sorted(pydoc_data.topics.topics):
        yield f"topic:{key}", pydoc_data.topics.topics[key]
    seen: set[int] = set()  # an object re-exported by several modules is one document
    for name in OFFLINE_MODULES:
        try:
            mod = importlib.import_module(name)
        except Exception:  # a module missing from a minimal install: skip it
            continue
        if mod.__doc__:
            yield f"module:{name}", f"{name}\n{inspect.cleandoc(mod.__doc__)}"
        for attr in sorted(vars(mod)):
            obj = getattr(mod, attr)
            home = str(getattr(obj, "__module__", None))
            if (
                attr.startswith("_")
                or id(obj) in seen
                or not (inspect.isclass(obj) or inspect.isroutine(obj))
            ):
                continue
            if name != "builtins" and home != name and not home.startswith(name + "."):
                continue
            seen.add(id(obj))
            parts = [f"{name}.{attr}\n{inspect.cleandoc(obj.__doc__)}"] if obj.__doc__ else []
            if inspect.isclass(obj):
                for m in sorted(vars(obj)):
                    f = vars(obj)[m]
                    if (not m.startswith("_") or m == "__init__") and inspect.isroutine(f) and f.__doc__:
                        parts.append(f"{name}.{attr}.{m}\n{inspect.cleandoc(f.__doc__)}")
            if parts:
                yield f"doc:{name}.{attr}", "\n\n".join(parts)


def _local_files(path: Path) -> tuple[str, list[str]]:
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.suffix in LOCAL_EXTS)
    builders = {LOCAL_EXTS[p.suffix] for p in files}
    if not files:
        raise ConfigError(f"data.corpus: directory {str(path)!r} has no {sorted(LOCAL_EXTS)} files")
    if len(builders) > 1:
        raise ConfigError(f"data.corpus: directory {str(path)!r} mixes file kinds {sorted(builders)}")
    return builders.pop(), [str(p) for p in files]


def _stream(corpus: str):
    """The corpus as a streaming `datasets.IterableDataset` (hub or local files, read the same way)."""
    import datasets

    if corpus.startswith("hf:"):
        name, _, config = corpus[3:].partition(":")
        return datasets.load_dataset(name, config or None, split="train", streaming=True)
    builder, files = _local_files(Path(corpus).expanduser())
    kw = {"sample_by": "paragraph"} if builder == "text" else {}
    return datasets.load_dataset(builder, data_files=files, split="train", streaming=True, **kw)


def _streamed_documents(corpus: str) -> Iterator[tuple[str, str]]:
    for i, row in enumerate(_stream(corpus)):
        if "text" not in row:
            raise ConfigError(f"data.corpus: {corpus!r} has no 'text' column (columns: {sorted(row)})")
        text, doc_id = row["text"], row.get("id")
        if text and text.strip():
            yield str(i if doc_id is None else doc_id), text


def row_count(corpus: str) -> int | None:
    """Rows of the corpus when they can be counted without reading it (parquet footers, the hub's split
    info), else None: what a preparation of the whole corpus estimates its progress from."""
    if corpus == "offline":
        return None
    if corpus.startswith("hf:"):
        try:
            splits = _stream(corpus).info.splits
            return int(splits["train"].num_examples) if splits and "train" in splits else None
        except Exception:  # an estimate only: no network, no metadata
            return None
    builder, files = _local_files(Path(corpus).expanduser())
    if builder != "parquet":
        return None
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(f).metadata.num_rows for f in files)


def is_val(doc_id: str) -> bool:
    return int(hashlib.sha1(doc_id.encode()).hexdigest()[:8], 16) % 1000 < VAL_PERMILLE


def corpus_identity(corpus: str) -> dict[str, Any]:
    if corpus == "offline":
        # "walk": 2 = walked in a fresh interpreter (shards built by an in-process walk differ)
        return {
            "offline": f"{sys.version_info[0]}.{sys.version_info[1]}",
            "modules": OFFLINE_MODULES,
            "walk": 2,
        }
    if corpus.startswith("hf:"):
        return {"hf": corpus}
    _, files = _local_files(Path(corpus).expanduser())
    return {"files": [(str(Path(f).resolve()), os.stat(f).st_size, os.stat(f).st_mtime_ns) for f in files]}
