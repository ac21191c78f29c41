"""`python -m workers.train`: one training run without Ray or a database.

    python -m workers.train --preset lean --size tiny --tokens 2e6 --out runs/x
    python -m workers.train --preset fixed4 --size tiny --time-s 60 --out runs/y --events-jsonl ev.jsonl

Prints a progress bar and log lines (ConsoleReporter) and a final summary. Rerunning the same command
on the same --out resumes from its checkpoint. Bad arguments print one line and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from typing import Any

from model.errors import ConfigError


def parse_override(s: str) -> tuple[str, Any]:
    key, sep, val = s.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {s!r}")
    try:
        return key, json.loads(val)
    except ValueError:
        return key, val


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m workers.train", description="Train one looped LM.")
    p.add_argument(
        "--preset", "--recipe", dest="recipe", default="lean", help="recipe name (lean, fixed4, ...)"
    )
    p.add_argument("--size", default="tiny")
    p.add_argument("--tokens", type=float, help="token budget, e.g. 2e6 (or give --time-s)")
    p.add_argument("--time-s", type=float, help="training-time budget in seconds")
    p.add_argument("--out", required=True, help="artifact dir (resumed if it holds a checkpoint)")
    p.add_argument(
        "--model",
        action="append",
        type=parse_override,
        default=[],
        metavar="KEY=VALUE",
        help="ModelConfig override, repeatable (VALUE parsed as JSON)",
    )
    p.add_argument("--corpus", default="offline", help="offline | path | hf:NAME[:CONFIG]")
    p.add_argument("--tokenizer", default="byte", help="byte | bpe | path/to/tokenizer.json")
    p.add_argument("--vocab-size", type=int, default=512, help="BPE vocabulary size")
    p.add_argument("--events-jsonl", help="also append every event to this JSON-lines file")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    for name, typ in [
        ("seed", int),
        ("batch-size", int),
        ("seq-len", int),
        ("lr", float),
        ("adam-lr", float),
        ("optimizer", str),
        ("weight-decay", float),
        ("warmup-steps", int),
        ("cooldown-frac", float),
        ("grad-clip", float),
        ("eval-every", int),
        ("eval-tokens", int),
        ("ckpt-every", int),
        ("ckpt-minutes", float),
        ("log-every", int),
        ("calib-steps", int),
        ("device", str),
    ]:
        p.add_argument(f"--{name}", type=typ)
    p.add_argument("--compile", action="store_true", default=None)
    return p


def spec_dict(a: argparse.Namespace) -> dict[str, Any]:
    d: dict[str, Any] = {
        "recipe": a.recipe,
        "size": a.size,
        "model": dict(a.model),
        "data": {"corpus": a.corpus, "tokenizer": a.tokenizer, "vocab_size": a.vocab_size},
    }
    if a.tokens is not None:
        d["tokens"] = a.tokens
    if a.time_s is not None:
        d["time_s"] = a.time_s
    for k in (
        "seed",
        "batch_size",
        "seq_len",
        "lr",
        "adam_lr",
        "optimizer",
        "weight_decay",
        "warmup_steps",
        "cooldown_frac",
        "grad_clip",
        "eval_every",
        "eval_tokens",
        "ckpt_every",
        "ckpt_minutes",
        "log_every",
        "calib_steps",
        "device",
        "compile",
    ):
        if getattr(a, k) is not None:
            d[k] = getattr(a, k)
    return d


def make_reporter(desc: str, events_jsonl: str | None, quiet: bool):
    from workers.reporter import ConsoleReporter, JsonlReporter, MemoryReporter

    inner = MemoryReporter() if quiet else ConsoleReporter(desc)
    rep = JsonlReporter(events_jsonl, inner) if events_jsonl else inner

    def stop(signum, frame):  # Ctrl-C / SIGTERM: checkpoint at the next step, then exit
        rep.stop_requested = True
        if getattr(rep, "inner", None) is not None:
            rep.inner.stop_requested = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    return rep


def main(argv: list[str] | None = None) -> int:
    import logging

    from workers import train
    from workers.jobs import JobInterrupted

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    a = build_parser().parse_args(argv)
    try:
        spec = train.Spec.from_dict(spec_dict(a))
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    rep = make_reporter(f"train {spec.recipe}/{spec.size}", a.events_jsonl, a.quiet)
    try:
        row = train.run(spec, rep, a.out)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except JobInterrupted as e:
        print(f"interrupted ({e}); rerun the same command to resume", file=sys.stderr)
        return 130
    finally:
        if hasattr(rep, "close"):
            rep.close()
    print(summary(row, a.out))
    return 0


def summary(row: dict[str, Any], out: str) -> str:
    lines = [f"done: {out}"]
    for k, v in row.items():
        if v is None:
            continue
        lines.append(f"  {k:24s} {v:,.4f}" if isinstance(v, float) else f"  {k:24s} {v}")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
