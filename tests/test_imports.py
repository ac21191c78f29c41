"""The import graph of the source: no module imports one that imports it back (lazy imports inside
functions included), and the packages import one way, as docs/ARCHITECTURE.md says:

    lab → orchestrator → workers → model,   lab → analysis → model,   orchestrator → analysis,
    dashboard → orchestrator, analysis,   migrations → orchestrator,
    workers → families,   lab → families,   families → model (and torch and the standard library only)

Nothing imports the lab (it is what the `looplab` entry point runs). Installed, every room is a
subpackage of the one import name (`looplab.model`, ...), read here by its room's name; the import name's
own modules (looplab/__init__.py, looplab/names.py) may be imported by any room. Named exceptions, each
one module to one or two: the command line starts the dashboard (`looplab dashboard`: lab/cli.py ->
dashboard/launch.py); the engine (orchestrator/db.py) finds the Alembic scripts in `migrations/`; and
`from looplab import Grid, Queue` resolves lazily into the queue and the lab (looplab/__init__.py). No
module anywhere imports a room by its old top-level name, pyproject installs nothing but `looplab`, and
no job module imports a family by name; a job's package in workers/ imports the shared helpers, not
another job's modules (JOB_REACHES lists the few that stay, with why). The graph is read from
the source text (ast), so nothing is imported to check it; a module named in a module-level dict (a
registry imported by name: the CLI's HANDLERS, workers/jobs.py's KINDS) counts as imported.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = (
    "model",
    "families",
    "workers",
    "analysis",
    "orchestrator",
    "dashboard",
    "migrations",
    "lab",
    "looplab",
)
# package -> the packages it may import (besides itself)
ALLOWED = {
    "model": set(),
    "families": {"model"},
    "workers": {"model", "families"},
    "analysis": {"model"},
    "orchestrator": {"workers", "model", "analysis"},
    "dashboard": {"orchestrator", "analysis"},
    "migrations": {"orchestrator"},
    "lab": {"orchestrator", "analysis", "workers", "model", "families"},
    "looplab": set(),  # the import name's own modules (looplab/names.py): every room may import them
}
# Installed, every room is `looplab.<room>` (pyproject.toml's package-dir); the graph names modules by
# their room (`model.presets`), so an import of `looplab.model.presets` is read as `model.presets`.
PREFIX = "looplab."
# A family is written against the model contract only: besides `model`, it may import torch and the
# standard library, nothing else (no transformers, no looplab package above `model`), so it runs on any
# node that runs its jobs and could move to its own repository unchanged.
FAMILY_IMPORTS = {"torch", "model", "families", "__future__"} | set(sys.stdlib_module_names)
# module -> the modules it may import against the rule
EXCEPTIONS = {
    "looplab": {"lab.api", "orchestrator.grid"},  # `from looplab import Grid, Queue`, resolved lazily
    "looplab.__main__": {"lab.cli"},  # `python -m looplab` is the command line
    "lab.cli": {"dashboard.launch"},
    "orchestrator.db": {"migrations"},
}


# model/ imports no family: LoopedLM's package (families/looped/) only at the contract's default-family
# hook, where "looped" resolves to a LoopedLM, and in the annotations of LoopedLM's own exit forward
EXCEPTIONS |= {
    "model.contract.adapter": {"families.looped.model"},  # build_model: LoopedLM(cfg), unwrapped
    "model.contract.capabilities": {"families.looped.model"},  # a LoopedLM has every capability
    "model.contract.resolution": {"families.looped.model"},  # the built-in family's factory
    "model.exits": {"families.looped.model"},  # kv_view / exit_prefill / exit_decode_step take a LoopedLM
}


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


def _local(name: str, modules: dict[str, Path]) -> str:
    """`looplab.model.presets` -> `model.presets` (the room's module); `looplab.names` stays itself."""
    if name.startswith(PREFIX) and _resolve(name, modules) in (None, "looplab"):
        return name[len(PREFIX) :]
    return name


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of a dotted name that is one of our modules."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def _registered(tree: ast.Module) -> set[str]:
    """Dotted module names in the module-level dict literals of a module: registries whose modules are
    imported by name (`importlib.import_module`), like cli.py's HANDLERS and workers/jobs.py's KINDS."""
    found = set()
    for node in tree.body:
        value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
        if isinstance(value, ast.Dict):
            found |= {
                c.value for c in ast.walk(value) if isinstance(c, ast.Constant) and isinstance(c.value, str)
            }
    return {name for name in found if "." in name}


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for mod, path in modules.items():
        is_pkg = path.name == "__init__.py"
        tree = ast.parse(path.read_text(), str(path))
        registered = {_local(t, modules) for t in _registered(tree)}
        graph[mod] |= {t for t in registered if t in modules and t != mod}
        for node in ast.walk(tree):
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
                targets = subs if all(_local(s, modules) in modules for s in subs) else [*subs, base]
            for t in targets:
                t = _local(t, modules)
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
    assert "dashboard.launch" in graph["lab.cli"]  # and a module named in a string
    # the rule itself: an import up, or down past the exception's one module, is reported
    assert _against_the_rule({"analysis.stats": {"orchestrator.states"}}) == [
        "analysis.stats -> orchestrator.states"
    ]
    assert _against_the_rule({"lab.cli": {"dashboard.launch", "dashboard.ui"}}) == ["lab.cli -> dashboard.ui"]
    assert _against_the_rule({"dashboard.ui": {"orchestrator.frames", "analysis.variants"}}) == []
    # a shared model module importing looplab's own family is against it; the contract's hook is not
    hooked = {
        "model.flops": {"families.looped.layers"},
        "model.contract.resolution": {"families.looped.model"},
    }
    assert _against_the_rule(hooked) == ["model.flops -> families.looped.layers"]
    # nothing below the lab imports it: not the queue, not a page
    assert _against_the_rule(
        {"orchestrator.scheduler": {"lab.display"}, "dashboard.views.plan": {"lab.planner"}}
    ) == [
        "orchestrator.scheduler -> lab.display",
        "dashboard.views.plan -> lab.planner",
    ]
    assert "looplab" in graph["orchestrator"]  # the old re-export is the import name's own lazy lookup


def test_no_import_cycles():
    cycles = _cycles(import_graph())
    assert cycles == [], f"modules importing each other (directly or through others): {cycles}"


def _against_the_rule(graph: dict[str, set[str]]) -> list[str]:
    wrong = []
    for mod, targets in graph.items():
        pkg = mod.split(".")[0]
        ok = ALLOWED[pkg] | {pkg, "looplab"}
        wrong += [
            f"{mod} -> {t}"
            for t in sorted(targets)
            if t.split(".")[0] not in ok and t not in EXCEPTIONS.get(mod, set())
        ]
    return wrong


def test_packages_import_one_way():
    wrong = _against_the_rule(import_graph())
    assert wrong == [], "imports against the one-way rule:\n" + "\n".join(wrong)


def test_the_api_is_one_import_name():
    """`from looplab import Grid, Queue` is the API users type; the room's old re-export stays."""
    from looplab import Grid, Queue
    from looplab.lab.api import Queue as ApiQueue
    from looplab.orchestrator import Queue as RoomQueue
    from looplab.orchestrator.grid import Grid as RoomGrid

    assert Queue is ApiQueue is RoomQueue and Grid is RoomGrid


def _bare_room_imports(sources: dict[str, str]) -> list[str]:
    """Absolute imports of a room by its old top-level name (`from model.x import y`, `import lab`):
    installed, nothing of looplab's has such a name, so these would import a user's module instead."""
    rooms = set(PACKAGES) - {"looplab"}
    return [
        f"{name} imports {top}"
        for name, text in sorted(sources.items())
        for top in sorted(_top_level_imports(ast.parse(text), strip=False) & rooms)
    ]


def test_nothing_imports_a_room_by_its_old_name():
    assert _bare_room_imports({"a.py": "from looplab.model import config\n"}) == []
    assert _bare_room_imports({"b.py": "def f():\n    from model.config import ModelConfig\n"}) == [
        "b.py imports model"
    ]
    folders = [*PACKAGES, "tests", "benchmarks"]
    sources = {str(p.relative_to(ROOT)): p.read_text() for f in folders for p in (ROOT / f).rglob("*.py")}
    assert len(sources) > 300
    assert _bare_room_imports(sources) == []


def _installed_names(pyproject: dict, folders: set[str]) -> list[str]:
    """What pyproject's setuptools table would install wrongly: a package whose top-level name is not
    `looplab`, and a package folder (one with __init__.py) that is not listed (a wheel would lack it)."""
    table = pyproject["tool"]["setuptools"]
    listed = set(table["packages"])
    wrong = [
        f"installs top-level {p.split('.')[0]!r}" for p in sorted(listed) if p.split(".")[0] != "looplab"
    ]
    wrong += [f"maps {k!r}" for k in sorted(table["package-dir"]) if k.split(".")[0] != "looplab"]
    return wrong + [f"misses {f}" for f in sorted(folders - listed)]


def test_nothing_installs_a_top_level_name_but_looplab():
    import tomllib

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    rooms = pyproject["tool"]["setuptools"]["package-dir"]
    folders = set()
    for package, folder in rooms.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder).parts
            folders.add(".".join([package, *rel]))
    assert "looplab.model" in folders and "looplab.lab.planner" in folders
    assert _installed_names(pyproject, folders) == []
    # the check can fail: a bare name, a bare mapping, a folder left out
    bad = {"tool": {"setuptools": {"packages": ["looplab", "model"], "package-dir": {"model": "model"}}}}
    assert _installed_names(bad, {"looplab", "looplab.lab"}) == [
        "installs top-level 'model'",
        "maps 'model'",
        "misses looplab.lab",
    ]
    # every room the package-dir maps is a room of the design (and of the import graph above)
    assert {k.partition(".")[2] for k in rooms} - {""} == set(PACKAGES) - {"looplab"} | {"examples"}


def _top_level_imports(tree: ast.Module, strip: bool = True) -> set[str]:
    """The top-level package of every absolute import in a module's source, lazy ones included; with
    `strip`, an import of `looplab.<room>` counts as one of `<room>` (`from looplab import model` too)."""
    dotted = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            dotted += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            dotted += [
                f"{node.module}.{a.name}" if node.module == "looplab" else node.module for a in node.names
            ]
    if strip:
        dotted = [d[len(PREFIX) :] if d.startswith(PREFIX) else d for d in dotted]
    return {d.split(".")[0] for d in dotted}


def _family_imports_against_the_rule(sources: dict[str, str]) -> list[str]:
    return [
        f"{name} imports {top}"
        for name, text in sorted(sources.items())
        for top in sorted(_top_level_imports(ast.parse(text)) - FAMILY_IMPORTS)
    ]


def test_families_import_only_model_torch_and_the_standard_library():
    # the checker fails on a family that reaches past the contract, lazily or not
    bad = {
        "families.x": "import torch\nfrom looplab.model.init import RowKey\ndef f():\n    import transformers\n"
    }
    assert _family_imports_against_the_rule(bad) == ["families.x imports transformers"]
    assert _family_imports_against_the_rule(
        {"families.y": "from looplab.workers import hub\nimport math\n"}
    ) == ["families.y imports workers"]
    sources = {str(p): p.read_text() for p in (ROOT / "families").rglob("*.py")}
    assert len(sources) >= 4  # the package and the Huginn-style family's modules are read
    assert _family_imports_against_the_rule(sources) == []


def _jobs_naming_a_family(graph: dict[str, set[str]]) -> list[str]:
    """Edges from a job module (workers/) into one family's package: a job reaches a family only through
    the contract, and a published layout through workers/layouts.py, which asks every family."""
    return [
        f"{mod} -> {t}"
        for mod, targets in sorted(graph.items())
        if mod.split(".")[0] == "workers"
        for t in sorted(targets)
        if t.startswith("families.")
    ]


def test_no_job_module_imports_a_family_by_name():
    assert _jobs_naming_a_family({"workers.hub": {"families.huginn.layout", "model.contract"}}) == [
        "workers.hub -> families.huginn.layout"
    ]
    assert _jobs_naming_a_family({"workers.layouts": {"families"}, "lab.studies": {"families.huginn"}}) == []
    graph = import_graph()
    assert "families" in graph["workers.layouts"]  # the importer asks the families' package, by no name
    # looplab's own family is no exception (issue 49): a job builds it through the contract and reads its
    # Parcae layout through workers/layouts.py, as it does every other family's
    assert _jobs_naming_a_family({"workers.hub": {"families.looped.parcae_layout"}}) == [
        "workers.hub -> families.looped.parcae_layout"
    ]
    assert sum(1 for mod in graph if mod.split(".")[0] == "workers") >= 30  # the jobs were read
    assert _jobs_naming_a_family(graph) == []


# workers/ by job (docs/ARCHITECTURE.md): a job's own code lives in its package; what several jobs use
# is shared, at workers/ itself or in workers/data/ (the data pipeline every job reads through, with the
# prepare job that runs it ahead). A job package imports shared code, not another job's modules; a
# shared module imports no job package, save the kinds registry (workers/jobs.py names every job).
JOB_PACKAGES = ("workers.train", "workers.adaptive", "workers.evaluate")
# The reaches that stay, each with why: a new one is a finding (move the piece to shared code, or
# declare it here with its reason); one that is gone must leave this list.
JOB_REACHES = {
    # calibration (a shared module: the planner and `looplab calibrate` use it) runs a training step to
    # time it, with the optimizers the trainer builds, so the seconds it measures are a real step's
    ("workers.calibrate", "workers.train.optim"),
}


def _job_package(mod: str) -> str | None:
    return next((p for p in JOB_PACKAGES if mod == p or mod.startswith(p + ".")), None)


def _job_reaches(graph: dict[str, set[str]]) -> tuple[list[str], int]:
    """Edges into a job package from outside it within workers/ (the registry's excepted), and how many
    workers/ edges were looked at."""
    seen = 0
    out = []
    for mod, targets in sorted(graph.items()):
        if mod.split(".")[0] != "workers" or mod == "workers.jobs":
            continue
        for t in sorted(targets):
            seen += 1
            home = _job_package(t)
            if home is not None and home != _job_package(mod) and (mod, t) not in JOB_REACHES:
                out.append(f"{mod} -> {t}")
    return out, seen


def test_jobs_import_shared_helpers_not_each_other():
    bad, _ = _job_reaches(
        {
            "workers.evaluate.heldout": {"workers.train.trainer", "workers.data.shards", "workers.reporter"},
            "workers.hub": {"workers.adaptive.job"},
            "workers.train.trainer": {"workers.train.optim", "workers.validation"},
            "workers.jobs": {"workers.train.job"},
        }
    )
    assert bad == ["workers.evaluate.heldout -> workers.train.trainer", "workers.hub -> workers.adaptive.job"]
    graph = import_graph()
    bad, seen = _job_reaches(graph)
    assert seen > 100  # the workers' own edges were read
    assert bad == []
    stale = sorted(f"{a} -> {b}" for a, b in JOB_REACHES if b not in graph.get(a, set()))
    assert stale == []
