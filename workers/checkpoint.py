"""Atomic, safely loadable training checkpoints.

A checkpoint is one `torch.save`d dict of tensors and plain Python values only (model and optimizer
state dicts, step, schedule position, RNG states as tensors / tuples of ints, spec and model config as
dicts), so it loads with `torch.load(weights_only=True)`: opening a checkpoint never runs code.

Writing: a temp file in the same directory, flushed and fsynced, then `os.replace` onto the final name
and the directory fsynced. A crash at any point leaves either the previous checkpoint or the new one,
never a torn file. A file that does not load is reported by name and left where it is.

A full file system is reported as such: `torch.save` itself only says `[enforce fail at
inline_container.cc:...] unexpected pos ...` when a write comes up short, so `save` turns that (and
an OSError ENOSPC / EDQUOT) into `NoSpaceError` naming the path, the checkpoint's size and the free
space. The partial temp file is removed first, so the previous checkpoint stays the loadable one.
"""

from __future__ import annotations

import errno
import os
import random
import shutil
from pathlib import Path
from typing import Any

import torch

from looplab.model.errors import ConfigError
from looplab.workers.artifacts import FINAL, final_name, fsync_dir, promote, resume_from


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


class NoSpaceError(OSError):
    """The file system ran out of space while a checkpoint was written; the message says how much."""


def state_nbytes(state: Any) -> int:
    """Bytes of tensor data in a (nested) checkpoint state, each storage counted once: about the size
    `torch.save` writes (its pickled structure adds a little)."""
    seen: set[int] = set()
    total = 0
    stack = [state]
    while stack:
        item = stack.pop()
        if isinstance(item, torch.Tensor):
            storage = item.untyped_storage()
            if storage.data_ptr() not in seen:
                seen.add(storage.data_ptr())
                total += storage.nbytes()
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return total


def _out_of_space(error: BaseException) -> bool:
    if isinstance(error, OSError):
        return error.errno in (errno.ENOSPC, errno.EDQUOT)
    # what torch.save's zip writer raises when a write comes up short (the disk filled up)
    return isinstance(error, RuntimeError) and "unexpected pos" in str(error)


def _no_space(path: Path, state: dict[str, Any]) -> NoSpaceError:
    needed_mb = state_nbytes(state) / 2**20
    free_mb = shutil.disk_usage(path.parent).free / 2**20
    return NoSpaceError(
        f"no space left writing the checkpoint at {path}: it needs ~{needed_mb:,.1f} MB, "
        f"{free_mb:,.1f} MB are free (free space or use another artifact dir)"
    )


def save(path: str | Path, state: dict[str, Any]) -> None:
    """Write `state` to `path` atomically (temp + fsync + rename); NoSpaceError when the disk is full."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except (OSError, RuntimeError) as e:
        if not _out_of_space(e):
            raise
        tmp.unlink(missing_ok=True)  # before measuring: the free space the user has, without it
        raise _no_space(path, state) from e
    finally:
        if tmp.exists():  # the rename did not happen: drop the partial file, keep the old checkpoint
            tmp.unlink()
    fsync_dir(path.parent)


def save_final(directory: str | Path, state: dict[str, Any], attempt: int, queued: bool) -> Path:
    """Write the final weights of attempt `attempt` as its own file (workers/artifacts.py `final_name`,
    the attempt inside too). `queued`: the driver makes them the job's final.pt when it records this
    attempt's success, under the fence, so a replaced attempt that trains on never changes what the
    follow-ups read; otherwise (a run outside the queue: nobody else records a result) at once."""
    d = Path(directory)
    save(d / final_name(attempt), {**state, "attempt": attempt})
    if not queued:
        promote(d, attempt)
    return d / (final_name(attempt) if queued else FINAL)


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
    """A checkpoint file from a train artifact dir (final.pt, else the checkpoint a resume would take,
    `artifacts.resume_from`) or a file path."""
    p = Path(path)
    if p.is_dir():
        found = p / FINAL if (p / FINAL).is_file() else resume_from(p)
        if found is None:
            raise ConfigError(f"checkpoint: directory {str(p)!r} holds no {FINAL} or checkpoint")
        return found
    if not p.is_file():
        raise ConfigError(f"checkpoint: {str(p)!r} does not exist")
    return p
