"""`python -m looplab.workers.train`: one training run without Ray or a database.

    python -m looplab.workers.train --preset lean --size tiny --tokens 2e6 --out runs/x
    python -m looplab.workers.train --preset fixed4 --size tiny --time-s 60 --out runs/y --events-jsonl ev.jsonl

The flags are generated from the train Spec (workers/spec_cli.py): one per field, with its default
and help; `--preset` is another name for `--recipe`, and the `data` fields are `--corpus`,
`--tokenizer`, `--vocab-size`. Prints a progress bar and log lines and a final summary. Rerunning the
same command on the same --out resumes from its checkpoint. Bad arguments print one line and exit
with status 2.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from looplab.workers.spec_cli import SpecParser, job_parser, run_standalone
from looplab.workers.train.spec import Spec


def build_parser() -> SpecParser:
    out = "artifact dir (resumed if it holds a checkpoint)"
    return job_parser(Spec, "looplab.workers.train", "Train one looped LM.", out_help=out, out_required=True)


def main(argv: list[str] | None = None) -> int:
    from looplab.workers.train.trainer import train

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    return run_standalone(
        build_parser(),
        Spec,
        lambda spec, reporter, out: train(spec, reporter, Path(out)),
        lambda spec, row, args: print(summary(row, args.out)),
        desc=lambda spec: f"train {spec.model_name}",
        argv=argv,
        resume_hint="rerun the same command to resume",
    )


def summary(row: dict[str, Any], out: str) -> str:
    lines = [f"done: {out}"]
    for k, v in row.items():
        if v is None:
            continue
        lines.append(f"  {k:24s} {v:,.4f}" if isinstance(v, float) else f"  {k:24s} {v}")
    return "\n".join(lines)
