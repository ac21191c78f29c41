"""The one place that knows looplab's rooms were once top-level import names.

Before looplab installed a single name, its rooms were importable as `model`, `orchestrator`,
`families`, ... Two things written then still have to work:

- **Stored family names.** A run of a family bundled with looplab was stored (and hashed) as, e.g.,
  `"families.huginn:factory"`. That spelling stays the canonical one, so every stored hash keeps its
  value and a grid naming `"families.huginn:factory"` is the same run (`canonical_family`).
  Resolving a name tries the user's module first (their own `model.py` wins) and falls back to
  looplab's room only when nothing else of that name exists (`import_family_module`).
- **Old grid files.** `from orchestrator import Grid` in a file `looplab submit` runs is served by an
  alias that exists only while the file runs, with a one-line deprecation note (`legacy_imports`).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.util
import sys
import types
from collections.abc import Iterator

# looplab's rooms (installed as looplab.<room>); the same tuple pyproject's package-dir maps.
ROOMS = (
    "lab",
    "orchestrator",
    "workers",
    "families",
    "model",
    "analysis",
    "dashboard",
    "migrations",
    "examples",
)


def canonical_family(name: str) -> str:
    """`families.huginn:factory` -> `families.huginn:factory`: the spelling runs were stored and
    hashed under before the rename, kept so their hashes do not move. Any other name is unchanged."""
    module, sep, attr = name.partition(":")
    head, dot, rest = module.partition(".")
    if sep and head == "looplab" and rest.split(".")[0] in ROOMS:
        return f"{rest}:{attr}"
    return name


def import_family_module(module_name: str) -> types.ModuleType:
    """Import a family's module: the name as written first (a user's own module wins); if that module
    does not exist at all and its first part is one of looplab's rooms, looplab's own
    (`families.huginn` -> `looplab.families.huginn`). Any other failure is the module's own."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        top = module_name.split(".")[0]
        if top in ROOMS and e.name == top:  # no module of that first name at all: looplab's room
            return importlib.import_module(f"looplab.{module_name}")
        raise


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec):  # the real module, under its old name too
        return importlib.import_module(self.target)

    def exec_module(self, module) -> None:  # already executed under its real name
        pass


class _LegacyFinder(importlib.abc.MetaPathFinder):
    """Last on sys.meta_path: only a name nothing else provides (`orchestrator`, `model.config`) is
    served, as looplab's room of that name."""

    def __init__(self) -> None:
        self.served: list[str] = []

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] not in ROOMS:
            return None
        target_name = f"looplab.{fullname}"
        if importlib.util.find_spec(target_name) is None:
            return None
        self.served.append(fullname)
        is_pkg = hasattr(importlib.import_module(target_name), "__path__")
        return importlib.util.spec_from_loader(fullname, _AliasLoader(target_name), is_package=is_pkg)


@contextlib.contextmanager
def legacy_imports(where: str) -> Iterator[None]:
    """While a grid file runs: `from orchestrator import Grid` (and any other old room name) imports
    looplab's room, with one deprecation line on stderr naming the new spelling. Removed afterwards,
    so nothing of looplab's stays under a generic name."""
    finder = _LegacyFinder()
    sys.meta_path.append(finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        for name in finder.served:
            sys.modules.pop(name, None)
        if finder.served:
            tops = sorted({n.split(".")[0] for n in finder.served})
            print(
                f"looplab: {where} imports {', '.join(tops)} by its old name; write "
                f"`from looplab.{tops[0]} import ...` (or `from looplab import Grid, Queue`): the old names "
                "work only inside `looplab submit` and will be removed",
                file=sys.stderr,
            )
