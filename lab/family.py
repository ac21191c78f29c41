"""`looplab family check NAME`: the model contract's conformance check (model.contract.check_family)
from the command line, before any grid names the family: whether it is accepted, and for each
optional capability whether it is present or which fallback looplab will use instead
(docs/own-model.md states the contract)."""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any

from looplab.model.errors import ConfigError

PROVIDED = ("vocab_size", "seq_len")  # set by looplab from the run; given here by flags


def family_config(text: str | None, vocab_size: int, seq_len: int) -> dict[str, Any]:
    """The config the check builds the family from: `--config`'s JSON object plus the two keys looplab
    provides; ConfigError naming `--config` (or the flag) for anything else."""
    try:
        config = json.loads(text) if text else {}
    except json.JSONDecodeError as e:
        raise ConfigError(f"--config: expected a JSON object; {e.msg} at character {e.pos}") from None
    if not isinstance(config, dict):
        raise ConfigError(
            f"--config: expected a JSON object, e.g. '{{\"d_model\": 32}}'; got {type(config).__name__}"
        )
    for key in PROVIDED:
        if key in config:
            flag = "--" + key.replace("_", "-")
            raise ConfigError(f"--config: {key} is set by looplab, not by family_config; give it as {flag}")
    for flag, value in (("--vocab-size", vocab_size), ("--seq-len", seq_len)):
        if value < 2:
            raise ConfigError(f"{flag}: expected an int >= 2; got {value}")
    return {**config, "vocab_size": vocab_size, "seq_len": seq_len}


def report_lines(report, loops: int) -> list[str]:
    """The check's findings for people: the family, its counts, and the capability table."""
    flops = "measured with FlopCounterMode" if report.flops_measured else "its own flops_per_token"
    priced = (
        f"{report.flops_per_token:.4g} at loops={loops} ({flops})"
        if report.flops_per_token is not None
        else "looplab's own FLOP model (model/flops.py; `looplab plan` prices a grid)"
    )
    lines = [
        f"family {report.family!r}: conforms{_package(report)}",
        f"  parameters            {report.n_params:,}",
        f"  training FLOPs/token  {priced}",
        f"  split-dependent       {'yes: resumes exactly only on the same micro-batch and worker split' if report.split_dependent else 'no'}",
    ]
    if report.kv_strategies:
        lines.append(f"  KV strategies         {', '.join(report.kv_strategies)}")
    if report.checked_config is not None:
        lines.append(f"  checked at            {json.dumps(report.checked_config, sort_keys=True)}")
    fallbacks = report.fallbacks()
    width = max(len(f.name) for f in dataclasses.fields(report.capabilities))
    lines.append(f"  {'capability':<{width}}  {'status':<8}  fallback used instead")
    for field in dataclasses.fields(report.capabilities):
        name = field.name
        if name in fallbacks:
            lines.append(f"  {name:<{width}}  fallback  {fallbacks[name]}")
        else:
            lines.append(f"  {name:<{width}}  present")
    return lines


def _package(report) -> str:
    if not report.package:
        return ""
    return f" (package {report.package}" + (f" {report.version})" if report.version else ")")


def cli_family(args) -> int:
    """Run the conformance check; 0 and the table when the family conforms, else 1 and the reason (the
    check's message names the family and what was expected)."""
    from looplab.model.contract import FamilyError, check_family, resolve_family

    if args.loops < 1:
        raise ConfigError(f"--loops: expected an int >= 1; got {args.loops}")
    config = family_config(args.config, args.vocab_size, args.seq_len)
    try:
        # looplab's own model is priced by its FLOP model, not by a method of the module
        builtin = resolve_family(args.name).builtin
        report = check_family(args.name, config, loops=None if builtin else args.loops)
    except FamilyError as e:
        print(f"looplab family check: refused: {e}", file=sys.stderr)
        return 1
    print("\n".join(report_lines(report, args.loops)))
    return 0
