"""The house kept under its limits (docs/ARCHITECTURE.md): no product file over 700 lines and no
function over 80, so a newcomer reads any one in a sitting. Released Alembic revisions are frozen (they
may not be edited, tests/db/test_revisions_frozen.py), so they are outside the rule."""

from __future__ import annotations

import ast
from pathlib import Path

from looplab.names import ROOMS as NAMES_ROOMS

ROOT = Path(__file__).resolve().parents[1]
ROOMS = ("looplab", *NAMES_ROOMS)
FROZEN = ROOT / "migrations" / "versions"
MAX_FILE_LINES, MAX_FUNCTION_LINES = 700, 80


def over_the_limits(sources: dict[str, str]) -> list[str]:
    wrong = []
    for name, text in sorted(sources.items()):
        n = len(text.splitlines())
        if n > MAX_FILE_LINES:
            wrong.append(f"{name}: {n} lines (at most {MAX_FILE_LINES})")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    wrong.append(
                        f"{name}:{node.lineno} {node.name}: {length} lines (at most {MAX_FUNCTION_LINES})"
                    )
    return wrong


def test_the_rule_can_fail():
    long_function = "def f():\n" + "    x = 1\n" * 80
    assert over_the_limits({"a.py": long_function}) == ["a.py:1 f: 81 lines (at most 80)"]
    assert over_the_limits({"b.py": "x = 1\n" * 701}) == ["b.py: 701 lines (at most 700)"]
    assert over_the_limits({"c.py": "def g():\n" + "    x = 1\n" * 79}) == []


def test_no_product_file_or_function_is_over_the_limits():
    files = [p for room in ROOMS for p in (ROOT / room).rglob("*.py") if FROZEN not in p.parents]
    assert len(files) > 150
    assert over_the_limits({str(p.relative_to(ROOT)): p.read_text() for p in files}) == []
