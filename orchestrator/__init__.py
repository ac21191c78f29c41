"""looplab's orchestrator: the persistent queue, the Ray scheduler and the writer.

`from looplab.orchestrator import Grid, Queue` (the API's home before it moved to `looplab`) is the
same lazy lookup as `from looplab import Grid, Queue`, so importing the package never pulls in ray,
torch or pandas.
"""

from __future__ import annotations

from looplab import __getattr__  # noqa: F401 - Grid and Queue, resolved lazily as for `looplab`

__all__ = ["Grid", "Queue"]
