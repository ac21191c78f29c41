"""A migration revision is frozen: it imports nothing that today's code can change.

A revision must do the same thing to a database whenever it runs, so it may import only the standard
library, Alembic, SQLAlchemy and other revisions (`migrations.versions.*`, frozen themselves). Never
the project's packages (model, workers, orchestrator, dashboard) and no other third-party package
(torch, pandas): what a revision needs of them is copied into it, as of its writing (revision 0003's
recipe table, revision 0004's variant derivation). Imports are read from the source (ast), inside
functions too, and so are `importlib.import_module(...)` / `__import__(...)` calls, which must name a
module in a string literal to be checked at all.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

VERSIONS = Path(__file__).resolve().parents[2] / "migrations" / "versions"
ALLOWED_TOP_LEVEL = {"alembic", "sqlalchemy"}  # besides the standard library
REVISIONS_PACKAGE = "looplab.migrations.versions"


def allowed(module: str) -> bool:
    top = module.split(".")[0]
    return (
        top in sys.stdlib_module_names
        or top == "__future__"
        or top in ALLOWED_TOP_LEVEL
        or module == REVISIONS_PACKAGE
        or module.startswith(REVISIONS_PACKAGE + ".")
    )


def _dynamic_import(node: ast.Call) -> bool:
    f = node.func
    return (isinstance(f, ast.Attribute) and f.attr == "import_module") or (
        isinstance(f, ast.Name) and f.id in ("__import__", "import_module")
    )


def forbidden_imports(source: str, filename: str = "<revision>") -> list[str]:
    """Every import of `source` a revision may not make, as 'line N: module'."""
    wrong = []
    for node in ast.walk(ast.parse(source, filename)):
        modules: list[str] = []
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            modules = [] if node.level else [node.module or ""]  # relative: inside migrations/versions
        elif isinstance(node, ast.Call) and _dynamic_import(node):
            arg = node.args[0] if node.args else None
            literal = isinstance(arg, ast.Constant) and isinstance(arg.value, str)
            modules = [arg.value if literal else "<a module named at run time>"]
        wrong += [f"line {node.lineno}: {m}" for m in modules if not allowed(m)]
    return wrong


def test_the_checker_can_fail():
    old_0004 = (
        "import json\n"
        "def _backfill(conn):\n"
        "    from looplab.orchestrator.errors import ConfigError\n"
        "    from looplab.orchestrator.variants import variant_columns\n"
    )
    assert forbidden_imports(old_0004) == [
        "line 3: looplab.orchestrator.errors",
        "line 4: looplab.orchestrator.variants",
    ]
    others = (
        "import looplab.model.presets, json\n"
        "from looplab.workers import train_spec\n"
        "import torch\n"
        "import importlib\n"
        "importlib.import_module('dashboard.data')\n"
        "importlib.import_module(name)\n"
        "__import__('pandas')\n"
    )
    assert forbidden_imports(others) == [
        "line 1: looplab.model.presets",
        "line 2: looplab.workers",
        "line 3: torch",
        "line 5: dashboard.data",
        "line 6: <a module named at run time>",
        "line 7: pandas",
    ]
    fine = (
        "from __future__ import annotations\n"
        "import hashlib, json, math\n"
        "from collections.abc import Sequence\n"
        "import sqlalchemy as sa\n"
        "from alembic import op\n"
        "from sqlalchemy.dialects import postgresql\n"
        "import importlib\n"
        "importlib.import_module('looplab.migrations.versions.0001_initial')\n"
    )
    assert forbidden_imports(fine) == []


def test_every_revision_imports_only_the_standard_library_alembic_sqlalchemy_and_revisions():
    revisions = sorted(p for p in VERSIONS.glob("*.py") if p.name != "__init__.py")
    assert len(revisions) >= 9  # the checker sees the revisions (0001 .. head)
    wrong = {p.name: forbidden_imports(p.read_text(), str(p)) for p in revisions}
    assert {name: w for name, w in wrong.items() if w} == {}, "revisions importing live code or packages"
