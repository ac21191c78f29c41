"""The families tests run on one torch thread, as the workers tests do (tests/workers/conftest.py)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")  # inherited by the subprocesses of the resume test


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """Every families test on one torch thread (tests/conftest.py)."""


def edited_copy(fixture: Path, tmp_path: Path, config=None, weights=None) -> Path:
    """A copy of a published-layout fixture with its config.json updated by `config` and its
    model.safetensors replaced by `weights(state)` (the refusal tests' bad checkpoints)."""
    from safetensors.torch import load_file, save_file

    directory = tmp_path / "edited"
    shutil.copytree(fixture, directory)
    if config:
        raw = json.loads((directory / "config.json").read_text())
        (directory / "config.json").write_text(json.dumps({**raw, **config}))
    if weights:
        state = load_file(str(directory / "model.safetensors"))
        save_file(weights(state), str(directory / "model.safetensors"))
    return directory
