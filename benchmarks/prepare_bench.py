"""How fast a corpus is prepared, against the tokenizer's own speed on the same text and cores.

On a generated parquet corpus in the hub's layout (`--gb` GB of compressed parquet in about `--files`
files with `text` and `id` columns, words drawn with the offline corpus' word frequencies; written under
a temp dir and deleted after, unless `--keep` names a dir to keep it in, and reuse and top up), with a
`--vocab` BPE trained on its first `--bpe-mb` MB:

1. the tokenizer's own `encode_batch` throughput (tokens/s) with P Rust threads (RAYON_NUM_THREADS=P)
   on the corpus' first `--ref-mb` MB, held in memory, in batches of 1,024 documents: the ceiling;
2. `python -m looplab.workers.data.prepare` of the whole corpus (or `--max-tokens`) on P processes, in a fresh
   cache: its tokens/s while tokenizing (between its first and last progress events) and over the
   whole process (start-up, imports and the stream's opening included), and the peak memory of the
   preparing processes (the job and its workers) as their unique set size (USS: private pages, what
   psutil's memory_full_info().uss reports; read from /proc/PID/smaps_rollup when psutil is missing),
   summed over the processes, next to their summed RSS;

for each P of `--processes`. Target: preparation >= 85 % of the tokenizer's own rate at every P, and
peak USS under 1 GB. The machine may be shared: `uptime`'s load is printed before and after, and each
ratio is measured within one run (the reference right before the preparation it is compared with).

    .venv/bin/python benchmarks/prepare_bench.py [--gb 1] [--files 10] [--processes 1,2] [--vocab 32768]
        [--bpe-mb 50] [--ref-mb 100] [--max-tokens N] [--keep DIR]

Prints a table and one JSON line; writes benchmarks/results/prepare_bench.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TARGET_RATIO, TARGET_USS_MB = 0.85, 1024.0

REFERENCE = r"""
import json, sys, time, glob
import pyarrow.parquet as pq
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
texts, size, limit = [], 0, float(sys.argv[3]) * 1e6
for f in sorted(glob.glob(sys.argv[2] + "/*.parquet")):
    for t in pq.read_table(f, columns=["text"]).column("text").to_pylist():
        texts.append(t); size += len(t)
        if size >= limit: break
    if size >= limit: break
tok.encode_batch(texts[:64])  # the thread pool up
tokens, t0 = 0, time.perf_counter()
for i in range(0, len(texts), 1024):
    tokens += sum(len(e.ids) for e in tok.encode_batch(texts[i : i + 1024]))
print(json.dumps({"tokens": tokens, "seconds": time.perf_counter() - t0, "chars": size}))
"""


def load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def generate(root: Path, gb: float, files: int) -> None:
    """Top `root` up to about `gb` GB of parquet (compressed, as the hub's files are) in files of about
    `gb / files` GB, each file's documents drawn from its own seed; files already there count."""
    import re as re_

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from looplab.workers.data.corpus import documents

    words: dict[str, int] = {}
    for _, text in documents("offline"):
        for w in re_.findall(r"\S+", text):
            words[w] = words.get(w, 0) + 1
    vocab = np.array(list(words))
    p = np.array(list(words.values()), dtype=np.float64)
    p /= p.sum()
    root.mkdir(parents=True, exist_ok=True)
    per_file, ratio = gb * 1e9 / files, 0.65  # parquet bytes per character of text (measured as it goes)
    while (have := sum(f.stat().st_size for f in root.glob("*.parquet"))) < gb * 1e9:
        f = len(list(root.glob("*.parquet")))
        rng = np.random.default_rng([0, f])
        texts, size = [], 0
        while size * ratio < per_file:
            lengths = rng.lognormal(6.5, 0.8, size=2000).astype(np.int64) + 20  # words per document
            flat = vocab[rng.choice(len(vocab), size=int(lengths.sum()), p=p)].tolist()
            at = 0
            for n in lengths.tolist():
                texts.append(" ".join(flat[at : at + n]))
                at += n
                size += len(texts[-1])
                if size * ratio >= per_file:
                    break
        path = root / f"train-{f:05d}.parquet"
        ids = [f"<urn:uuid:bench-{f}-{i}>" for i in range(len(texts))]
        pq.write_table(pa.table({"text": texts, "id": ids}), path, row_group_size=1000)
        ratio = path.stat().st_size / size
        print(
            f"  corpus file {path.name}: {len(texts):,} documents, {size / 1e6:,.0f} MB of text, "
            f"{(have + path.stat().st_size) / 1e9:.2f} GB of parquet so far",
            flush=True,
        )


def _children(pid: int) -> list[int]:
    """`pid` and every process below it."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            parents.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += parents.get(p, [])
    return out


def _memory(pid: int) -> tuple[float, float]:
    """(USS, RSS) of one process in MB."""
    try:
        import psutil

        info = psutil.Process(pid).memory_full_info()
        return info.uss / 2**20, info.rss / 2**20
    except ImportError:
        pass
    fields = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        name, value = line.split(":", 1)
        fields[name] = float(value.split()[0]) / 1024  # kB -> MB
    return fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0), fields.get("Rss", 0)


class PeakMemory(threading.Thread):
    """Samples the summed USS and RSS of a process tree every `every` seconds, keeping the peaks."""

    def __init__(self, pid: int, every: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.pid, self.every = pid, every
        self.uss = self.rss = 0.0
        self.most_processes = 0
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            uss = rss = 0.0
            pids = _children(self.pid)
            for p in pids:
                try:
                    u, r = _memory(p)
                except (OSError, ValueError):
                    continue
                uss, rss = uss + u, rss + r
            self.uss, self.rss = max(self.uss, uss), max(self.rss, rss)
            self.most_processes = max(self.most_processes, len(pids))
            self.stopped.wait(self.every)


def reference(tok: Path, corpus: Path, threads: int, mb: float) -> dict:
    env = {**os.environ, "RAYON_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "true"}
    out = subprocess.run(
        [sys.executable, "-c", REFERENCE, str(tok), str(corpus), str(mb)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    r = json.loads(out.stdout.strip().splitlines()[-1])
    return {**r, "tokens_per_s": r["tokens"] / r["seconds"]}


def preparation(tok: Path, corpus: Path, processes: int, work: Path, max_tokens: int | None) -> dict:
    cache, events = work / f"cache-{processes}", work / f"events-{processes}.jsonl"
    shutil.rmtree(cache, ignore_errors=True)
    cmd = [
        sys.executable,
        "-m",
        "looplab.workers.data.prepare",
        "--corpus",
        str(corpus),
        "--tokenizer",
        str(tok),
        "--processes",
        str(processes),
        "--events-jsonl",
        str(events),
        "--quiet",
    ]
    if max_tokens is not None:
        cmd += ["--max-tokens", str(max_tokens)]
    # RAYON_NUM_THREADS: the one-process preparation encodes in its own process, on one thread as the
    # reference does (worker processes encode on one thread each anyway)
    env = {
        **os.environ,
        "LOOPLAB_CACHE": str(cache),
        "PYTHONPATH": str(ROOT),
        "HF_HUB_OFFLINE": "1",
        "RAYON_NUM_THREADS": str(processes),
    }
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    memory = PeakMemory(proc.pid)
    memory.start()
    _, err = proc.communicate()
    wall = time.perf_counter() - t0
    memory.stopped.set()
    memory.join()
    if proc.returncode != 0:
        raise RuntimeError(f"prepare failed:\n{err[-3000:]}")
    progress = [e for e in map(json.loads, events.read_text().splitlines()) if e["kind"] == "progress"]
    first, last = progress[0], progress[-1]
    tokens = int(last["done"])
    steady = (last["done"] - first["done"]) / max(last["ts"] - first["ts"], 1e-9)
    (meta,) = cache.glob("p2-*/*/meta.json")
    docs = json.loads(meta.read_text())["docs_read"]
    shutil.rmtree(cache)
    return {
        "processes": processes,
        "tokens": tokens,
        "tokens_per_s": steady,
        "tokens_per_s_whole_process": tokens / wall,
        "wall_s": wall,
        "peak_uss_mb": memory.uss,
        "peak_rss_mb": memory.rss,
        "processes_seen": memory.most_processes,
        "docs": docs,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=1.0, help="GB of parquet to generate (compressed)")
    parser.add_argument("--files", type=int, default=10, help="parquet files")
    parser.add_argument("--processes", default="1,2", help="process counts to measure, e.g. 1,2")
    parser.add_argument("--vocab", type=int, default=32768, help="BPE vocabulary asked for")
    parser.add_argument("--bpe-mb", type=float, default=50, help="MB of text the BPE trains on")
    parser.add_argument("--ref-mb", type=float, default=100, help="MB of text the reference encodes")
    parser.add_argument("--max-tokens", type=float, default=None, help="prepare only this many train tokens")
    parser.add_argument("--keep", default=None, help="generate into (and keep) this dir; reused if there")
    args = parser.parse_args(argv)
    counts = [int(p) for p in args.processes.split(",")]
    max_tokens = None if args.max_tokens is None else int(args.max_tokens)
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="prepare_bench_", dir="/tmp"))
    corpus, tok = work / "corpus", work / "tokenizer.json"
    before = load()
    print(f"load before: {before}")
    try:
        print(f"corpus: {args.gb:g} GB of parquet in {corpus}")
        generate(corpus, args.gb, args.files)
        size = sum(f.stat().st_size for f in corpus.glob("*.parquet"))
        if not tok.exists():
            from looplab.workers.data import tokenizer

            tokenizer.BPE_TRAIN_MAX_CHARS = int(args.bpe_mb * 1e6)
            t0 = time.perf_counter()
            got = tokenizer.train_bpe(str(corpus), args.vocab, tok)
            print(f"BPE: asked {args.vocab:,}, got {got:,} tokens in {time.perf_counter() - t0:.0f}s")
        rows = []
        for p in counts:
            ref = reference(tok, corpus, p, args.ref_mb)
            prep = preparation(tok, corpus, p, work, max_tokens)
            rows.append(
                {
                    **prep,
                    "reference_tokens_per_s": ref["tokens_per_s"],
                    "ratio": prep["tokens_per_s"] / ref["tokens_per_s"],
                }
            )
            print(
                f"  P={p}: tokenizer {ref['tokens_per_s'] / 1e6:.3f} M tokens/s, preparation "
                f"{prep['tokens_per_s'] / 1e6:.3f} M/s ({rows[-1]['ratio']:.0%}), peak USS "
                f"{prep['peak_uss_mb']:,.0f} MB",
                flush=True,
            )
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    after = load()
    n_files = len(list(corpus.glob("*.parquet"))) if args.keep else args.files
    print(f"\ncorpus: {size / 1e9:.2f} GB parquet in {n_files} files; load after: {after}")
    head = (
        f"{'P':>2} {'tokenizer M/s':>13} {'prepare M/s':>11} {'ratio':>6} {'whole job M/s':>13} "
        f"{'tokens':>13} {'wall s':>7} {'USS MB':>7} {'RSS MB':>7} {'procs':>5}"
    )
    print(head)
    for r in rows:
        print(
            f"{r['processes']:>2} {r['reference_tokens_per_s'] / 1e6:>13.3f} {r['tokens_per_s'] / 1e6:>11.3f} "
            f"{r['ratio']:>6.0%} {r['tokens_per_s_whole_process'] / 1e6:>13.3f} {r['tokens']:>13,} "
            f"{r['wall_s']:>7.0f} {r['peak_uss_mb']:>7.0f} {r['peak_rss_mb']:>7.0f} {r['processes_seen']:>5}"
        )
    ok = all(r["ratio"] >= TARGET_RATIO and r["peak_uss_mb"] < TARGET_USS_MB for r in rows)
    print(
        f"target (>= {TARGET_RATIO:.0%} of the tokenizer's rate, USS < {TARGET_USS_MB:.0f} MB): "
        f"{'met' if ok else 'NOT met'}"
    )
    result = {
        "bench": "prepare",
        "corpus_bytes": size,
        "vocab_asked": args.vocab,
        "rows": rows,
        "load_before": before,
        "load_after": after,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "target_met": ok,
    }
    out = ROOT / "benchmarks" / "results" / "prepare_bench.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
