"""The task item schema, its JSONL loader and writer.

One JSON object per line:

    context  str                   the prompt; every choice is scored as its continuation
    choices  [str, str, ...]       at least two non-empty, distinct answers
    gold     int                   index of the right answer in `choices`
    subset   str (optional)        a group to report separately (e.g. "depth=3")

Blank lines are skipped. Anything else is refused before any scoring, with the file, the line and
the field named (`tasks/x.jsonl:7: gold: 3 is out of range for 2 choices (0..1)`), so a bad file
never produces a partial result. Written files are canonical (keys in schema order, `\\n` line
ends, ASCII escapes), so a generator with a fixed seed writes the same bytes every time.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from looplab.model import fields
from looplab.model.errors import ConfigError

KEYS = ("context", "choices", "gold", "subset")
ALL_SUBSETS = "all"  # the subset name of a whole-task score (a row per subset comes besides it)


@dataclass(frozen=True)
class Item:
    context: str
    choices: tuple[str, ...]
    gold: int
    subset: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"context": self.context, "choices": list(self.choices), "gold": self.gold}
        if self.subset is not None:
            out["subset"] = self.subset
        return out


def parse_item(obj: Any, where: str) -> Item:
    """One item from a decoded JSON value; ConfigError prefixed with `where` (file:line) on bad input."""
    d = fields.known_keys(where, obj, KEYS)
    for key in ("context", "choices", "gold"):
        if key not in d:
            raise ConfigError(f"{where}: {key}: missing (every item needs {', '.join(KEYS[:3])})")
    context, choices, gold, subset = d["context"], d["choices"], d["gold"], d.get("subset")
    if not isinstance(context, str):
        raise ConfigError(f"{where}: context: expected a string, got {context!r}")
    if not isinstance(choices, list) or len(choices) < 2:
        raise ConfigError(f"{where}: choices: expected a list of at least 2 strings, got {choices!r}")
    for i, choice in enumerate(choices):
        if not isinstance(choice, str) or not choice.strip():
            raise ConfigError(f"{where}: choices[{i}]: expected a non-empty string, got {choice!r}")
    if len(set(choices)) != len(choices):
        raise ConfigError(f"{where}: choices: the same answer twice in {choices!r}")
    if gold is None or gold == "":
        raise ConfigError(
            f"{where}: gold: empty; expected the index of the right choice (0..{len(choices) - 1})"
        )
    gold = fields.integer(f"{where}: gold", gold, lo=0)
    if gold >= len(choices):
        raise ConfigError(
            f"{where}: gold: {gold} is out of range for {len(choices)} choices (0..{len(choices) - 1})"
        )
    if subset is not None and (not isinstance(subset, str) or not subset.strip() or subset == ALL_SUBSETS):
        raise ConfigError(
            f"{where}: subset: expected a non-empty string other than {ALL_SUBSETS!r}, got {subset!r}"
        )
    return Item(context, tuple(choices), gold, subset)


def load_jsonl(path: str | Path) -> list[Item]:
    """Every item of a task file, checked (see the module docstring); ConfigError naming file and line."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"tasks: {str(path)!r} is not a file")
    items = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"{path}:{n}"
            try:
                obj = json.loads(line)
            except ValueError as e:
                raise ConfigError(f"{where}: not valid JSON ({e})") from None
            items.append(parse_item(obj, where))
    if not items:
        raise ConfigError(f"{path}: no items (expected one JSON object per line)")
    return items


def dumps_jsonl(items: list[Item]) -> bytes:
    """The canonical bytes of a task file."""
    return "".join(json.dumps(item.to_dict(), ensure_ascii=True) + "\n" for item in items).encode("ascii")


def write_jsonl(path: str | Path, items: list[Item]) -> Path:
    """Write a task file atomically (temp name + rename): a reader never sees half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_bytes(dumps_jsonl(items))
    os.replace(tmp, path)
    return path


def balanced_golds(n: int, n_choices: int) -> list[int]:
    """Gold positions 0, 1, ..., n_choices-1, 0, 1, ... for n items: every position equally often
    (within one), so always answering one position scores chance."""
    return [i % n_choices for i in range(n)]
