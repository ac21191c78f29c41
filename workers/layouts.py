"""Published checkpoint layouts, supplied by their families: the importer knows none by name.

A layout maps another code base's `config.json` (`model_type`) and weights to a family's config and
state (families/__init__.py says what a layout offers). Each family package of `looplab.families`
that declares `PUBLISHED_LAYOUTS` contributes its own, and so does every entry point of the group
`looplab.layouts` (a family installed from elsewhere: the entry point names a module or an object
with `PUBLISHED_LAYOUTS`). Two layouts claiming one `model_type` are an error, named.

A layout is known by config.json's `model_type` (`MODEL_TYPE`: `published_layouts`) or, for a code base
whose config says its class instead (the public Parcae code's, read into looplab's own family), by its
`_class_name` (`CLASS_NAME`: `published_classes`); one that declares neither is refused, named.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import pkgutil
from typing import Any

from looplab import families
from looplab.model.errors import ConfigError

ENTRY_POINT_GROUP = "looplab.layouts"


def _declared(owner: Any) -> tuple[Any, ...]:
    return tuple(getattr(owner, "PUBLISHED_LAYOUTS", ()))


def _owners() -> list[tuple[str, Any]]:
    """(where, module or object) for every family package here and every registered entry point."""
    found = [
        (f"{families.__name__}.{info.name}", importlib.import_module(f"{families.__name__}.{info.name}"))
        for info in pkgutil.iter_modules(families.__path__)
        if info.ispkg
    ]
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        found.append((f"entry point {ep.name} ({ep.value})", ep.load()))
    return found


KEYS = ("MODEL_TYPE", "CLASS_NAME")  # what identifies a layout: config.json's model_type, or its _class_name


def collect(owners: list[tuple[str, Any]], key: str = "MODEL_TYPE") -> dict[str, Any]:
    """model_type (or, with key "CLASS_NAME", _class_name) -> layout over `owners`; ConfigError naming
    both owners of one claimed twice, or the owner of a layout that declares neither key."""
    layouts: dict[str, Any] = {}
    where: dict[str, str] = {}
    for name, owner in owners:
        for layout in _declared(owner):
            if not any(getattr(layout, k, None) for k in KEYS):
                raise ConfigError(
                    f"published layout {layout!r} of {name}: declares neither {' nor '.join(KEYS)}"
                )
            kind = getattr(layout, key, None)
            if kind is None:
                continue
            if kind in layouts and layouts[kind] is not layout:
                raise ConfigError(f"published layout {kind!r}: declared by both {where[kind]} and {name}")
            layouts[kind], where[kind] = layout, name
    return layouts


@functools.cache
def published_layouts() -> dict[str, Any]:
    """config.json's `model_type` -> the layout that reads it, from every family (cached per process)."""
    return collect(_owners())


@functools.cache
def published_classes() -> dict[str, Any]:
    """config.json's `_class_name` -> the layout that reads it, from every family (cached per process)."""
    return collect(_owners(), "CLASS_NAME")
