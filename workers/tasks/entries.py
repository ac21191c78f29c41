"""A task list as the jobs that score tasks take it (the eval job, and the adaptive job, which scores its
exits on the same tasks): each entry a built-in generator, a `.jsonl` task file or `harness:NAME`;
its checked form, the name its rows carry, its category, and its items on disk.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from looplab.model.errors import ConfigError
from looplab.workers.tasks import GENERATORS
from looplab.workers.tasks.schema import Item, dumps_jsonl, load_jsonl, write_jsonl

HARNESS_PREFIX = "harness:"
CATEGORIES = ("knowledge", "reasoning")
# harness tasks that test what a model knows (the built-in generators are reasoning)
KNOWLEDGE_TASKS = (
    "sciq",
    "arc_easy",
    "arc_challenge",
    "openbookqa",
    "piqa",
    "hellaswag",
    "winogrande",
    "boolq",
    "lambada_openai",
    "lambada_standard",
    "triviaqa",
    "commonsense_qa",
    "mmlu",
)


def task_list(value: Any) -> list[str]:
    """The task list, each entry checked (a task file read whole) and named once; files made absolute."""
    accepted = f"{', '.join(GENERATORS)}, a path to a .jsonl task file, or {HARNESS_PREFIX}NAME"
    if not isinstance(value, list | tuple) or not value:
        raise ConfigError(f"tasks: expected a non-empty list of {accepted}; got {value!r}")
    out, names = [], set()
    for entry in value:
        if not isinstance(entry, str) or not entry.strip():
            raise ConfigError(f"tasks: {entry!r} is not a task; accepted: {accepted}")
        entry = entry.strip()
        if entry.startswith(HARNESS_PREFIX):
            if not entry[len(HARNESS_PREFIX) :]:
                raise ConfigError(f"tasks: {entry!r} names no harness task (give {HARNESS_PREFIX}NAME)")
        elif entry.endswith(".jsonl"):
            path = Path(entry).expanduser().resolve()
            load_jsonl(path)  # refuses a bad file, naming file, line and field
            entry = str(path)
        elif entry not in GENERATORS:
            raise ConfigError(f"tasks: unknown {entry!r}; accepted: {accepted}")
        name = task_name(entry)
        if name in names:
            raise ConfigError(f"tasks: two tasks named {name!r}; give each task once (rename a file)")
        names.add(name)
        out.append(entry)
    return out


def task_name(entry: str) -> str:
    """The name a task's rows carry: the generator's, the file's stem, or the harness task's."""
    if entry.startswith(HARNESS_PREFIX):
        return entry[len(HARNESS_PREFIX) :]
    return Path(entry).stem if entry.endswith(".jsonl") else entry


def category(name: str, categories: dict[str, str]) -> str | None:
    """A task's category: the one `categories` gives it, else reasoning for a generated task and
    knowledge for a well-known harness task."""
    if name in categories:
        return categories[name]
    if name in GENERATORS:
        return "reasoning"
    if any(name == k or name.startswith(f"{k}_") for k in KNOWLEDGE_TASKS):
        return "knowledge"
    return None


def local_items(
    entry: str, task_dir: Path, n_per_subset: int, task_seed: int, limit: int | None
) -> tuple[Path, list[Item]]:
    """(task file, its items, cut to `limit`) of a generated task (written now) or a task file."""
    if entry in GENERATORS:
        items = GENERATORS[entry].generate(n_per_subset, task_seed)
        path = task_dir / f"{entry}.jsonl"
        if not path.is_file() or path.read_bytes() != dumps_jsonl(items):
            write_jsonl(path, items)
    else:
        path = Path(entry)
        items = load_jsonl(path)
    return path, items[:limit] if limit else items
