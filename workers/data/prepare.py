"""The prepare job: a corpus tokenized into train/validation shards before the train jobs that read it.

A grid's train jobs that share a corpus and a tokenizer depend on one prepare job (created at
submission, orchestrator/grid.py), sized for the largest of them: its `max_tokens` is the largest of
their own `data.max_tokens` (none, the whole corpus, when any of them reads all of it). Each train job
then reads the first `data.max_tokens` tokens of that preparation, which are byte for byte what a
preparation of its own size would hold (workers/data/shards.py), so a job's identity never depends on its
siblings while the corpus is tokenized once. The job trains the BPE first when the tokenizer is "bpe"
(on a capped sample of the train split), then tokenizes on `processes` worker processes, committing a
piece every `piece_docs` documents: stopped or killed, it resumes after the last complete piece and
ends with the same bytes. Progress is tokens so far out of max_tokens plus the validation split's
`workers.data.shards.VAL_TOKENS`, with tokens/s and an ETA, like a train job's steps.

A preparation that already exists (this one, or a larger one of the same corpus and tokenizer) makes
the job finish at once. The shards live in the data cache ($LOOPLAB_CACHE), not in the job's artifact
dir, which gets `preparation.json` naming them.

    python -m looplab.workers.data.prepare --corpus hf:HuggingFaceFW/fineweb-edu:sample-10BT --tokenizer bpe \\
        --vocab-size 32768 --max-tokens 2e9 --processes 16
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from looplab.model import fields
from looplab.workers.data.shards import PIECE_DOCS, DataSpec, preparation_dir, prepare
from looplab.workers.identity import spec_to_dict
from looplab.workers.reporter import Reporter
from looplab.workers.spec_cli import SpecParser, job_parser, run_standalone


@dataclass(frozen=True)
class Spec(DataSpec):
    """What to prepare, a DataSpec's four fields (their checks and help are DataSpec's), and how."""

    max_tokens: int | None = None
    """train tokens to prepare (the first ones of the corpus' train split); none: the whole corpus"""
    processes: int | None = None
    """tokenizing processes; none: the cores this job is given (under the queue its num_cpus)"""
    piece_docs: int = PIECE_DOCS
    """documents per committed piece (what a resumed preparation can lose)"""

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Spec:
        d = fields.with_defaults("prepare", d, cls)
        data = DataSpec.from_dict({f.name: d[f.name] for f in dataclasses.fields(DataSpec)})
        fields.integer("max_tokens", data.max_tokens, lo=1, allow_none=True)  # a number here, not "budget"
        return cls(
            **dataclasses.asdict(data),
            processes=fields.integer("processes", d["processes"], lo=1, allow_none=True),
            piece_docs=fields.integer("piece_docs", d["piece_docs"], lo=1),
        )

    # every field, `max_tokens` even when none (unlike DataSpec's): the job's identity as stored
    to_dict = spec_to_dict

    def data(self) -> DataSpec:
        return DataSpec(**{f.name: getattr(self, f.name) for f in dataclasses.fields(DataSpec)})


def cores_given() -> int:
    """The cores this process may use: its CPU affinity, at most the job's CPU share where one is set
    (Ray sets OMP_NUM_THREADS to a task's num_cpus; the tests set it to 1)."""
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    omp = os.environ.get("OMP_NUM_THREADS", "")
    return max(1, min(n, int(omp)) if omp.isdigit() and int(omp) > 0 else n)


def run(spec: Spec, reporter: Reporter, artifact_dir: str | Path | None) -> dict[str, Any]:
    """Prepare `spec` (or find a preparation that covers it); returns where the shards are and their sizes."""
    processes = spec.processes or cores_given()
    data = spec.data()
    reporter.log(
        f"prepare {spec.corpus} ({spec.tokenizer}"
        f"{f' {spec.vocab_size:,}' if spec.tokenizer == 'bpe' else ''}), "
        f"{'the whole corpus' if spec.max_tokens is None else f'{spec.max_tokens:,} train tokens'}, "
        f"{processes} process{'es' if processes > 1 else ''}"
    )
    shards = prepare(data, reporter=reporter, processes=processes, piece_docs=spec.piece_docs)
    meta = shards.meta
    out = {
        "dir": str(shards.dir),
        "built_here": shards.dir == preparation_dir(data),
        "vocab_size": shards.vocab_size,
        "train_tokens": len(shards.train),
        "val_tokens": len(shards.val),
        "train_docs": meta["train"]["docs"],
        "val_docs": meta["val"]["docs"],
    }
    if spec.tokenizer == "bpe" and shards.vocab_size < spec.vocab_size:
        out["vocab_size_asked"] = spec.vocab_size
    if artifact_dir is not None:
        Path(artifact_dir).mkdir(parents=True, exist_ok=True)
        (Path(artifact_dir) / "preparation.json").write_text(json.dumps(out, indent=1, sort_keys=True))
    return out


def build_parser() -> SpecParser:
    what = "Tokenize a corpus into train/validation shards (resumable; rerun to continue)."
    out = "also write preparation.json (where the shards are) into this dir"
    return job_parser(Spec, "looplab.workers.data.prepare", what, out_help=out)


def print_summary(spec: Spec, out: dict[str, Any], args: Any = None) -> None:
    print(f"prepared: {out['dir']}")
    for k in ("vocab_size", "train_tokens", "val_tokens", "train_docs", "val_docs"):
        print(f"  {k:14s} {out[k]:,}")


def main(argv: list[str] | None = None) -> int:
    import logging

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    return run_standalone(build_parser(), Spec, run, print_summary, desc="prepare", argv=argv)


if __name__ == "__main__":
    raise SystemExit(main())
