"""The job kinds, by name: how to validate a spec and how to run one.

    validate(kind, spec) -> dict     the canonical spec (defaults filled in); ConfigError naming
                                     the field on bad input, before any work starts
    run(kind, spec, reporter, artifact_dir) -> dict    the job's summary

Each kind is a module with a frozen `Spec` dataclass (`Spec.from_dict(d)` rejects unknown keys,
`spec.to_dict()` is canonical) and `run(spec, reporter, artifact_dir)`. This module is the
orchestrator's `JobRegistry` (tests pass fakes with the same two functions); besides it, the
orchestrator imports only the Reporter's events (workers.reporter).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Protocol

from model.errors import ConfigError
from workers.reporter import JobInterrupted, Reporter

__all__ = ["KINDS", "JobInterrupted", "JobRegistry", "run", "validate"]

KINDS = {
    "train": "workers.train",
    "depth_sweep": "workers.depth_sweep",
    "decode_bench": "workers.decode_bench",
    "eval": "workers.eval",
}


class JobRegistry(Protocol):
    """What the orchestrator needs of a set of job kinds; this module is one."""

    def validate(self, kind: str, spec: dict[str, Any]) -> dict[str, Any]: ...

    def run(
        self, kind: str, spec: dict[str, Any], reporter: Reporter, artifact_dir: str | Path
    ) -> dict[str, Any]: ...


def _module(kind: str):
    if kind not in KINDS:
        raise ConfigError(f"job: unknown kind {kind!r}; accepted: {', '.join(KINDS)}")
    return importlib.import_module(KINDS[kind])


def validate(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    return _module(kind).Spec.from_dict(spec).to_dict()


def run(kind: str, spec: dict[str, Any], reporter: Reporter, artifact_dir: str | Path) -> dict[str, Any]:
    mod = _module(kind)
    return mod.run(mod.Spec.from_dict(spec), reporter, Path(artifact_dir))
