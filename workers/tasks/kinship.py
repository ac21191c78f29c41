"""Kinship chains (CLUTRR-like): a chain of family relations, name the relation of its two ends.

Each item draws a small family (four generations; every child has both parents in the family, who are
married to each other; grown-up children may marry someone from outside) and a walk of `length` steps
through it along parent, child, sibling and spouse links, visiting nobody twice. The story states the
walk, one sentence per step, in order ("Mary's son is Tom. Tom's sister is Ann."); the question asks
how the last person is related to the first. The answer comes from the family itself, not from
composition rules, and only walks whose ends are close kin are kept: parent, grandparent, child,
grandchild, sibling, uncle / aunt, nephew / niece, cousin, or spouse (an in-law or a distant relative
is redrawn). Under the usual conventions (couples are faithful, siblings share both parents) the story
alone determines the answer.

Choices: the answer and three other relations of the same gender (or "cousin"), the answer's position
cycling through 0..3 so every position is right equally often (chance 1/4). The relation itself cycles
through the ones a walk of that length reaches, so no answer dominates a subset. Subsets: `length=2`
.. `length=10`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from looplab.workers.tasks.schema import Item, balanced_golds

LENGTHS = tuple(range(2, 11))
N_CHOICES = 4
GENERATIONS = 4
MAX_TRIES = 20_000  # walks drawn per item before giving up on its relation (never reached in practice)
NAMES = {
    "m": (
        "Adam",
        "Ben",
        "Carl",
        "Dan",
        "Eric",
        "Frank",
        "George",
        "Henry",
        "Ian",
        "Jack",
        "Kevin",
        "Leo",
        "Mark",
        "Nick",
        "Oscar",
        "Paul",
        "Ray",
        "Sam",
        "Tom",
        "Victor",
        "Walter",
        "Yusuf",
        "Zack",
        "Hugo",
    ),
    "f": (
        "Alice",
        "Beth",
        "Clara",
        "Diana",
        "Emma",
        "Fay",
        "Grace",
        "Helen",
        "Iris",
        "Jane",
        "Kate",
        "Lucy",
        "Mary",
        "Nora",
        "Olga",
        "Pam",
        "Rose",
        "Sara",
        "Tina",
        "Vera",
        "Wendy",
        "Yara",
        "Zoe",
        "Ruth",
    ),
}
# (generations up to the common ancestor from the first person, down from it to the second) -> relation
BLOOD = {
    (1, 0): {"m": "father", "f": "mother"},
    (2, 0): {"m": "grandfather", "f": "grandmother"},
    (0, 1): {"m": "son", "f": "daughter"},
    (0, 2): {"m": "grandson", "f": "granddaughter"},
    (1, 1): {"m": "brother", "f": "sister"},
    (2, 1): {"m": "uncle", "f": "aunt"},
    (1, 2): {"m": "nephew", "f": "niece"},
    (2, 2): {"m": "cousin", "f": "cousin"},
}
SPOUSE = {"m": "husband", "f": "wife"}
RELATIONS = {
    gender: sorted({names[gender] for names in BLOOD.values()} | {SPOUSE[gender]}) for gender in ("m", "f")
}
MAX_CHILDREN = 4
# The family is a tree of households (a couple and their children, all linked to each other), joined at
# the people who belong to two (born in one, married into another). A walk that visits nobody twice
# never leaves a household and comes back, so it crosses the same households as the shortest one:
# parent, child, sibling and spouse are one household away, grandparent, grandchild, uncle / aunt and
# nephew / niece two, cousin three. Within a household a walk takes at most MAX_CHILDREN + 1 steps.
HOUSEHOLDS = {(1, 0): 1, (0, 1): 1, (1, 1): 1, (2, 0): 2, (0, 2): 2, (2, 1): 2, (1, 2): 2, (2, 2): 3}
MIN_STEPS = {
    r: up + down - (1 if up and down else 0) for (up, down), names in BLOOD.items() for r in names.values()
}
MAX_STEPS = {r: HOUSEHOLDS[key] * (MAX_CHILDREN + 1) for key, names in BLOOD.items() for r in names.values()}
MIN_STEPS.update({r: 1 for r in SPOUSE.values()})
MAX_STEPS.update({r: MAX_CHILDREN + 1 for r in SPOUSE.values()})
# the relation words a story uses for one step
STEP = {
    "parent": {"m": "father", "f": "mother"},
    "child": {"m": "son", "f": "daughter"},
    "sibling": {"m": "brother", "f": "sister"},
    "spouse": SPOUSE,
}


@dataclass
class Person:
    gender: str
    parents: tuple[int, ...] = ()
    spouse: int | None = None
    children: list[int] = field(default_factory=list)


def _family(rng: random.Random) -> list[Person]:
    """A random family: a founding couple, 2..MAX_CHILDREN children per couple, most children married (to people
    from outside, who have no parents here) and with children of their own, for GENERATIONS generations."""
    people = [Person("m"), Person("f", spouse=None)]
    people[0].spouse, people[1].spouse = 1, 0
    couples = [(0, 1)]
    for generation in range(1, GENERATIONS):
        next_couples = []
        for a, b in couples:
            for _ in range(rng.randint(2, MAX_CHILDREN)):
                child = len(people)
                people.append(Person(rng.choice("mf"), parents=(a, b)))
                people[a].children.append(child)
                people[b].children.append(child)
                if generation < GENERATIONS - 1 and rng.random() < 0.85:
                    partner = len(people)
                    people.append(Person("f" if people[child].gender == "m" else "m", spouse=child))
                    people[child].spouse = partner
                    next_couples.append((child, partner))
        couples = next_couples
    return people


def _links(people: list[Person], p: int) -> list[tuple[str, int]]:
    """(step kind, person) for every relative one step from p."""
    me = people[p]
    out = [("parent", q) for q in me.parents] + [("child", q) for q in me.children]
    if me.parents:
        out += [("sibling", q) for q in people[me.parents[0]].children if q != p]
    if me.spouse is not None:
        out.append(("spouse", me.spouse))
    return out


def _ancestors(people: list[Person], p: int) -> dict[int, int]:
    """{ancestor (p itself included): generations up}."""
    out, frontier, up = {p: 0}, [p], 0
    while frontier:
        up += 1
        frontier = [q for f in frontier for q in people[f].parents if q not in out]
        out.update({q: up for q in frontier})
    return out


def relation(people: list[Person], a: int, b: int) -> str | None:
    """What b is to a (b is a's ...), or None for an in-law or a relative farther than a cousin."""
    if people[a].spouse == b:
        return SPOUSE[people[b].gender]
    up_a, up_b = _ancestors(people, a), _ancestors(people, b)
    common = [(up_a[c] + up_b[c], up_a[c], up_b[c]) for c in up_a.keys() & up_b.keys()]
    if not common:
        return None
    _, up, down = min(common)
    names = BLOOD.get((up, down))
    return None if names is None else names[people[b].gender]


def _shortest(people: list[Person], a: int, b: int) -> list[tuple[str, int]] | None:
    """The shortest walk from a to b (breadth first): [("start", a), (step kind, person), ...]."""
    back: dict[int, tuple[str, int] | None] = {a: None}
    frontier = [a]
    while frontier and b not in back:
        nxt = []
        for p in frontier:
            for kind, q in _links(people, p):
                if q not in back:
                    back[q] = (kind, p)
                    nxt.append(q)
        frontier = nxt
    if b not in back:
        return None
    path, q = [], b
    while back[q] is not None:
        kind, p = back[q]
        path.append((kind, q))
        q = p
    return [("start", a), *reversed(path)]


def _lengthen(people: list[Person], path: list[tuple[str, int]], rng: random.Random) -> bool:
    """Replace one step p -> q of the walk by two, p -> r -> q, through someone not on it (p's father r
    and his wife q for "p's mother q"; a sibling between two siblings; ...). False when no step can be."""
    on_path = {p for _, p in path}
    options = []
    for i in range(1, len(path)):
        p, q = path[i - 1][1], path[i][1]
        for kind_pr, r in _links(people, p):
            if r in on_path:
                continue
            options += [(i, kind_pr, r, kind_rq) for kind_rq, q2 in _links(people, r) if q2 == q]
    if not options:
        return False
    i, kind_pr, r, kind_rq = rng.choice(options)
    path[i : i + 1] = [(kind_pr, r), (kind_rq, path[i][1])]
    return True


def _draw(length: int, want: str, rng: random.Random):
    """(people, walk of `length` steps, whose last person is the first's `want`). The two ends are
    picked first, joined by a shortest walk, which is then lengthened one step at a time."""
    for _ in range(MAX_TRIES):
        people = _family(rng)
        a = rng.randrange(len(people))
        ends = [b for b in range(len(people)) if b != a and relation(people, a, b) == want]
        if not ends:
            continue
        path = _shortest(people, a, rng.choice(ends))
        if path is None or len(path) - 1 > length:
            continue
        while len(path) - 1 < length and _lengthen(people, path, rng):
            pass
        if len(path) - 1 == length:
            return people, path
    raise RuntimeError(f"kinship: no walk of length {length} ends at a {want!r} (raise MAX_TRIES)")


def reachable(length: int) -> list[str]:
    """The relations a walk of exactly `length` steps can end at, sorted."""
    return sorted(r for r in MIN_STEPS if MIN_STEPS[r] <= length <= MAX_STEPS[r])


def _story(people: list[Person], path: list[tuple[str, int]], rng: random.Random) -> tuple[str, list[str]]:
    """The sentences of a walk and the names used (first = the start, last = the end)."""
    pool = {g: rng.sample(NAMES[g], len(NAMES[g])) for g in ("m", "f")}
    names = [pool[people[p].gender].pop() for _, p in path]
    sentences = []
    for i, (kind, p) in enumerate(path[1:], start=1):
        word = STEP[kind][people[p].gender]
        before, now = names[i - 1], names[i]
        sentences.append(
            f"{now} is {before}'s {word}." if rng.random() < 0.5 else f"{before}'s {word} is {now}."
        )
    return " ".join(sentences), names


def _item(length: int, want: str, gold: int, rng: random.Random) -> Item:
    people, path = _draw(length, want, rng)
    rel = want
    story, names = _story(people, path, rng)
    gender = people[path[-1][1]].gender
    others = rng.sample([r for r in RELATIONS[gender] if r != rel], N_CHOICES - 1)
    choices = [*others[:gold], rel, *others[gold:]]
    context = (
        f"{story}\nQuestion: How is {names[-1]} related to {names[0]}?\nAnswer: {names[-1]} is {names[0]}'s"
    )
    return Item(context, tuple(choices), gold, f"length={length}")


def generate(n_per_subset: int, seed: int) -> list[Item]:
    """`n_per_subset` items for every chain length 2..10, from `seed` alone."""
    items = []
    for length in LENGTHS:
        rng = random.Random(f"kinship:{seed}:{length}")
        targets = reachable(length)
        for i, gold in enumerate(balanced_golds(n_per_subset, N_CHOICES)):
            items.append(_item(length, targets[i % len(targets)], gold, rng))
    return items
