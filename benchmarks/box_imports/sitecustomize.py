"""Makes this interpreter (and every Python it starts) lack what a GPU box lacks.

benchmarks/gpu_check.sh --dry-run puts this folder first on PYTHONPATH and sets LOOPLAB_BOX_IMPORTS=1;
Python then imports this module at start-up (site.py imports `sitecustomize`), and importing any
package of BOX_LACKS raises ModuleNotFoundError as if it were not installed. So a dry run in a full
development environment proves what one in a bare environment would: nothing on the GPU path needs
those packages, not even lazily. A box's own image lists PyTorch and a few more (docs/gpu.md).
"""

from __future__ import annotations

import os
import sys

# on the GPU box: no database, queue, dashboard or evaluation-harness packages, and no scipy
BOX_LACKS = frozenset(
    {
        "ray",
        "sqlalchemy",
        "alembic",
        "psycopg",
        "streamlit",
        "altair",
        "datasets",
        "lm_eval",
        "scipy",
        "playwright",
    }
)


class _Absent:
    """A meta-path finder that is consulted first and refuses the packages of BOX_LACKS."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        top = name.partition(".")[0]
        if top in BOX_LACKS:
            raise ModuleNotFoundError(f"No module named {name!r} (a GPU box has no {top})", name=name)
        return None


if os.environ.get("LOOPLAB_BOX_IMPORTS") == "1":
    sys.meta_path.insert(0, _Absent)
