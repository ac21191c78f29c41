"""Multi-hop deduction of controlled proof depth (ProofWriter-like): facts, rules, true / false / unknown.

An item is a small theory in plain English, facts ("Anne is red.", "The cat is not big.") and rules
("If something is red then it is kind.", "All kind things are cold.", "If something is cold then it
is not young."), followed by a statement about one entity to judge under the open-world assumption:

- true: the statement follows from the facts through exactly `depth` rules;
- false: its negation follows through exactly `depth` rules (the last rule concludes "is not");
- unknown: it follows from neither. Built as a proof of the same depth that does not reach the
  entity: one link of the chain is broken (a rule whose premise the entity lacks), or the chain
  starts from another entity's fact; so the same number of rules must be followed to see it.

Depth 0 states the fact itself (or its negation, or a fact about someone else). Distractor facts and
rules over other attributes (some negated) surround the chain, so neither "not" nor a name in the
question gives the answer away. Every theory is checked by forward chaining (`entails`): the answer and
the proof depth must come out as intended and the theory must be free of contradictions, else it is
redrawn. Answers cycle true, false, unknown within each depth (chance 1/3). Subsets `depth=0` ..
`depth=5`.
"""

from __future__ import annotations

import random

from looplab.workers.tasks.schema import Item

DEPTHS = tuple(range(0, 6))
ANSWERS = ("true", "false", "unknown")
ENTITIES = (
    "Anne",
    "Bob",
    "Charlie",
    "Dave",
    "Erin",
    "Fiona",
    "Gary",
    "Harry",
    "the bear",
    "the cat",
    "the dog",
    "the mouse",
    "the rabbit",
    "the squirrel",
    "the tiger",
    "the lion",
)
ATTRIBUTES = (
    "big",
    "blue",
    "cold",
    "furry",
    "green",
    "kind",
    "nice",
    "quiet",
    "red",
    "rough",
    "round",
    "smart",
    "white",
    "young",
    "heavy",
    "shiny",
    "tall",
    "wet",
    "loud",
    "small",
)
MAX_TRIES = 1000

Fact = tuple[str, str, bool]  # (entity, attribute, holds)
Rule = tuple[str, str, bool]  # (premise attribute, conclusion attribute, conclusion holds)


def entails(facts: list[Fact], rules: list[Rule]) -> dict[tuple[str, str], tuple[bool, int]] | None:
    """Forward chaining: {(entity, attribute): (holds, proof depth)} for every literal the theory
    entails, each at its smallest depth (facts 0, one rule application 1, ...); None on a
    contradiction (a literal and its negation both entailed)."""
    known: dict[tuple[str, str], tuple[bool, int]] = {}
    for entity, attr, holds in facts:
        if known.get((entity, attr), (holds,))[0] != holds:
            return None
        known[(entity, attr)] = (holds, 0)
    depth = 0
    while True:
        depth += 1
        new: dict[tuple[str, str], bool] = {}
        for (entity, attr), (holds, d) in known.items():
            if holds and d == depth - 1:
                for premise, conclusion, result in rules:
                    if premise != attr:
                        continue
                    if (entity, conclusion) in known:
                        if known[(entity, conclusion)][0] != result:
                            return None  # derives the negation of a known literal
                    elif new.setdefault((entity, conclusion), result) != result:
                        return None
        if not new:
            return known
        for (entity, attr), holds in new.items():
            known[(entity, attr)] = (holds, depth)


def _theory(depth: int, answer: str, rng: random.Random) -> tuple[list[Fact], list[Rule], Fact]:
    """(facts, rules, queried literal) of one item, distractors included (not yet checked)."""
    entity, other, third = rng.sample(ENTITIES, 3)
    attrs = rng.sample(ATTRIBUTES, len(ATTRIBUTES))
    chain, spare, rest = attrs[: depth + 1], attrs[depth + 1], attrs[depth + 2 :]
    facts: list[Fact] = [(entity, chain[0], True)]
    rules: list[Rule] = [(chain[i], chain[i + 1], True) for i in range(depth)]
    if answer == "false":
        if depth == 0:
            facts = [(entity, chain[0], False)]
        else:
            rules[-1] = (chain[-2], chain[-1], False)
    elif answer == "unknown":
        if depth > 0 and rng.random() < 0.5:  # one broken link: its premise is an attribute nobody has
            i = rng.randrange(depth)
            rules[i] = (spare, chain[i + 1], True)
        else:  # the chain holds for someone else
            facts = [(other, chain[0], True)]
    # distractors: facts and rules over attributes outside the chain, some of them negated, and a
    # decoy rule that concludes the queried attribute (or its negation) from an attribute nobody has
    decoy, rest = rest[0], rest[1:]
    for _ in range(rng.randint(2, 3)):
        facts.append((rng.choice((entity, other, third)), rng.choice(rest), rng.random() < 0.7))
    for _ in range(rng.randint(1, 3)):
        premise, conclusion = rng.sample(rest, 2)
        rules.append((premise, conclusion, rng.random() < 0.6))
    if rng.random() < 0.5:
        rules.append((decoy, chain[-1], rng.random() < 0.5))
    return facts, rules, (entity, chain[-1], True)


def _sentence(entity: str, attr: str, holds: bool) -> str:
    subject = entity[0].upper() + entity[1:]
    return f"{subject} is {attr}." if holds else f"{subject} is not {attr}."


def _rule_text(premise: str, conclusion: str, holds: bool, rng: random.Random) -> str:
    if holds and rng.random() < 0.5:
        return f"All {premise} things are {conclusion}."
    return f"If something is {premise} then it is {'' if holds else 'not '}{conclusion}."


def _item(depth: int, answer: str, rng: random.Random) -> Item:
    for _ in range(MAX_TRIES):
        facts, rules, (entity, attr, _) = _theory(depth, answer, rng)
        known = entails(facts, rules)
        if known is None:
            continue
        got = known.get((entity, attr))
        if answer == "unknown" and got is None:
            break
        if got is not None and got == (answer == "true", depth):
            break
    else:  # pragma: no cover - distractors never touch the chain's attributes
        raise RuntimeError(f"deduction: no consistent theory of depth {depth} answering {answer}")
    rng.shuffle(facts)
    rng.shuffle(rules)
    theory = " ".join([_sentence(*f) for f in facts] + [_rule_text(*r, rng) for r in rules])
    question = _sentence(entity, attr, True)
    context = f"{theory}\nQuestion: True, false, or unknown? {question}\nAnswer:"
    return Item(context, ANSWERS, ANSWERS.index(answer), f"depth={depth}")


def generate(n_per_subset: int, seed: int) -> list[Item]:
    """`n_per_subset` items for every proof depth 0..5, from `seed` alone."""
    items = []
    for depth in DEPTHS:
        rng = random.Random(f"deduction:{seed}:{depth}")
        items += [_item(depth, ANSWERS[i % len(ANSWERS)], rng) for i in range(n_per_subset)]
    return items
