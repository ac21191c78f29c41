"""The one field-checking toolkit: every config and spec (ModelConfig, the job Specs, Grid) checks its
values with these functions, so every bad value gets the same kind of message — the field's name and
what is accepted — wherever it was given.

It lives in `model/` because `model` is the bottom of the import graph (orchestrator → workers → model):
from here every layer can use it. Pure Python, no torch.

Each checker returns the (normalised) value or raises `ConfigError`, e.g.
`integer("seed", -1, lo=0)` → `ConfigError("seed: must be >= 0, got -1")`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from typing import Any

from looplab.model.errors import ConfigError


def did_you_mean(word: Any, names: Collection[str]) -> str:
    """' (did you mean 'batch_size'?)' for a misspelt name close to one of `names`, else ''; goes between
    the refused value and the accepted list of a message, so the likely fix is read first."""
    import difflib

    close = difflib.get_close_matches(str(word), [str(n) for n in names], n=1, cutoff=0.75)
    return f" (did you mean {close[0]!r}?)" if close else ""


def known_keys(where: str, d: Any, cls_or_names: type | Collection[str]) -> dict[str, Any]:
    """`d` as a dict, refused if it is not a mapping or has a key that is not a field of the dataclass
    (or not in the given names). `where` names the thing being checked, e.g. "train" or "model"."""
    if not isinstance(d, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(d).__name__}")
    if isinstance(cls_or_names, type):
        names = [f.name for f in dataclasses.fields(cls_or_names)]
    else:
        names = list(cls_or_names)
    unknown = sorted(str(k) for k in set(d) - set(names))
    if unknown:
        which = f"key {unknown[0]!r}" if len(unknown) == 1 else f"keys {unknown}"
        hints = "".join(did_you_mean(k, names) for k in unknown)
        raise ConfigError(f"{where}: unknown {which}{hints}; accepted: {', '.join(sorted(names))}")
    return dict(d)


def with_defaults(where: str, d: Any, cls: type) -> dict[str, Any]:
    """`known_keys(where, d, cls)` with every field `d` leaves out set to the dataclass's default."""
    return {**vars(cls()), **known_keys(where, d, cls)}


def integer(
    name: str, v: Any, lo: int | None = None, hi: int | None = None, allow_none: bool = False
) -> int | None:
    """An int (a float with an integral value, e.g. 2e6 from a CLI or JSON, counts as one)."""
    if v is None and allow_none:
        return None
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise ConfigError(f"{name}: expected an integer{' or null' if allow_none else ''}, got {v!r}")
    if lo is not None and v < lo:
        raise ConfigError(f"{name}: must be >= {lo}, got {v}")
    if hi is not None and v > hi:
        raise ConfigError(f"{name}: must be <= {hi}, got {v}")
    return v


def number(
    name: str,
    v: Any,
    lo: float | None = None,
    lo_open: bool = False,
    hi: float | None = None,
    hi_open: bool = False,
    allow_none: bool = False,
) -> float | None:
    """A finite-or-infinite real number (not NaN, not a bool) as a float, optionally bounded."""
    if v is None and allow_none:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or v != v:
        raise ConfigError(f"{name}: expected a number{' or null' if allow_none else ''}, got {v!r}")
    v = float(v)
    if lo is not None and (v <= lo if lo_open else v < lo):
        raise ConfigError(f"{name}: must be {'>' if lo_open else '>='} {lo}, got {v}")
    if hi is not None and (v >= hi if hi_open else v > hi):
        raise ConfigError(f"{name}: must be {'<' if hi_open else '<='} {hi}, got {v}")
    return v


def choice(name: str, v: Any, accepted: Collection[str]) -> str:
    """One of `accepted` (listed in the message in the order given)."""
    if not isinstance(v, str) or v not in accepted:
        raise ConfigError(
            f"{name}: unknown {v!r}{did_you_mean(v, accepted)}; accepted: {', '.join(accepted)}"
        )
    return v


def boolean(name: str, v: Any) -> bool:
    if not isinstance(v, bool):
        raise ConfigError(f"{name}: expected true or false, got {v!r}")
    return v


def mapping(name: str, v: Any, what: str = "a mapping") -> dict[str, Any]:
    """A dict (None counts as empty)."""
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise ConfigError(f"{name}: expected {what}, got {v!r}")
    return dict(v)


def int_list(name: str, v: Any, lo: int = 1) -> list[int]:
    """A non-empty list of integers >= lo, returned sorted and without repeats."""
    if not isinstance(v, list | tuple) or not v:
        raise ConfigError(f"{name}: expected a non-empty list of integers >= {lo}, got {v!r}")
    return sorted({integer(name, x, lo=lo) for x in v})


def device(name: str, v: Any) -> str:
    """A device name: auto, cpu, cuda or cuda:N (checked as text; no torch import here)."""
    if not isinstance(v, str) or not (
        v in ("auto", "cpu", "cuda") or (v.startswith("cuda:") and v[5:].isdigit())
    ):
        raise ConfigError(f"{name}: unknown {v!r}; accepted: auto, cpu, cuda, cuda:N")
    return v


def optional_text(name: str, v: Any, what: str = "a non-empty string") -> str | None:
    """None, or a non-empty string (a path, a name); `what` says which in the error."""
    if v is not None and (not isinstance(v, str) or not v):
        raise ConfigError(f"{name}: expected {what}, got {v!r}")
    return v


def plain(value: Any) -> Any:
    """A config value as JSON has it: dataclasses as dicts, tuples as lists, mapping keys as strings."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    return value


def family_settings(
    cls: type,
    config: dict[str, Any],
    *,
    counts: Collection[str] = (),
    positive: Collection[str] = (),
    choices: dict[str, Collection[str]] | None = None,
    texts: dict[str, str] | None = None,
) -> None:
    """A family's own config dict checked against its config dataclass `cls`: an unknown
    key is refused first (the settings listed), then each key given by its field's declared type — an
    int >= 1 (>= 0 for a key in `counts`), a number >= 0 (> 0 in `positive`), true or false, a string
    (one of `choices[key]`; `texts[key]` says what else is expected) — and last n_heads must split d_model
    into even head widths (RoPE rotates pairs). Each message begins with the field's name: the contract
    names the family and `family_config` before it. The families share this one check (families/*/config.py)."""
    declared = {f.name: f.type for f in dataclasses.fields(cls)}
    default = {f.name: f.default for f in dataclasses.fields(cls)}
    unknown = sorted(set(config) - set(declared))
    if unknown:
        raise ConfigError(
            f"{unknown[0]}: not a setting of this family; accepted: {', '.join(sorted(declared))}"
        )
    for key, value in config.items():
        kind, number = declared[key], not isinstance(value, bool) and isinstance(value, int | float)
        if kind == "int" and (
            not isinstance(value, int) or isinstance(value, bool) or value < (key not in counts)
        ):
            raise ConfigError(f"{key}: expected an int >= {int(key not in counts)}; got {value!r}")
        if kind == "float" and (not number or value < 0 or (key in positive and value == 0)):
            raise ConfigError(
                f"{key}: expected a number {'> 0' if key in positive else '>= 0'}; got {value!r}"
            )
        if kind == "bool" and not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true or false; got {value!r}")
        accepted = (choices or {}).get(key)
        if kind == "str" and (not isinstance(value, str) or (accepted is not None and value not in accepted)):
            what = (
                f"one of {', '.join(accepted)}"
                if accepted is not None
                else (texts or {}).get(key, "a string")
            )
            raise ConfigError(f"{key}: expected {what}; got {value!r}")
    d, heads = config.get("d_model", default["d_model"]), config.get("n_heads", default["n_heads"])
    if d % heads or (d // heads) % 2:
        raise ConfigError(f"n_heads: expected to divide d_model into even head widths; got {heads} for {d}")
