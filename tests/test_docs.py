"""The README is the front door and docs/ holds a guide per capability: every relative link of these pages
reaches a file (and a heading, for `page.md#anchor`), every page under docs/ is linked from the README,
and the README names the three commands."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def prose(path: Path) -> list[str]:
    """The lines of a Markdown file outside ``` code fences."""
    lines, fenced = [], False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def anchors(path: Path) -> set[str]:
    """GitHub's ids of the headings: lower case, punctuation dropped, spaces to hyphens."""
    return {
        re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        for line in prose(path)
        if line.startswith("#")
    }


def test_anchor_ids_follow_githubs_rule():
    page = ROOT / "docs" / "variants.md"
    assert "variants-nested-sweeps-and-flop-budgets" in anchors(page)
    assert "the-parcae-recipe-is-the-public-parcae-recipe" in anchors(page)  # backticks dropped


def test_every_relative_link_reaches_a_file_and_a_heading():
    broken = []
    for page in PAGES:
        for line in prose(page):
            for target in LINK.findall(line):
                if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                    continue
                file, _, anchor = target.partition("#")
                dest = (page.parent / file).resolve() if file else page
                if not dest.is_file() or (anchor and anchor not in anchors(dest)):
                    broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, broken


def test_the_readme_links_every_guide_and_names_the_three_commands():
    readme = (ROOT / "README.md").read_text()
    linked = {(ROOT / target.partition("#")[0]).resolve() for target in LINK.findall(readme)}
    unlinked = [p.name for p in PAGES[1:] if p.resolve() not in linked]
    assert not unlinked, unlinked
    for command in ("make demo", "make check", "make test"):
        assert command in readme


def test_the_readme_links_stay_inside_the_clone():
    """A clone has no ../shared/ or other sibling: every relative link of the README resolves under it."""
    outside = [
        target
        for line in prose(ROOT / "README.md")
        for target in LINK.findall(line)
        if not re.match(r"[a-z]+:", target)
        and not (ROOT / target.partition("#")[0]).resolve().is_relative_to(ROOT.resolve())
    ]
    assert not outside, outside


def test_the_readmes_example_grids_validate_and_the_tour_needs_no_gpu_or_network():
    from looplab.lab.commands import beside_grid_file, load_grids
    from looplab.orchestrator.grid import expand
    from looplab.workers import jobs

    readme = (ROOT / "README.md").read_text()
    for example in ("examples/tour.py", "examples/gpu_study.py"):
        assert f"looplab plan {example}" in readme
        with beside_grid_file(str(ROOT / example)):
            plans = expand(load_grids(str(ROOT / example)), jobs)
        assert plans
    tour = [p.spec for p in expand(load_grids(str(ROOT / "examples/tour.py")), jobs) if p.kind == "train"]
    assert {s["size"] for s in tour} == {"tiny"} and {s["data"]["corpus"] for s in tour} == {"offline"}
