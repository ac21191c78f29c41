"""The families tests run on one torch thread, as the workers tests do (tests/workers/conftest.py)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")  # inherited by the subprocesses of the resume test


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """Every families test on one torch thread (tests/conftest.py)."""
