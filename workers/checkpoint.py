"""Atomic, safely loadable training checkpoints.

A checkpoint is one `torch.save`d dict of tensors and plain Python values only (model and optimizer
state dicts, step, schedule position, RNG states as tensors / tuples of ints, spec and model config as
dicts), so it loads with `torch.load(weights_only=True)`: opening a checkpoint never runs code.

Writing: a temp file in the same directory, flushed and fsynced, then `os.replace` onto the final name
and the directory fsynced. A crash at any point leaves either the previous checkpoint or the new one,
never a torn file. A file that does not load is reported by name and left where it is.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import torch

from model.errors import ConfigError

CHECKPOINT = "checkpoint.pt"
FINAL = "final.pt"


def rng_state() -> dict[str, Any]:
    py = random.getstate()
    state = {"torch": torch.get_rng_state(), "python": [py[0], list(py[1]), py[2]]}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _fsync_dir(d: Path) -> None:
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save(path: str | Path, state: dict[str, Any]) -> None:
    """Write `state` to `path` atomically (temp + fsync + rename)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():  # the rename did not happen: drop the partial file, keep the old checkpoint
            tmp.unlink()
    _fsync_dir(path.parent)


def load(path: str | Path) -> dict[str, Any]:
    """Load a checkpoint without executing code; ConfigError naming the file if it is unreadable."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"checkpoint: {str(path)!r} does not exist")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise ConfigError(
            f"checkpoint: {str(path)!r} is corrupt or not a looplab checkpoint "
            f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); "
            "it was left in place"
        ) from e
    if not isinstance(state, dict) or "model" not in state or "model_config" not in state:
        raise ConfigError(f"checkpoint: {str(path)!r} is not a looplab checkpoint (no model / model_config)")
    return state


def find(path: str | Path) -> Path:
    """A checkpoint file from a train artifact dir (final.pt, else checkpoint.pt) or a file path."""
    p = Path(path)
    if p.is_dir():
        for name in (FINAL, CHECKPOINT):
            if (p / name).is_file():
                return p / name
        raise ConfigError(f"checkpoint: directory {str(p)!r} holds no {FINAL} or {CHECKPOINT}")
    if not p.is_file():
        raise ConfigError(f"checkpoint: {str(p)!r} does not exist")
    return p
