"""Task files and the built-in generators: the schema refuses bad items by file, line and field; the
generators are reproducible to the byte, balanced, and their answers are right."""

from __future__ import annotations

import collections
import json
import re

import pytest

from looplab.model.errors import ConfigError
from looplab.workers.tasks import GENERATORS, deduction, kinship
from looplab.workers.tasks.schema import Item, dumps_jsonl, load_jsonl, write_jsonl

GOOD = {"context": "The sky is", "choices": ["blue", "green"], "gold": 0}


def _file(tmp_path, lines: list, name: str = "t.jsonl"):
    path = tmp_path / name
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


def test_a_good_file_loads_and_round_trips(tmp_path):
    path = _file(tmp_path, [GOOD, "", {**GOOD, "gold": 1, "subset": "easy"}])
    items = load_jsonl(path)
    assert items == [
        Item("The sky is", ("blue", "green"), 0),
        Item("The sky is", ("blue", "green"), 1, "easy"),
    ]
    again = write_jsonl(tmp_path / "copy.jsonl", items)
    assert load_jsonl(again) == items and again.read_bytes() == dumps_jsonl(items)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({**GOOD, "choices": ["blue"]}, r":2: choices: expected a list of at least 2"),
        ({**GOOD, "gold": None}, r":2: gold: empty"),
        ({**GOOD, "gold": ""}, r":2: gold: empty"),
        ({**GOOD, "gold": 2}, r":2: gold: 2 is out of range for 2 choices \(0..1\)"),
        ({**GOOD, "gold": -1}, r":2: gold: must be >= 0"),
        ({**GOOD, "gold": True}, r":2: gold: expected an integer"),
        ({k: v for k, v in GOOD.items() if k != "gold"}, r":2: gold: missing"),
        ({**GOOD, "context": 3}, r":2: context: expected a string"),
        ({**GOOD, "choices": ["a", ""]}, r":2: choices\[1\]: expected a non-empty string"),
        ({**GOOD, "choices": ["a", "a"]}, r":2: choices: the same answer twice"),
        ({**GOOD, "subset": "all"}, r":2: subset: expected a non-empty string other than 'all'"),
        ({**GOOD, "answer": 1}, r":2: unknown key 'answer'; accepted: choices, context, gold, subset"),
        ("{not json", r":2: not valid JSON"),
        ("[1, 2]", r":2: expected a mapping"),
    ],
)
def test_a_bad_item_is_refused_naming_file_line_and_field(tmp_path, bad, message):
    path = _file(tmp_path, [GOOD, bad])
    with pytest.raises(ConfigError, match=re.escape(str(path)) + message):
        load_jsonl(path)


def test_an_empty_or_missing_file_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="no items"):
        load_jsonl(_file(tmp_path, [""]))
    with pytest.raises(ConfigError, match="is not a file"):
        load_jsonl(tmp_path / "missing.jsonl")


@pytest.mark.parametrize("name", list(GENERATORS))
def test_generators_are_reproducible_to_the_byte(name):
    first = dumps_jsonl(GENERATORS[name].generate(6, seed=3))
    assert dumps_jsonl(GENERATORS[name].generate(6, seed=3)) == first
    assert dumps_jsonl(GENERATORS[name].generate(6, seed=4)) != first


def test_deduction_is_balanced_per_depth_and_its_answers_follow_from_the_theory():
    items = deduction.generate(9, seed=0)
    assert [i.subset for i in items] == [f"depth={d}" for d in deduction.DEPTHS for _ in range(9)]
    counts = collections.Counter((i.subset, i.choices[i.gold]) for i in items)
    assert set(counts.values()) == {3}  # each depth: 3 true, 3 false, 3 unknown
    for item in items:
        assert item.choices == deduction.ANSWERS
        assert item.context.endswith("\nAnswer:")
        facts, rules, (entity, attr) = _parse_theory(item.context)
        known = deduction.entails(facts, rules)
        assert known is not None  # no contradiction
        got = known.get((entity, attr))
        depth = int(item.subset.split("=")[1])
        answer = item.choices[item.gold]
        if answer == "unknown":
            assert got is None
        else:  # entailed at exactly the subset's proof depth
            assert got == (answer == "true", depth)


def _parse_theory(context: str):
    """Facts, rules and the queried (entity, attribute) read back from an item's English text."""
    theory, question = context.split("\nQuestion: True, false, or unknown? ")
    facts, rules = [], []
    for sentence in re.findall(r"[^.]+\.", theory):
        s = sentence.strip().rstrip(".")
        if m := re.fullmatch(r"All (\w+) things are (\w+)", s):
            rules.append((m[1], m[2], True))
        elif m := re.fullmatch(r"If something is (\w+) then it is (not )?(\w+)", s):
            rules.append((m[1], m[3], m[2] is None))
        elif m := re.fullmatch(r"(.+) is (not )?(\w+)", s):
            facts.append(
                (m[1][0].lower() + m[1][1:] if m[1].startswith("The ") else m[1], m[3], m[2] is None)
            )
    entity, attr = re.fullmatch(r"(.+) is (\w+)\.\nAnswer:", question).groups()
    return facts, rules, (entity[0].lower() + entity[1:] if entity.startswith("The ") else entity, attr)


def test_entails_finds_the_shortest_proof_and_refuses_contradictions():
    rules = [("red", "big", True), ("big", "kind", True), ("red", "kind", True), ("kind", "cold", False)]
    known = deduction.entails([("Anne", "red", True)], rules)
    assert known[("Anne", "kind")] == (True, 1)  # directly from red, not through big
    assert known[("Anne", "cold")] == (False, 2)
    assert (
        deduction.entails([("Anne", "red", True), ("Anne", "cold", True)], rules + [("cold", "x", True)])
        is None
    )


def test_kinship_is_balanced_and_each_story_determines_its_answer():
    items = kinship.generate(8, seed=0)
    assert [i.subset for i in items] == [f"length={n}" for n in kinship.LENGTHS for _ in range(8)]
    for length in kinship.LENGTHS:
        mine = [i for i in items if i.subset == f"length={length}"]
        assert collections.Counter(i.gold for i in mine) == {0: 2, 1: 2, 2: 2, 3: 2}  # positions balanced
        answers = collections.Counter(i.choices[i.gold] for i in mine)
        assert max(answers.values()) <= 1 + len(mine) // len(kinship.reachable(length))  # no answer dominates
    for item in items:
        length = int(item.subset.split("=")[1])
        steps, (asked, about) = _parse_story(item.context)
        assert len(steps) == length and len(item.choices) == 4 and len(set(item.choices)) == 4
        assert _compose(steps, about, asked) == item.choices[item.gold]


def _parse_story(context: str):
    story, question = context.split("\nQuestion: ")
    steps = []
    for sentence in re.findall(r"[^.]+\.", story):
        s = sentence.strip().rstrip(".")
        m = re.fullmatch(r"(\w+) is (\w+)'s (\w+)", s) or re.fullmatch(r"(\w+)'s (\w+) is (\w+)", s)
        if s.split()[1] == "is":
            now, before, word = m.groups()
        else:
            before, word, now = m.groups()
        steps.append((before, word, now))
    asked, about = re.match(r"How is (\w+) related to (\w+)\?", question).groups()
    return steps, (asked, about)


def _compose(steps, start: str, end: str) -> str:
    """The relation of `end` to `start` rebuilt from the story alone: a family graph with every stated
    link, the conventions (a child's parents are married, siblings share both) applied until
    nothing changes, then generations up and down to the nearest common ancestor."""
    parents, spouse, gender = collections.defaultdict(set), {}, {}
    female = {"mother", "daughter", "sister", "wife", "aunt", "niece", "grandmother", "granddaughter"}
    for before, word, now in steps:
        gender[now] = "f" if word in female else "m"
        if word in ("father", "mother"):
            parents[before].add(now)
        elif word in ("son", "daughter"):
            parents[now].add(before)
        elif word in ("husband", "wife"):
            spouse[before], spouse[now] = now, before
        else:  # siblings: a shared parent the story may not name
            parents[before].add(f"parent of {before} and {now}")
            parents[now].add(f"parent of {before} and {now}")
    for _ in range(
        len(steps) * 3
    ):  # close under: a parent's spouse is a parent; children of a parent share all
        for ps in parents.values():
            ps |= {spouse[p] for p in list(ps) if p in spouse}
        for p in {p for ps in parents.values() for p in ps}:
            children = [c for c, ps in parents.items() if p in ps]
            shared = set().union(*(parents[c] for c in children))
            for c in children:
                parents[c] |= shared
    if spouse.get(start) == end:
        return "husband" if gender[end] == "m" else "wife"

    def ancestors(p):
        out, frontier, up = {p: 0}, [p], 0
        while frontier:
            up += 1
            frontier = [q for f in frontier for q in parents[f] if q not in out]
            out.update({q: up for q in frontier})
        return out

    a, b = ancestors(start), ancestors(end)
    _, up, down = min((a[c] + b[c], a[c], b[c]) for c in a.keys() & b.keys())
    return kinship.BLOOD[(up, down)][gender[end]]
