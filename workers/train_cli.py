"""`python -m workers.train`: one training run without Ray or a database.

    python -m workers.train --preset lean --size tiny --tokens 2e6 --out runs/x
    python -m workers.train --preset fixed4 --size tiny --time-s 60 --out runs/y --events-jsonl ev.jsonl

The flags are generated from the train Spec (workers/spec_cli.py): one per field, with its default
and help; `--preset` is another name for `--recipe`, and the `data` fields are `--corpus`,
`--tokenizer`, `--vocab-size`. Prints a progress bar and log lines and a final summary. Rerunning the
same command on the same --out resumes from its checkpoint. Bad arguments print one line and exit
with status 2.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

from model.errors import ConfigError
from workers.reporter import JobInterrupted, make_reporter
from workers.spec_cli import SpecParser
from workers.train_spec import Spec


def build_parser() -> SpecParser:
    parser = SpecParser(
        Spec,
        prog="python -m workers.train",
        description="Train one looped LM.",
    )
    parser.add_argument("--out", required=True, help="artifact dir (resumed if it holds a checkpoint)")
    parser.add_argument("--events-jsonl", help="also append every event to this JSON-lines file")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def main(argv: list[str] | None = None) -> int:
    from workers.trainer import train

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        spec = Spec.from_dict(parser.spec_dict(args))
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    reporter = make_reporter(f"train {spec.recipe}/{spec.size}", args.events_jsonl, args.quiet)
    try:
        row = train(spec, reporter, Path(args.out))
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except JobInterrupted as e:
        print(f"interrupted ({e}); rerun the same command to resume", file=sys.stderr)
        return 130
    finally:
        if hasattr(reporter, "close"):
            reporter.close()
    print(summary(row, args.out))
    return 0


def summary(row: dict[str, Any], out: str) -> str:
    lines = [f"done: {out}"]
    for k, v in row.items():
        if v is None:
            continue
        lines.append(f"  {k:24s} {v:,.4f}" if isinstance(v, float) else f"  {k:24s} {v}")
    return "\n".join(lines)
