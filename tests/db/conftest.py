"""Fixtures for the database tests: a fresh SQLite path per test, engines closed after each test."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from looplab.orchestrator.db import dispose_all


@pytest.fixture(autouse=True)
def _close_engines():
    """Engines are cached per URL; close them so a test's files can be hashed, deleted, reused."""
    yield
    dispose_all()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "looplab.db"


def file_digest(path: Path) -> str:
    """sha256 of a SQLite file and its WAL (if any): what "the database did not change" means."""
    h = hashlib.sha256(path.read_bytes())
    wal = path.with_name(path.name + "-wal")
    if wal.exists():
        h.update(wal.read_bytes())
    return h.hexdigest()
