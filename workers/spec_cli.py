"""Command-line flags generated from a job's `Spec` dataclass: one place for names, defaults and help.

Every Spec field documents itself with an attribute docstring, a string literal on the line right after
the field (as litgpt's argument dataclasses do); `field_docs` reads them from the class's source. The
generated parser has one `--field-name` flag per field:

    int / float        a number; `2e6` is fine for an integer field (the Spec accepts integral floats)
    str                the text as given
    str | bool         `true` / `false` become booleans, anything else stays text
    bool               `--flag` / `--no-flag`
    list[int]          comma-separated: `--loops 1,2,4`
    dict               repeatable `KEY=VALUE`, VALUE parsed as JSON (else kept as text)
    a dataclass        its own fields become flags too (the train job's `data`: --corpus, ...)

Flags default to "not given": `SpecParser.spec_dict(args)` returns only what the user typed, so the
Spec's `from_dict` fills every default and stays the one validator. Converters never reject a value
themselves; `from_dict` does, naming the field. Every parse error is one line, `error: <field>: ...`,
with exit status 2.

`job_parser` and `run_standalone` are the rest of every job's `python -m workers.<job>`: the
reporting flags (`--events-jsonl`, `--quiet`, and `--out` where the job writes an artifact dir) and
the parse → `Spec.from_dict` → reporter → run → print dance with its exit statuses (0 done, 2 bad
input, 130 stopped), written once.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import json
import re
import sys
import textwrap
import types
import typing
from collections.abc import Callable
from typing import Any, NoReturn

from looplab.model.errors import ConfigError
from looplab.workers.reporter import JobInterrupted, Reporter, make_reporter


def field_docs(cls: type) -> dict[str, str]:
    """{field name: its attribute docstring} read from the source of the dataclass `cls` and of the
    dataclasses it derives from (a field a subclass declares again takes the subclass's docstring)."""
    docs: dict[str, str] = {}
    for klass in reversed([k for k in cls.__mro__ if dataclasses.is_dataclass(k)]):
        tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        body = next(node for node in tree.body if isinstance(node, ast.ClassDef)).body
        for node, after in zip(body, body[1:]):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs[node.target.id] = inspect.cleandoc(after.value.value)
    return docs


def _number(text: str) -> int | float | str:
    """An int or float if `text` reads as one, else the text (the Spec then names the field)."""
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    return text


def _number_list(text: str) -> list[int | float | str]:
    return [_number(part.strip()) for part in text.split(",") if part.strip()]


def _text_or_bool(text: str) -> str | bool:
    return {"true": True, "false": False}.get(text.lower(), text)


def _key_value(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


def _non_none(hint: Any) -> list[Any]:
    """The members of a union type other than None (or [hint] for a plain type)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return [a for a in typing.get_args(hint) if a is not type(None)]
    return [hint]


def _show(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ",".join(map(str, value))
    if isinstance(value, bool):
        return "true" if value else "false"
    return "none" if value is None or value == {} else str(value)


DEFAULT_ALIASES = {"recipe": ["--preset"]}


class SpecParser(argparse.ArgumentParser):
    """An ArgumentParser with one flag per field of a Spec dataclass (see the module docstring).

    `aliases` adds other flag names for a field (every job's `recipe` is also `--preset`, the name the
    README and the model code use), `required` names fields
    the command line must give, `skip` names fields the CLI does not offer. Extra CLI-only flags are
    added with `add_argument` as usual; `spec_dict` ignores them."""

    def __init__(
        self,
        spec_cls: type,
        *,
        aliases: dict[str, list[str]] | None = None,
        required: tuple[str, ...] = (),
        skip: tuple[str, ...] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._paths: dict[str, tuple[str, ...]] = {}  # dest -> field path, e.g. ("data", "corpus")
        self._flag_field: dict[str, str] = {}  # "--preset" -> "recipe", for error messages
        aliases = {**DEFAULT_ALIASES, **(aliases or {})}
        self._add_fields(spec_cls, (), aliases, set(required), set(skip))

    def _add_fields(
        self, cls: type, prefix: tuple[str, ...], aliases: dict, required: set[str], skip: set[str]
    ) -> None:
        docs, hints, defaults = field_docs(cls), typing.get_type_hints(cls), vars(cls())
        for f in dataclasses.fields(cls):
            if f.name in skip:
                continue
            kinds = _non_none(hints[f.name])
            if len(kinds) == 1 and dataclasses.is_dataclass(kinds[0]):
                self._add_fields(kinds[0], (*prefix, f.name), aliases, required, skip)
                continue
            if f.name not in docs:
                raise TypeError(f"{cls.__name__}.{f.name}: no attribute docstring to use as its --help")
            path = (*prefix, f.name)
            dest = "__".join(path)
            flags = [f"--{f.name.replace('_', '-')}", *aliases.get(f.name, [])]
            default = defaults[f.name]
            help_text = docs[f.name].replace("%", "%%")
            if f.name not in required:
                help_text += f" (default: {_show(default)})"
            options: dict[str, Any] = {"dest": dest, "default": argparse.SUPPRESS, "help": help_text}
            if f.name in required:
                options["required"] = True
            origin = typing.get_origin(kinds[0]) or kinds[0]
            if kinds == [bool]:
                options["action"] = argparse.BooleanOptionalAction
            elif set(kinds) == {str, bool}:
                options.update(type=_text_or_bool, metavar="TEXT|true|false")
            elif origin is list:
                names = typing.get_args(kinds[0]) == (str,)  # e.g. kv_strategies, tasks
                options.update(type=_number_list, metavar="NAME,NAME,..." if names else "N,N,...")
            elif origin is dict:
                options.update(type=_key_value, action="append", metavar="KEY=VALUE")
            elif set(kinds) <= {int, float}:
                options.update(type=_number, metavar="N")
            elif set(kinds) == {int, str}:
                options.update(type=_number, metavar="N|TEXT")
            else:
                options.update(metavar=f.name.upper())
            self.add_argument(*flags, **options)
            self._paths[dest] = path
            self._flag_field.update({flag: ".".join(path) for flag in flags})
            self._flag_field[f"--no-{f.name.replace('_', '-')}"] = ".".join(path)

    def spec_dict(self, args: argparse.Namespace) -> dict[str, Any]:
        """The Spec fields the command line gave, nested like the Spec (`{"data": {"corpus": ..}}`)."""
        out: dict[str, Any] = {}
        for dest, path in self._paths.items():
            if not hasattr(args, dest):
                continue
            value = getattr(args, dest)
            if isinstance(value, list) and value and isinstance(value[0], tuple):  # KEY=VALUE pairs
                value = dict(value)
            target = out
            for part in path[:-1]:
                target = target.setdefault(part, {})
            target[path[-1]] = value
        return out

    def error(self, message: str) -> NoReturn:
        """One line naming the field, `error: tokens: expected one argument`, and exit status 2."""
        match = re.match(r"argument (--[\w-]+)[^:]*: (.*)", message)
        if match and match.group(1) in self._flag_field:
            message = f"{self._flag_field[match.group(1)]}: {match.group(2)}"
        match = re.match(r"the following arguments are required: (.*)", message)
        if match:
            first = match.group(1).split(",")[0].split("/")[0].strip()
            message = f"{self._flag_field.get(first, first.lstrip('-'))}: required (give {first})"
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)


def job_parser(
    spec_cls: type,
    module: str,
    description: str,
    *,
    out_help: str | None = None,
    out_required: bool = False,
    **kwargs: Any,
) -> SpecParser:
    """The parser of `python -m <module>`, a job's standalone command: the Spec's flags (`kwargs` go to
    `SpecParser`), plus `--events-jsonl` and `--quiet`, and `--out` when `out_help` is given (jobs that
    keep files)."""
    parser = SpecParser(spec_cls, prog=f"python -m {module}", description=description, **kwargs)
    if out_help is not None:
        parser.add_argument("--out", required=out_required, default=None, help=out_help)
    parser.add_argument("--events-jsonl", help="also append every event to this JSON-lines file")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def checkpoint_exists(spec: Any) -> None:
    """A `before` check for jobs that read a trained model: `spec.checkpoint` names a checkpoint
    (a ConfigError naming the field otherwise), so a bad path fails before any work or output."""
    from looplab.workers.checkpoint import find

    find(spec.checkpoint)


def run_standalone(
    parser: SpecParser,
    spec_cls: Any,
    job: Callable[[Any, Reporter, Any], Any],
    show: Callable[[Any, Any, argparse.Namespace], None],
    *,
    desc: str | Callable[[Any], str],
    argv: list[str] | None = None,
    before: Callable[[Any], None] | None = None,
    resume_hint: str = "rerun the same command to continue",
) -> int:
    """Run one job from the command line and return its exit status.

    Parses `argv` with `parser` (made by `job_parser`), builds the Spec with `spec_cls.from_dict`,
    calls `before(spec)` (cheap checks that should fail before any output, e.g. a missing checkpoint),
    then `job(spec, reporter, args.out)` with a console reporter named `desc` (or `desc(spec)`), and
    finally `show(spec, result, args)` to print the result. A `ConfigError` anywhere prints
    `error: <field>: ...` and returns 2; a stop request (Ctrl-C, SIGTERM) that ends the job with
    `JobInterrupted` prints `interrupted (...); <resume_hint>` and returns 130."""
    args = parser.parse_args(argv)
    reporter: Any = None
    try:
        spec = spec_cls.from_dict(parser.spec_dict(args))
        if before is not None:
            before(spec)
        name = desc(spec) if callable(desc) else desc
        reporter = make_reporter(name, args.events_jsonl, args.quiet)
        result = job(spec, reporter, getattr(args, "out", None))
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except JobInterrupted as e:
        print(f"interrupted ({e}); {resume_hint}", file=sys.stderr)
        return 130
    finally:
        if reporter is not None and hasattr(reporter, "close"):
            reporter.close()
    show(spec, result, args)
    return 0
