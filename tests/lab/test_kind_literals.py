"""What a job kind is, how it is priced and whether it may span several workers is said once, in its
declaration (`Kind` in workers/jobs.py, read through orchestrator.jobkinds): the planner, the planner's
report, the study report, the exports, the queue, the variants and the task runner ask the declaration and never decide by a kind's name.

The rule as a test that can fail: the source of those modules (read as text, with ast: nothing is
imported) holds no comparison with a kind's name (`==`, `!=`, `in`, `not in`; a literal such as
"train", or a constant that spells one, such as `jobkinds.TRAIN`) and no dispatch on one (a dict keyed
by kind names, a `match` case, a lookup by a kind's name). Grids keyed by kind, as users write them,
live in grid files and tests, not here. The checker is shown to report each form on a snippet.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from looplab.workers import jobs

ROOT = Path(__file__).resolve().parents[2]
CHECKED = sorted(
    [
        *ROOT.glob("lab/planner/*.py"),
        *ROOT.glob("lab/report/*.py"),
        *ROOT.glob("lab/export/*.py"),
        *(
            ROOT / "orchestrator" / name
            for name in ("task.py", "jobqueue.py", "variants.py", "grid.py", "submission.py")
        ),
    ]
)
KIND_NAMES = frozenset(jobs.KINDS)


def _spelling_constants() -> frozenset[str]:
    """Module-level names in the declaring modules bound to a kind's name or to a tuple of them (TRAIN,
    MODEL_SOURCES): comparing with one of them is comparing with the literal."""
    names = set()
    for path in (ROOT / "workers" / "jobs.py", ROOT / "orchestrator" / "jobkinds.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign) and _kind_names(node.value):
                names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return frozenset(names)


def _kind_names(node: ast.AST) -> list[str]:
    """The kind names a node spells: a string literal, or a tuple, list or set of them."""
    if isinstance(node, ast.Constant) and node.value in KIND_NAMES:
        return [node.value]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in KIND_NAMES]
    return []


def kind_decisions(source: str, constants: frozenset[str] = frozenset()) -> list[str]:
    """'line: what' for each comparison with, or dispatch on, a kind's name in `source`: a literal, or a
    name or attribute in `constants` (the declaring modules' spellings)."""

    def spelled(node: ast.AST) -> list[str]:
        if isinstance(node, ast.Name) and node.id in constants:
            return [node.id]
        if isinstance(node, ast.Attribute) and node.attr in constants:
            return [node.attr]
        return _kind_names(node)

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            found += [
                f"{node.lineno}: compares with {n!r}"
                for op in (node.left, *node.comparators)
                for n in spelled(op)
            ]
        elif isinstance(node, ast.Dict):
            found += [
                f"{node.lineno}: dict keyed by {n!r}" for k in node.keys if k is not None for n in spelled(k)
            ]
        elif isinstance(node, ast.Subscript):
            found += [f"{node.lineno}: looks up {n!r}" for n in spelled(node.slice)]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            found += [f"{node.lineno}: looks up {n!r}" for n in spelled(node.args[0])] if node.args else []
        elif isinstance(node, ast.MatchValue):
            found += [f"{node.lineno}: matches {n!r}" for n in spelled(node.value)]
    return found


@pytest.mark.parametrize("path", CHECKED, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_planner_reports_and_task_runner_never_decide_by_a_kind_name(path):
    assert kind_decisions(path.read_text(), _spelling_constants()) == []


def test_the_checker_reports_each_form_of_deciding_by_a_kind_name():
    constants = _spelling_constants()
    assert {"TRAIN", "MODEL_SOURCES"} <= constants and {"train", "decode_bench", "eval"} <= KIND_NAMES
    snippet = """
if j.kind == "train":
    pass
ok = kind != "decode_bench"
if kind in ("depth_sweep", "eval"):
    pass
follows = {"depth_sweep": sweep_cost, "eval": eval_cost}
cost = COSTS["decode_bench"]
fn = COSTS.get("eval")
if d.kind == jobkinds.TRAIN or kind not in MODEL_SOURCES:
    pass
match kind:
    case "train":
        pass
"""
    assert kind_decisions(snippet, constants) == [
        "2: compares with 'train'",
        "4: compares with 'decode_bench'",
        "5: compares with 'depth_sweep'",
        "5: compares with 'eval'",
        "7: dict keyed by 'depth_sweep'",
        "7: dict keyed by 'eval'",
        "8: looks up 'decode_bench'",
        "9: looks up 'eval'",
        "10: compares with 'TRAIN'",
        "10: compares with 'MODEL_SOURCES'",
        "13: matches 'train'",
    ]
    # what is not a decision by a kind's name: a column kind, a name passed on, a text
    fine = 'if kind == "time":\n    pass\nestimate("train", spec)\ntext = "attach then=[\'eval\']"\n'
    assert kind_decisions(fine, constants) == []


def test_the_old_planner_dispatch_is_what_the_checker_catches():
    """The planner's dispatch before the kinds carried their cost models, as it read: caught."""
    old = """
def _estimate(self, kind, spec, train_spec):
    if kind == "train":
        return self.train(spec)
    follows = {"depth_sweep": self.sweep_cost, "eval": self.eval_cost}
    if kind in follows and train_spec is not None:
        return follows[kind](spec, train_spec)
"""
    assert kind_decisions(old) == [
        "3: compares with 'train'",
        "5: dict keyed by 'depth_sweep'",
        "5: dict keyed by 'eval'",
    ]
