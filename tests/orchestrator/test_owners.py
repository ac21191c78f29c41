"""Owners and the audit trail on both backends (issue 56, revision 0024): who submitted each grid and
job, who cancelled, retried and re-prioritised it, as the database records it (PostgreSQL: the session
user, which the client cannot forge; SQLite: the OS user noted in `local_user`). The roles that the
database enforces between people are tests/db/test_lab_roles.py's."""

from __future__ import annotations

import getpass

import pytest
import sqlalchemy as sa

from looplab import Grid, Queue
from looplab.model.errors import ConfigError
from tests.cli import looplab_here
from tests.orchestrator import fake_jobs


@pytest.fixture
def fq(migrated_db_url, tmp_path):
    return Queue(db=migrated_db_url, artifacts=tmp_path / "art", kinds=fake_jobs)


def me(q: Queue) -> str:
    return "postgres" if q.eng.dialect.name == "postgresql" else getpass.getuser()


def trail(q: Queue) -> list[tuple]:
    with q.eng.connect() as conn:
        return [
            tuple(r)
            for r in conn.execute(
                sa.text("SELECT actor, action, job_id, detail FROM audit_trail ORDER BY id")
            )
        ]


def test_every_action_is_recorded_with_who_did_it(fq, capsys):
    ids = fq.submit(Grid("g", base={"tokens": 100}, sweep={"seed": [0, 1]}))
    user = me(fq)
    with fq.eng.connect() as conn:
        owners = conn.execute(sa.text("SELECT owner FROM jobs UNION SELECT owner FROM grids")).scalars().all()
    assert owners == [user]
    assert fq.cancel(ids[0]) == [ids[0]]
    assert fq.retry([ids[0]]) == [ids[0]]
    assert fq.set_priority(ids, 7) == sorted(ids)
    assert fq.set_priority(ids, 7) == []  # already at it: nothing changes, nothing is recorded
    got = trail(fq)
    # one UPDATE re-prioritises both jobs: the rows of one statement come in the server's order
    assert [(a, act, j) for a, act, j, _ in got[:5]] + sorted((a, act, j) for a, act, j, _ in got[5:]) == [
        (user, "grid", None),
        (user, "submit", ids[0]),
        (user, "submit", ids[1]),
        (user, "cancel", ids[0]),
        (user, "retry", ids[0]),
        (user, "priority", ids[0]),
        (user, "priority", ids[1]),
    ]
    assert got[3][3] == "queued -> cancelled" and got[5][3] == "0 -> 7"
    assert fq.status()["owner"].tolist() == [user, user]
    ran = looplab_here(capsys, "status", "--audit", "--db", fq.url)
    assert ran.returncode == 0
    assert ran.stdout.count(f"  {user}  ") == len(got) and f"cancel  job {ids[0]}" in ran.stdout
    assert len(fq.audit(job_ids=[ids[1]])) == 2


def test_the_owner_is_the_database_s_not_the_client_s(fq):
    """A plain INSERT naming another owner, or an UPDATE of the owner, does not change who owns the row
    on PostgreSQL (a trigger writes the session user); on SQLite the noted OS user fills a missing one."""
    (job,) = fq.submit(Grid("g", base={"tokens": 100}))
    with fq.eng.begin() as conn:
        conn.execute(sa.text("UPDATE jobs SET owner = 'mallory' WHERE id = :j"), {"j": job})
        owner = conn.execute(sa.text("SELECT owner FROM jobs WHERE id = :j"), {"j": job}).scalar()
    assert owner == (me(fq) if fq.eng.dialect.name == "postgresql" else "mallory")


def test_a_bad_priority_or_job_id_is_refused_naming_the_field(fq, capsys):
    (job,) = fq.submit(Grid("g", base={"tokens": 100}))
    with pytest.raises(ConfigError, match="priority: expected an integer"):
        fq.set_priority(job, "high")
    with pytest.raises(ConfigError, match="job_ids: must be >= 1"):
        fq.cancel([0])
    ran = looplab_here(capsys, "priority", str(job), "--to", "5", "--db", fq.url)
    assert ran.returncode == 0 and f"priority 5: [{job}]" in ran.stdout
    ran = looplab_here(capsys, "priority", str(job), "--to", "5", "--db", fq.url)
    assert ran.returncode == 1 and "already at it" in ran.stdout


def test_a_change_of_resources_is_in_the_trail(fq):
    """The `preemptible` flag lives in a job's resources (revision 0025): a change made in plain SQL is
    an audit row with the JSON before and after; an UPDATE that leaves them as they were is not."""
    (job,) = fq.submit(Grid("g", base={"tokens": 100}))
    with fq.eng.begin() as conn:
        conn.execute(
            sa.text("UPDATE jobs SET resources = :r WHERE id = :j"), {"r": '{"preemptible": true}', "j": job}
        )
        conn.execute(sa.text("UPDATE jobs SET resources = resources WHERE id = :j"), {"j": job})
    changes = [r for r in trail(fq) if r[1] == "resources"]
    assert len(changes) == 1 and changes[0][:3] == (me(fq), "resources", job), changes
    assert changes[0][3].endswith(' -> {"preemptible": true}'), changes[0][3]
