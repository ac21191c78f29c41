"""looplab: a job scheduler and results database for research on looped (depth-recurrent) LMs.

Installed, looplab is this one import name. Its rooms keep the folders the design card names at the
top of the repository (`orchestrator/`, `workers/`, `model/`, ...) and are installed as subpackages
(`looplab.orchestrator`, `looplab.model`, ...) through setuptools' `package-dir`, so a researcher's
own `model.py`, `analysis/` or `dashboard.py` is never shadowed by ours (pyproject.toml).

`from looplab import Grid, Queue` is resolved lazily, so importing looplab pulls in neither ray,
torch nor pandas.
"""

from __future__ import annotations

import os
from typing import Any

# Run from the checkout without an install (PYTHONPATH=<clone>, as the GPU check does on a bare box),
# the rooms sit beside this folder rather than inside it: look there too. An installed wheel has them
# inside, and the marker file is not beside site-packages, so nothing is added there.
_CLONE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if os.path.isfile(os.path.join(_CLONE, "orchestrator", "jobqueue.py")) and _CLONE not in __path__:
    __path__.append(_CLONE)  # type: ignore[name-defined]  # noqa: F821 - a package's own __path__

__all__ = ["Grid", "Queue"]


def __getattr__(name: str) -> Any:
    if name == "Grid":
        from looplab.orchestrator.grid import Grid

        return Grid
    if name == "Queue":
        from looplab.lab.api import Queue

        return Queue
    raise AttributeError(f"module 'looplab' has no attribute {name!r}")
