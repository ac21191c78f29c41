"""The GPU path runs on torch 2.11 (a GPU box's) as well as the pinned 2.13, checked statically: 2.11
cannot be installed here. docs/gpu.md lists, under "Avoided", the torch APIs and keyword arguments
newer than 2.11 (or not shown to be in it); this scans the GPU path's source (ast: nothing imported)
and finds none of them called. Under "Used" it lists what the GPU path does call, with the release
that brought each: the same names as benchmarks/gpu_steps.py's USED_TORCH_APIS, which the check's
device step probes on the box, and each present in the torch installed here.

An entry of the Avoided table is either a dotted name (`torch.optim.functional`: any use of it, or of
a name under it) or a call with a keyword (`torch.compile(name=)`); aliases (`import torch.nn.functional
as F`, `from torch.nn.parallel import DistributedDataParallel as DDP`) are followed.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "gpu.md"
# the GPU path: the model, the jobs, the GPU check's steps and benchmark, the GPU tests
SCANNED = [
    *sorted((ROOT / "model").rglob("*.py")),
    *sorted((ROOT / "workers").rglob("*.py")),
    ROOT / "benchmarks" / "gpu_steps.py",
    ROOT / "benchmarks" / "model_bench.py",
    *sorted((ROOT / "tests" / "gpu").glob("*.py")),
]


def _table(heading: str) -> dict[str, str]:
    """{the code span opening a row: the row's second cell} of the table under `### heading` in
    docs/gpu.md."""
    text = DOC.read_text()
    section = text.split(f"### {heading}\n", 1)[1].split("\n#", 1)[0]
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in section.splitlines()]
    return {m[1]: row[1] for row in rows if len(row) > 1 and (m := re.fullmatch(r"`([^`]+)`", row[0]))}


def avoided() -> tuple[set[str], set[tuple[str, str]]]:
    """(dotted names, (callee, keyword) pairs) of the Avoided table."""
    names, calls = set(), set()
    for entry in _table("Avoided"):
        if m := re.fullmatch(r"([\w.]+)\((\w+)=\)", entry):
            calls.add((m[1], m[2]))
        else:
            assert re.fullmatch(r"[\w.]+", entry), f"docs/gpu.md Avoided: cannot read {entry!r}"
            names.add(entry)
    return names, calls


def _aliases(tree: ast.AST) -> dict[str, str]:
    """Local name -> the dotted name it stands for, from the module's imports (anywhere in it)."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                out[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                out[a.asname or a.name] = f"{node.module}.{a.name}"
    return out


def _dotted(node: ast.AST, aliases: dict[str, str]) -> str | None:
    if isinstance(node, ast.Name):
        return aliases.get(node.id, node.id)
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value, aliases)
        return None if base is None else f"{base}.{node.attr}"
    return None


def scan(source: str, names: set[str], calls: set[tuple[str, str]]) -> list[str]:
    """Uses of avoided names and calls in `source`, as 'line: what'."""
    tree = ast.parse(source)
    aliases = _aliases(tree)
    found = []

    def hit(dotted: str | None) -> bool:
        return dotted is not None and any(dotted == n or dotted.startswith(n + ".") for n in names)

    inner = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}  # report a.b.c once
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [f"{node.lineno}: import {a.name}" for a in node.names if hit(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            found += [f"{node.lineno}: import {d}" for d in imported if hit(d)]
        elif (
            isinstance(node, ast.Attribute | ast.Name)
            and id(node) not in inner
            and hit(_dotted(node, aliases))
        ):
            found.append(f"{node.lineno}: {_dotted(node, aliases)}")
        if isinstance(node, ast.Call):
            callee = _dotted(node.func, aliases)
            found += [f"{node.lineno}: {callee}({k.arg}=)" for k in node.keywords if (callee, k.arg) in calls]
    return sorted(set(found))


def test_the_scanner_can_fail():
    names, calls = avoided()
    assert ("torch.compile", "name") in calls and "torch.optim.functional" in names
    bad = """
import torch
import torch.optim.functional as OF
from torch.nn.parallel import DistributedDataParallel as DDP
torch.compile(f, name="x", mode="max-autotune")
DDP(model, forward_sync_buffers=False)
OF.muon
"""
    assert scan(bad, names, calls) == [
        "3: import torch.optim.functional",
        "5: torch.compile(name=)",
        "6: torch.nn.parallel.DistributedDataParallel(forward_sync_buffers=)",
        "7: torch.optim.functional.muon",
    ]
    fine = "import torch\ntorch.compile(f, mode='max-autotune', dynamic=False)\ntorch.optim.AdamW(p)\n"
    assert scan(fine, names, calls) == []


def test_the_gpu_path_calls_nothing_the_docs_say_it_avoids():
    names, calls = avoided()
    assert len(names) + len(calls) >= 8  # the table was read
    found = {}
    for path in SCANNED:
        if hits := scan(path.read_text(), names, calls):
            found[str(path.relative_to(ROOT))] = hits
    assert found == {}, f"torch APIs newer than 2.11 (docs/gpu.md, Avoided): {found}"


def test_the_used_apis_are_the_device_steps_and_exist_here():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import gpu_steps
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    used = _table("Used by the GPU path")  # {name: the release that brought it}
    assert used == gpu_steps.USED_TORCH_APIS
    assert [name for name in used if gpu_steps._resolve(name) is None] == []
