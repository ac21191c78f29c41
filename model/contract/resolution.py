"""Finding a family by name: "package.module:factory", a short name registered in the entry-point group
`looplab.models`, or looplab's own (`BUILTIN`); building its module from a config."""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import nn

from looplab.families.looped.model import LoopedLM
from looplab.model.errors import ConfigError
from looplab.model.names import BUILTIN_FAMILY
from looplab.names import import_family_module

BUILTIN = BUILTIN_FAMILY


ENTRY_POINT_GROUP = "looplab.models"


# The keys looplab sets in every family's config: the tokenizer's vocabulary and the context length.
PROVIDED_KEYS = ("vocab_size", "seq_len")


EXPECTED_NAME = (
    f"'package.module:factory' importable on this node, a short name registered in the entry-point "
    f"group {ENTRY_POINT_GROUP!r}, or {BUILTIN!r}"
)


class FamilyError(ConfigError):
    """A family that cannot be used; the message names the family and what was expected."""


@dataclass(frozen=True)
class Family:
    """A resolved family: the name as given, its factory, and the package (and version) it comes from."""

    name: str
    factory: Callable[[dict[str, Any]], nn.Module]
    package: str | None = None
    version: str | None = None

    @property
    def builtin(self) -> bool:
        return self.name == BUILTIN


def _looped_factory(config: dict[str, Any]) -> LoopedLM:
    """The built-in family: a `LoopedLM` of the `ModelConfig` fields in `config`."""
    from looplab.model.config import ModelConfig

    return LoopedLM(ModelConfig.from_dict(config))


def _package_version(module_name: str) -> tuple[str, str | None]:
    top = module_name.split(".")[0]
    try:
        return top, importlib.metadata.version(top)
    except importlib.metadata.PackageNotFoundError:
        return top, None


def resolve_family(name: str | None) -> Family:
    """The family named `name` (None: the built-in one); FamilyError naming it when it cannot be found."""
    if name is None or name == BUILTIN:
        from importlib.metadata import version

        return Family(BUILTIN, _looped_factory, "looplab", _safe(version, "looplab"))
    if not isinstance(name, str) or not name.strip():
        raise FamilyError(f"family: expected {EXPECTED_NAME}; got {name!r}")
    if ":" in name:
        module_name, _, attr = name.partition(":")
        try:
            module = import_family_module(module_name)
        except Exception as e:  # any failure of the import is the family's, reported as such
            raise FamilyError(
                f"family {name!r}: module {module_name!r} does not import ({type(e).__name__}: {e}); "
                f"expected {EXPECTED_NAME}"
            ) from None
        factory = getattr(module, attr, None)
        if not callable(factory):
            raise FamilyError(
                f"family {name!r}: module {module_name!r} has no callable {attr!r}; expected "
                "a factory(config: dict) -> torch.nn.Module"
            )
        return Family(name, factory, *_package_version(module_name))
    found = [ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
    if not found:
        known = sorted(ep.name for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
        raise FamilyError(
            f"family {name!r}: not registered in entry-point group {ENTRY_POINT_GROUP!r} "
            f"(registered: {', '.join([BUILTIN, *known])}); expected {EXPECTED_NAME}"
        )
    try:
        factory = found[0].load()
    except Exception as e:
        raise FamilyError(f"family {name!r}: entry point {found[0].value!r} does not load ({e})") from None
    dist = found[0].dist
    return Family(name, factory, dist.name if dist else None, dist.version if dist else None)


def _safe(fn: Callable, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception:
        return None


def family_config(family: Family, config: dict[str, Any]) -> None:
    """Run the family's own config validation (if it has one), errors naming the family."""
    validate = getattr(family.factory, "validate_config", None)
    if validate is None:
        return
    try:
        validate(dict(config))
    except Exception as e:
        raise FamilyError(f"family {family.name!r}: family_config: {e}") from None


def instantiate(family: Family, config: dict[str, Any]) -> nn.Module:
    """factory(config), checked to be a torch module; FamilyError naming the family otherwise."""
    family_config(family, config)
    try:
        module = family.factory(dict(config))
    except Exception as e:
        raise FamilyError(
            f"family {family.name!r}: the factory raised {type(e).__name__}: {e} (config {config!r})"
        ) from None
    if not isinstance(module, nn.Module):
        raise FamilyError(
            f"family {family.name!r}: the factory returned {type(module).__name__}; expected a "
            "torch.nn.Module"
        )
    return module
