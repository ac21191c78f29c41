"""Job states are named only through `orchestrator.states` (issue 49): a state spelled as a literal in
SQL text (`status IN ('succeeded', 'failed')`) or as a dict key would drift from the enum the queue
writes. The checker reads the product's source (frozen migrations apart: they copy what they need), and
is shown able to fail."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from looplab.names import ROOMS
from looplab.orchestrator.states import JobStatus

ROOT = Path(__file__).resolve().parents[1]
FROZEN = ROOT / "migrations" / "versions"
STATES = "|".join(s.value for s in JobStatus)
# a state compared with a status column inside SQL text
# a dict keyed by a state's name; "failed" alone is ordinary English (an alert's failed tries)
UNAMBIGUOUS = {s.value for s in JobStatus} - {"failed"}
IN_SQL = re.compile(rf"status\s*(?:=|<>|!=|\bIN\b|\bin\b)\s*\(?\s*'(?:{STATES})'")


def literal_states(sources: dict[str, str]) -> list[str]:
    """`file:line` of every SQL string comparing a status with a state literal, and of every dict
    literal keyed by a state's string."""
    found = []
    for name, text in sorted(sources.items()):
        tree = ast.parse(text)
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                if IN_SQL.search(node.value):
                    found.append(f"{name}:{node.lineno} SQL")
            if isinstance(node, ast.Dict):
                keys = {
                    k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)
                }
                if keys & UNAMBIGUOUS:
                    found.append(f"{name}:{node.lineno} dict")
    return found


def test_the_checker_can_fail():
    bad = (
        'q = "SELECT 1 FROM jobs WHERE status IN (\'succeeded\', \'failed\')"\nlabels = {"succeeded": "x"}\n'
    )
    assert literal_states({"a.py": bad}) == ["a.py:1 SQL", "a.py:2 dict"]
    docstring = '"""claim: a conditional UPDATE ... WHERE status=\'queued\'"""\ncounts = {"failed": 0}\n'
    assert literal_states({"c.py": docstring}) == []
    good = 'q = "SELECT 1 FROM jobs WHERE status = :s"\nlabels = {JobStatus.FAILED: "x"}\n'
    assert literal_states({"b.py": good}) == []


def test_no_state_is_spelled_outside_the_enum():
    files = [
        p
        for room in ("looplab", *ROOMS)
        for p in (ROOT / room).rglob("*.py")
        if FROZEN not in p.parents and p.name != "states.py"
    ]
    assert len(files) > 150
    assert literal_states({str(p.relative_to(ROOT)): p.read_text() for p in files}) == []
