"""Small checkers shared by the job `Spec.from_dict` methods: every error names the field.

A spec is a plain JSON dict; `from_dict` rejects unknown keys and bad values with a ConfigError saying
which field is wrong and what is accepted, before any work starts.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from model.errors import ConfigError

# Validation draws h0 from this seed, in training's evaluations and in the depth sweep alike, so the
# sweep's loss at a run's trained loop count is the run's final validation loss.
EVAL_H0_SEED = 1234


def check_keys(kind: str, d: Any, cls: type) -> dict[str, Any]:
    if not isinstance(d, dict):
        raise ConfigError(f"{kind}: spec must be a dict, got {type(d).__name__}")
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(d) - set(names))
    if unknown:
        raise ConfigError(f"{kind}: unknown key(s) {unknown}; accepted: {', '.join(names)}")
    return dict(d)


def integer(name: str, v: Any, lo: int | None = None, allow_none: bool = False) -> int | None:
    if v is None and allow_none:
        return None
    if isinstance(v, float) and v.is_integer():  # 2e6 from a CLI or JSON is a fine token count
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise ConfigError(f"{name}: expected an integer{' or null' if allow_none else ''}, got {v!r}")
    if lo is not None and v < lo:
        raise ConfigError(f"{name}: must be >= {lo}, got {v}")
    return v


def number(
    name: str,
    v: Any,
    lo: float | None = None,
    lo_open: bool = False,
    hi: float | None = None,
    allow_none: bool = False,
) -> float | None:
    if v is None and allow_none:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or v != v:
        raise ConfigError(f"{name}: expected a number{' or null' if allow_none else ''}, got {v!r}")
    v = float(v)
    if lo is not None and (v <= lo if lo_open else v < lo):
        raise ConfigError(f"{name}: must be {'>' if lo_open else '>='} {lo}, got {v}")
    if hi is not None and v > hi:
        raise ConfigError(f"{name}: must be <= {hi}, got {v}")
    return v


def choice(name: str, v: Any, accepted: list[str] | tuple[str, ...]) -> str:
    if v not in accepted:
        raise ConfigError(f"{name}: unknown {v!r}; accepted: {', '.join(accepted)}")
    return v


def boolean(name: str, v: Any) -> bool:
    if not isinstance(v, bool):
        raise ConfigError(f"{name}: expected true or false, got {v!r}")
    return v


def device(name: str, v: Any) -> str:
    if not isinstance(v, str) or not (
        v in ("auto", "cpu", "cuda") or (v.startswith("cuda:") and v[5:].isdigit())
    ):
        raise ConfigError(f"{name}: unknown {v!r}; accepted: auto, cpu, cuda, cuda:N")
    return v


def resolve_device(name: str):
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device: {name!r} requested but CUDA is not available")
    return torch.device(name)
