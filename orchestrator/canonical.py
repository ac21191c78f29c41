"""Canonical JSON and its hash: one spelling of a config, so equal configs hash equally everywhere
(job config hashes, grid hashes, variant ids)."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(obj: Any) -> str:
    """Sorted keys, no whitespace; values JSON cannot hold are written as their str()."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def sha256(obj: Any) -> str:
    """Hex sha256 of `canonical_json(obj)`."""
    return hashlib.sha256(canonical_json(obj).encode()).hexdigest()
