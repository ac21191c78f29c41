"""Submission: grid expansion, follow-ups and dependencies, idempotence, bad grids refused whole.
No Ray here: submission only touches the database, on SQLite and on PostgreSQL (`migrated_db_url`)."""

from __future__ import annotations

import hashlib
import json
import sys

import pytest
import sqlalchemy as sa

from looplab import Grid, Queue
from looplab.model.errors import ConfigError
from looplab.orchestrator.db import sqlite_file
from tests.orchestrator import fake_jobs

TABLES = ("grids", "jobs", "job_deps", "attempts")


def counts(q: Queue) -> dict[str, int]:
    with q.eng.connect() as conn:
        return {t: conn.execute(sa.text(f"SELECT COUNT(*) FROM {t}")).scalar_one() for t in TABLES}


def deps(q: Queue) -> set[tuple[int, int]]:
    with q.eng.connect() as conn:
        return set(conn.execute(sa.text("SELECT job_id, depends_on FROM job_deps")).all())


@pytest.fixture
def fq(migrated_db_url, tmp_path):
    return Queue(db=migrated_db_url, artifacts=tmp_path / "art", kinds=fake_jobs)


def test_package_import_is_light():
    import subprocess

    code = "import looplab, sys; looplab.Grid; print('ray' in sys.modules, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_grid_expands_with_follow_ups(fq):
    grid = Grid(
        "g",
        base={"tokens": 100},
        sweep={"recipe": ["lean", "parcae"], "seed": [0, 1]},
        then=["depth_sweep", "decode_bench"],
        follow={"depth_sweep": {"loops": [1, 2]}},
    )
    ids = fq.submit(grid)
    st = fq.status().set_index("id")
    assert sorted(st.kind.value_counts().items()) == [("decode_bench", 2), ("depth_sweep", 4), ("train", 4)]
    assert len(ids) == 10 and fq.last_added == ids
    trains = st[st.kind == "train"]
    # each depth sweep depends on exactly its train job; decode benches (architecture only) on nothing
    d = deps(fq)
    for jid, row in st[st.kind == "depth_sweep"].iterrows():
        (dep,) = [b for a, b in d if a == jid]
        assert (
            dep in trains.index
            and trains.loc[dep, "seed"] == row.seed
            and trains.loc[dep, "recipe"] == row.recipe
        )
    assert not [a for a, _ in d if st.loc[a, "kind"] == "decode_bench"]
    with fq.eng.connect() as conn:
        cfg = json.loads(
            conn.execute(sa.text("SELECT config FROM jobs WHERE kind='depth_sweep' LIMIT 1")).scalar()
        )
    assert cfg["loops"] == [1, 2] and "checkpoint" not in cfg  # filled in at launch


def test_submit_twice_is_idempotent(fq):
    grid = Grid("g", base={"tokens": 100}, sweep={"recipe": ["lean"], "seed": [0, 1]}, then=["decode_bench"])
    first = fq.submit(grid)
    before = counts(fq)
    again = fq.submit(
        Grid("g", base={"tokens": 100}, sweep={"recipe": ["lean"], "seed": [0, 1]}, then=["decode_bench"])
    )
    assert again == first and fq.last_added == []
    assert counts(fq) == before
    assert len(first) == 3  # two seeds share one decode bench: [train s0, decode, train s1]
    # a second grid overlapping the first adds only the new job
    more = fq.submit(Grid("g2", base={"tokens": 100, "recipe": "lean"}, sweep={"seed": [1, 2]}))
    assert more[0] == first[2] and len(fq.last_added) == 1


def test_match_time_of_depends_on_reference(fq):
    main = Grid("main", base={"tokens": 100}, sweep={"recipe": ["lean", "parcae"], "seed": [0]})
    iso = Grid("iso", base={"recipe": "parcae", "seed": 0, "budget": {"match_time_of": {"recipe": "lean"}}})
    ids = fq.submit([main, iso])
    st = fq.status().set_index("id")
    lean = st[(st.recipe == "lean") & (st.grid == "main")].index[0]
    assert (ids[-1], lean) in deps(fq)
    with fq.eng.connect() as conn:
        budget = conn.execute(
            sa.text("SELECT budget, budget_time_s FROM jobs WHERE id=:i"), {"i": ids[-1]}
        ).one()
    assert json.loads(budget[0]) == {"match_time_of": int(lean)} and budget[1] is None
    # by job id, in a later submission
    fq.submit(Grid("iso2", base={"recipe": "fixed4", "budget": {"match_time_of": int(lean)}}))
    assert (fq.last_added[0], lean) in deps(fq)


def test_match_time_of_may_name_a_train_job_of_a_later_grid(fq):
    """The iso-time grid listed before its reference grid: ids in plan order, the dependency right."""
    iso = Grid("iso", base={"recipe": "parcae", "budget": {"match_time_of": {"recipe": "lean"}}})
    main = Grid("main", base={"recipe": "lean", "tokens": 100})
    follower, ref = fq.submit([iso, main])
    assert (follower, ref) in deps(fq)
    with fq.eng.connect() as conn:
        budget = conn.execute(sa.text("SELECT budget FROM jobs WHERE id=:i"), {"i": follower}).scalar()
    assert json.loads(budget) == {"match_time_of": ref}
    assert fq.submit([iso, main]) == [follower, ref] and fq.last_added == []


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


BAD_GRIDS = [
    (Grid("bad", base={"tokens": 1000}, sweep={"recipe": ["lean", "lena"]}), "recipe"),
    (Grid("bad", base={"tokens": 1000, "learning_rate": 0.1}), "learning_rate"),
    (Grid("bad", base={"tokens": 1000}, sweep={"seed": []}), "sweep.seed"),
    (Grid("bad", base={"budget": "lots"}, sweep={"recipe": ["lean"]}), "budget"),
    (Grid("bad", base={"budget": {"tokens": "2M"}}), "budget.tokens"),
    (Grid("bad", base={"tokens": 1000, "budget": 2000}), "budget"),
    (Grid("bad", base={"tokens": 1000}, resources={"num_gpu": 1}), "resources.num_gpu"),
    (Grid("bad", base={"tokens": 1000}, then=["evals"]), "then"),
    (Grid("bad", base={"budget": {"match_time_of": {"recipe": "plain"}}}), "match_time_of"),
    (Grid("bad", base={"tokens": 1000}, priority="high"), "priority"),
    (Grid("bad", base={"tokens": 1000}, sweep=["lean"]), "sweep"),
    (Grid("bad", base={"tokens": 1000}, resources=1), "resources"),
    (Grid("bad", base={"tokens": 1000}, then="depth_sweep"), "then"),
    # a learned exit on a model that cannot carry one, or with a coefficient or prior out of range
    (Grid("bad", base={"tokens": 1000, "recipe": "plain", "model": {"exit_gate": "entropy"}}), "exit_gate"),
    (Grid("bad", base={"tokens": 1000, "recipe": "parcae", "model": {"exit_gate": "act"}}), "exit_gate"),
    (Grid("bad", base={"tokens": 1000, "model": {"exit_gate": "entropy", "gate_coef": -1}}), "gate_coef"),
    (
        Grid("bad", base={"tokens": 1000, "model": {"exit_gate": "geometric", "gate_prior": 1.5}}),
        "gate_prior",
    ),
    # the gate exit rule on a model trained without a gate
    (
        Grid(
            "bad", base={"tokens": 1000}, then=["adaptive"], follow={"adaptive": {"rules": {"gate": [0.5]}}}
        ),
        "rules.gate",
    ),
]


@pytest.mark.parametrize("grid,field", BAD_GRIDS, ids=[f for _, f in BAD_GRIDS])
def test_bad_grid_refused_whole_with_the_field_named(migrated_db_url, tmp_path, grid, field):
    """With the real job registry (workers.jobs): a good grid and a bad one together add nothing
    (SQLite: not a byte of the file changes; PostgreSQL: no row of any table)."""
    q = Queue(db=migrated_db_url, artifacts=tmp_path / "art")
    q.submit(Grid("ok", base={"tokens": 1000, "size": "tiny"}, sweep={"seed": [0]}))
    file = sqlite_file(migrated_db_url)
    before, sha = counts(q), file and _sha(file)
    good = Grid("good", base={"tokens": 1000, "size": "tiny"}, sweep={"recipe": ["lean", "parcae"]})
    with pytest.raises(ConfigError) as e:
        q.submit([good, grid])
    assert field in str(e.value)
    assert counts(q) == before and (file and _sha(file)) == sha


def test_gate_rule_is_accepted_after_a_model_trained_with_a_gate(migrated_db_url, tmp_path):
    q = Queue(db=migrated_db_url, artifacts=tmp_path / "art")
    base = {"tokens": 1000, "size": "tiny", "model": {"exit_gate": "act"}}
    grid = Grid("gate", base=base, then=["adaptive"], follow={"adaptive": {"rules": {"gate": [0.5, 1]}}})
    assert len(q.submit(grid)) == 2


def test_unknown_key_names_accepted_keys(migrated_db_url):
    q = Queue(db=migrated_db_url)
    with pytest.raises(ConfigError, match=r"learning_rate.*accepted:.*batch_size"):
        q.submit(Grid("bad", base={"tokens": 1000, "learning_rate": 0.1}))
