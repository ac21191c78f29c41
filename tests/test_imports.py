"""The import graph of the source: no module imports one that imports it back (lazy imports inside
functions included), and the packages import one way, as the README says:

    orchestrator → workers → model,   dashboard → orchestrator (schema, db and read helpers)

Two named exceptions: the command line goes up (`looplab dashboard` and `looplab demo`, in
orchestrator/cli.py and orchestrator/demo.py, start the dashboard or print its tables), and the engine
(orchestrator/db.py) finds the Alembic scripts in `migrations/` to upgrade a database when it opens it.
The graph is read from the source text (ast), so nothing is imported to check it.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("model", "workers", "orchestrator", "dashboard", "migrations")
# package -> the packages it may import (besides itself)
ALLOWED = {
    "model": set(),
    "workers": {"model"},
    "orchestrator": {"workers", "model"},
    "dashboard": {"orchestrator"},
    "migrations": {"orchestrator"},
}
EXCEPTIONS = {
    "orchestrator.cli": {"dashboard"},
    "orchestrator.demo": {"dashboard"},
    "orchestrator.db": {"migrations"},
}


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of a dotted name that is one of our modules."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for mod, path in modules.items():
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative import
                    anchor = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                # `from pkg import mod` imports the module pkg.mod when there is one; only names that
                # are not modules come from the package itself
                subs = [f"{base}.{a.name}" for a in node.names]
                targets = subs if all(s in modules for s in subs) else [*subs, base]
            for t in targets:
                hit = _resolve(t, modules)
                if hit is not None and hit != mod:
                    graph[mod].add(hit)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_checker_can_fail():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    graph = import_graph()
    assert "model.config" in graph["model.presets"]  # a top-level import is seen
    assert "workers.jobs" in graph["orchestrator.task"]  # so is one inside a function body


def test_no_import_cycles():
    cycles = _cycles(import_graph())
    assert cycles == [], f"modules importing each other (directly or through others): {cycles}"


def test_packages_import_one_way():
    wrong = []
    for mod, targets in import_graph().items():
        pkg = mod.split(".")[0]
        ok = ALLOWED[pkg] | {pkg} | EXCEPTIONS.get(mod, set())
        wrong += [f"{mod} -> {t}" for t in sorted(targets) if t.split(".")[0] not in ok]
    assert wrong == [], "imports against the one-way rule:\n" + "\n".join(wrong)
