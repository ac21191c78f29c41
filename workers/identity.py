"""What defines a job and what only says how it executes: one rule for every job kind's `Spec`.

Every Spec field either *defines* the job (the default) or is marked `field(metadata=EXECUTION)`: it
says where and in what pieces the same computation runs, or what is measured or saved along the way
(a device, a micro-batch size, cadences). The rule for a field: it is execution only if no weight after
any step and no reported value (a loss, a result column) depends on it beyond float summation order.

`identity(spec_cls, spec_dict)` is the spec dict with its execution fields dropped. It is what a job's
config hash is computed from (orchestrator/grid.py: submitting a grid again after an upgrade adds
execution fields, or with other execution values, adds nothing), what a train checkpoint's resume check
compares (workers/train/spec.py), and it drops execution fields whether present or not, so a dict
stored before a field existed keeps matching. Each kind's Spec docstring lists its execution fields.
"""

from __future__ import annotations

import dataclasses
from typing import Any

# The metadata of an execution field.
EXECUTION = {"execution": True}


def execution_fields(spec_cls: type) -> frozenset[str]:
    """The fields of dataclass `spec_cls` that say how a job executes, not what it is."""
    return frozenset(f.name for f in dataclasses.fields(spec_cls) if f.metadata.get("execution"))


def spec_to_dict(spec: Any) -> dict[str, Any]:
    """Every field of dataclass instance `spec` by name, each value as it is: a job kind's canonical spec
    dict (`Spec.to_dict = spec_to_dict`), the one its config hash is computed from. Not `dataclasses.asdict`,
    which would turn a nested Spec into a plain dict its own way, not by its `to_dict`."""
    return {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)}


def identity(spec_cls: type, spec_dict: dict[str, Any]) -> dict[str, Any]:
    """What defines the job of spec dict `spec_dict` (of a `spec_cls`): the dict without execution fields."""
    drop = execution_fields(spec_cls)
    return {k: v for k, v in spec_dict.items() if k not in drop}
