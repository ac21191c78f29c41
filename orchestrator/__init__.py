"""looplab's orchestrator: the persistent queue, the Ray scheduler, the Python API and the CLI.

`from orchestrator import Grid, Queue` is resolved lazily (module __getattr__), so importing the
package never pulls in ray, torch or pandas.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Grid", "Queue"]


def __getattr__(name: str) -> Any:
    if name == "Grid":
        from looplab.orchestrator.grid import Grid

        return Grid
    if name == "Queue":
        from looplab.lab.api import Queue

        return Queue
    raise AttributeError(f"module 'orchestrator' has no attribute {name!r}")
