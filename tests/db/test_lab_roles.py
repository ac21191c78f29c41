"""A lab on one PostgreSQL queue (issue 56): roles that the database itself enforces.

A throw-away server with password authentication (scram-sha-256 on TCP: a trust-authenticated one lets
any client claim any role), migrated by its superuser; `looplab db grant` makes two members (alice,
bob), an admin (carol) and the driver's role (drv), each logging in with its own password. Bob tries
to cancel, retry, re-prioritise, preempt or otherwise alter alice's jobs through `looplab`, the Python
API and plain SQL on his own connection: every attempt is refused and the database is unchanged
(every table's rows compared before and after). His own jobs and carol's actions succeed; every
action is in the audit trail with its actor; the driver claims, heartbeats and finishes jobs with
row-level security on.
"""

from __future__ import annotations

import psycopg
import pytest
import sqlalchemy as sa

from looplab import Grid, Queue
from looplab.orchestrator import jobqueue, owners, recovery
from looplab.orchestrator.admission import Candidate, Node, Request, Running, admit
from looplab.orchestrator.owners import NotYourJob
from looplab.orchestrator.preemption import Preemptions
from looplab.orchestrator.states import AttemptOutcome
from tests.cli import looplab_here
from tests.orchestrator import fake_jobs
from tests.pg import lab_database, password_server, snapshot

PASSWORDS = {"alice": "a-secret-1", "bob": "b-secret-2", "carol": "c-secret-3", "drv": "d-secret-4"}
KINDS = {"alice": "member", "bob": "member", "carol": "admin", "drv": "driver"}
GPU = Request(cpus=1, gpus=1)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    with password_server("super-secret-0") as server:
        # migrated as the superuser, the tables' owner; the roles made through the command line
        urls = lab_database(server, {r: (KINDS[r], pw) for r, pw in PASSWORDS.items()}, fake_jobs)
        yield server, urls, tmp_path_factory.mktemp("lab")


def test_grant_says_what_the_role_may_do_and_refuses_bad_input(lab, capsys, tmp_path):
    server, urls, _ = lab
    ran = looplab_here(capsys, "db", "grant", "dave", "--as", "reader", "--db", urls["postgres"])
    assert ran.returncode == 0 and "role dave is now a reader (looplab_reader)" in ran.stdout
    assert "super-secret-0" not in ran.stdout  # the URL is shown without its password
    with sa.create_engine(server.url("lab"), poolclass=sa.pool.NullPool).connect() as conn:
        groups = (
            conn.exec_driver_sql(
                "SELECT r.rolname FROM pg_auth_members m JOIN pg_roles r ON r.oid = m.roleid "
                "JOIN pg_roles u ON u.oid = m.member WHERE u.rolname = 'dave'"
            )
            .scalars()
            .all()
        )
    assert groups == ["looplab_reader"]
    ran = looplab_here(capsys, "db", "grant", "dave", "--as", "admin", "--db", urls["postgres"])
    assert ran.returncode == 0  # moved: in the admin group only now
    for args, said in (
        (["db", "grant", "1bad", "--db", urls["postgres"]], "ROLE: expected a PostgreSQL role name"),
        (["db", "grant", "looplab_admin", "--db", urls["postgres"]], "not one of the group roles"),
        (["db", "grant", "--db", urls["postgres"]], "ROLE: `looplab db grant ROLE --as KIND` needs"),
        (
            ["db", "grant", "erin", "--db", str(tmp_path / "q.db")],
            "--db: `looplab db grant` needs a PostgreSQL",
        ),
    ):
        ran = looplab_here(capsys, *args)
        assert ran.returncode == 2 and said in ran.stderr, ran


def queue(urls, role: str, tmp) -> Queue:
    return Queue(db=urls[role], artifacts=tmp / "art", kinds=fake_jobs)


def test_password_authentication_is_required(lab):
    server, urls, _ = lab
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(host="127.0.0.1", port=server.port, user="alice", password="wrong", dbname="lab")
    with pytest.raises(psycopg.OperationalError, match="password"):
        psycopg.connect(host="127.0.0.1", port=server.port, user="alice", dbname="lab")


def _sql_attempts(alice_jobs: list[int], alice_grid: int, bob_job: int) -> list[str]:
    """Plain SQL bob might type in psql against alice's jobs: each must fail or change no row."""
    a, b, c = alice_jobs[:3]
    return [
        f"UPDATE jobs SET status = 'cancelled' WHERE id = {a}",
        f"UPDATE jobs SET status = 'queued' WHERE id = {b}",  # a retry of her cancelled job
        f"UPDATE jobs SET priority = 99 WHERE id = {a}",
        f"UPDATE jobs SET priority = -5 WHERE grid_id = {alice_grid}",
        f"""UPDATE jobs SET resources = '{{"preemptible": true}}' WHERE id = {c}""",  # make hers preemptible
        f"UPDATE jobs SET owner = 'bob' WHERE id = {a}",
        f"UPDATE jobs SET config = '{{}}' WHERE id = {c}",
        f"DELETE FROM jobs WHERE id = {c}",
        f"UPDATE grids SET name = 'mine now' WHERE id = {alice_grid}",
        f"DELETE FROM grids WHERE id = {alice_grid}",
        f"INSERT INTO job_deps (job_id, depends_on) VALUES ({a}, {bob_job})",  # block hers behind his
        f"DELETE FROM job_deps WHERE job_id = {a}",
        f"INSERT INTO attempts (job_id, n, started_at, outcome) VALUES ({a}, 9, 0, 'preempted')",
        f"UPDATE attempts SET outcome = 'preempted' WHERE job_id = {a}",
        f"INSERT INTO audit (at, actor, action, job_id) VALUES (0, 'alice', 'cancel', {a})",
        "DELETE FROM audit",
        "UPDATE audit SET actor = 'carol'",
        f"UPDATE jobs SET status = 'cancelled' WHERE id IN ({a}, {b}, {c})",
    ]


def _try_sql(url: str, statement: str) -> str:
    """Run `statement` as the URL's role; 'refused: ...' or 'no row changed', never a change."""
    eng = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with eng.begin() as conn:
            changed = conn.exec_driver_sql(statement).rowcount
    except sa.exc.DBAPIError as e:
        return f"refused: {str(e.orig).splitlines()[0]}"
    finally:
        eng.dispose()
    assert changed == 0, f"{statement} changed {changed} rows as bob"
    return "no row changed"


def test_a_member_cannot_touch_another_member_s_jobs_by_any_path(lab, capsys):
    server, urls, tmp = lab
    alice, bob, carol = (queue(urls, r, tmp) for r in ("alice", "bob", "carol"))
    alice_jobs = alice.submit(Grid("alice-study", base={"tokens": 100}, sweep={"seed": [0, 1, 2, 3]}))
    (bob_job, bob_job2) = bob.submit(Grid("bob-study", base={"tokens": 100}, sweep={"seed": [10, 11]}))
    assert alice.cancel(alice_jobs[1]) == [alice_jobs[1]]  # her own: allowed (a retry target for bob)
    with alice.eng.connect() as conn:
        alice_grid = conn.execute(sa.text("SELECT id FROM grids WHERE name = 'alice-study'")).scalar()
    before = snapshot(urls["postgres"])
    refused: list[str] = []
    for job in alice_jobs:  # through looplab: 4 jobs x 3 commands
        for args in (["cancel", str(job)], ["retry", str(job)], ["priority", str(job), "--to", "50"]):
            ran = looplab_here(capsys, *args, "--db", urls["bob"])
            assert ran.returncode == 2, ran
            assert f"job {job} belongs to alice" in ran.stderr and "looplab_admin" in ran.stderr, ran.stderr
            assert "b-secret-2" not in ran.stderr + ran.stdout
            refused.append(f"cli {args[0]} {job}")
    for call in (  # through the Python API
        lambda: bob.cancel(alice_jobs),
        lambda: bob.retry(alice_jobs[1]),
        lambda: bob.set_priority([alice_jobs[0], bob_job], 40),  # one of his own in it changes nothing either
        lambda: bob.cancel([bob_job, alice_jobs[3]]),
    ):
        with pytest.raises(NotYourJob, match="belongs to alice.*needs the looplab_admin role"):
            call()
        refused.append("api")
    for statement in _sql_attempts(alice_jobs, alice_grid, bob_job):  # plain SQL on bob's own session
        refused.append(f"sql {_try_sql(urls['bob'], statement)}: {statement}")
    assert len(refused) >= 30, refused
    # each way the database says no was met: no privilege, a row-level policy, the trigger that names
    # the owner of a row bob tried to UPDATE (revision 0025; before it, `UPDATE 0`)
    met = {
        how: sum(how in r for r in refused)
        for how in ("permission denied", "row-level", "belongs to alice: changing another member's")
    }
    assert met["permission denied"] >= 8 and met["row-level"] >= 1, met
    assert met["belongs to alice: changing another member's"] >= 9, met
    assert snapshot(urls["postgres"]) == before, "a refused attempt changed the database"

    # his own jobs: cancel through the CLI, retry through the API, a priority in plain SQL
    ran = looplab_here(capsys, "cancel", str(bob_job), "--db", urls["bob"])
    assert ran.returncode == 0, ran
    assert bob.retry(bob_job) == [bob_job]
    with sa.create_engine(urls["bob"], poolclass=sa.pool.NullPool).begin() as conn:
        assert conn.exec_driver_sql(f"UPDATE jobs SET priority = 3 WHERE id = {bob_job2}").rowcount == 1
    # the admin's, on alice's jobs
    assert carol.cancel(alice_jobs[0]) == [alice_jobs[0]]
    assert carol.retry(alice_jobs[1]) == [alice_jobs[1]]
    assert carol.set_priority(alice_jobs[2], 9) == [alice_jobs[2]]
    trail = carol.audit()
    done = [tuple(r) for r in trail[["actor", "action", "job_id", "owner"]].itertuples(index=False)]
    assert done[-6:] == [
        ("bob", "cancel", bob_job, "bob"),
        ("bob", "retry", bob_job, "bob"),
        ("bob", "priority", bob_job2, "bob"),
        ("carol", "cancel", alice_jobs[0], "alice"),
        ("carol", "retry", alice_jobs[1], "alice"),
        ("carol", "priority", alice_jobs[2], "alice"),
    ]
    assert ("alice", "cancel", alice_jobs[1], "alice") in done
    assert sum(a == "submit" and actor == "alice" for actor, a, *_ in done) == len(alice_jobs)
    assert sum(a == "submit" and actor == "bob" for actor, a, *_ in done) == 2
    assert not any(actor == "bob" and owner == "alice" for actor, _, _, owner in done)


def test_the_driver_runs_the_queue_under_its_role_with_row_level_security(lab, ray_cluster):
    """`looplab run` as the driver's role runs a member's jobs to the end (claims, heartbeats, events,
    results, the jobs' states: every write the driver makes) with row-level security on, and a
    preemption it records is audited with its name beside the job's owner."""
    server, urls, tmp = lab
    alice, drv = queue(urls, "alice", tmp), queue(urls, "drv", tmp)
    ids = alice.submit(Grid("alice-run", base={"tokens": 100, "steps": 4}, sweep={"seed": [20, 21]}))
    drv.run(until_empty=True, progress=False, poll_s=0.2)
    st = alice.status().set_index("id")
    assert st.loc[ids, "status"].tolist() == ["succeeded", "succeeded"]
    assert st.loc[ids, "owner"].tolist() == ["alice", "alice"]
    with alice.eng.connect() as conn:
        points = conn.execute(
            sa.text("SELECT count(*) FROM metrics WHERE job_id IN :ids").bindparams(
                sa.bindparam("ids", expanding=True)
            ),
            {"ids": ids},
        ).scalar()
        attempts = conn.execute(sa.text("SELECT count(*) FROM attempts WHERE outcome = 'succeeded'")).scalar()
    assert points > 0 and attempts >= 2
    (later,) = alice.submit(Grid("alice-later", base={"tokens": 100, "seed": 22}))
    n = jobqueue.claim(drv.eng, later, "test-worker", str(tmp / "art" / "later"))
    assert n == 1 and recovery.touch(drv.eng, {later: n}) == []
    with drv.eng.begin() as conn:  # what the driver's finish writes for a preempted attempt
        conn.execute(
            sa.text("UPDATE attempts SET outcome = :o, error = :e WHERE job_id = :j AND n = :n"),
            {"o": AttemptOutcome.PREEMPTED, "e": "preempted for job 0 (test)", "j": later, "n": n},
        )
    last = drv.audit(job_ids=[later])[["actor", "action", "owner"]].values.tolist()[-1]
    assert last == ["drv", "preempt", "alice"]
    assert [a for a, _, _ in drv.audit(job_ids=ids)[["actor", "action", "owner"]].values.tolist()] == [
        "alice",
        "alice",
    ]  # the driver's claims and completions are not a person's actions: only the submissions


def test_an_admin_s_urgent_job_may_preempt_a_job_its_owner_did_not_opt_in(lab):
    """Issue 56: an urgent job preempts another member's job only if that job opted in (its owner's
    flag) or an admin submitted the urgent one; the preemption is recorded with both names. The
    owners come from the database (each job's session user), as the driver reads them."""
    _, urls, tmp = lab
    alice, bob, carol, drv = (queue(urls, r, tmp) for r in ("alice", "bob", "carol", "drv"))
    (pinned,) = alice.submit(Grid("alice-pinned", base={"tokens": 100, "seed": 31}))  # not preemptible
    (bobs,) = bob.submit(Grid("bob-urgent", base={"tokens": 100, "seed": 32}, priority=50))
    (carols,) = carol.submit(Grid("carol-urgent", base={"tokens": 100, "seed": 33}, priority=50))
    admins = owners.Admins(drv.eng)
    names = ("carol", "alice", "bob", "drv", "postgres", "nobody", None)
    assert [admins(n) for n in names] == [True, False, False, False, False, False, False]
    n = jobqueue.claim(drv.eng, pinned, "test-worker", str(tmp / "art" / "pinned"))
    kept = Preemptions(cooldown_s=1800)  # the driver's view: alice's job runs and has checkpointed
    kept.started(pinned, None)
    kept.checkpoint(pinned, 8)
    running = kept.running_now([Running(GPU, None, pinned, 0)])
    assert running[0].stoppable and not running[0].preemptible
    decided = {}
    for job in (j for j in jobqueue.ready_jobs(drv.eng) if j.id in (bobs, carols)):
        candidate = Candidate(job, job.effective_priority, GPU, admins(job.owner))
        decided[job.owner] = admit([candidate], [Node(4, (1.0,))], running).preempts
    assert decided["bob"] == [] and [d.victims for d in decided["carol"]] == [(pinned,)]
    ((victim, why),) = kept.ask(decided["carol"][0])
    assert victim == pinned and "submitted by carol" in why and "had not opted in" in why
    with drv.eng.begin() as conn:  # what the driver's finish writes for the stopped attempt
        conn.execute(
            sa.text("UPDATE attempts SET outcome = :o, error = :e WHERE job_id = :j AND n = :n"),
            {"o": AttemptOutcome.PREEMPTED, "e": why, "j": pinned, "n": n},
        )
    actor, action, owner, detail = drv.audit(job_ids=[pinned])[["actor", "action", "owner", "detail"]].values[
        -1
    ]
    assert (actor, action, owner) == ("drv", "preempt", "alice") and "submitted by carol" in detail


def test_opting_a_job_in_to_preemption_is_its_owner_s_and_is_in_the_trail(lab):
    """The `preemptible` flag lives in a job's resources: changing them is an audit row (revision 0025)
    with the JSON before and after; another member's try is refused naming the owner, an admin's is
    allowed and recorded with the admin's name."""
    _, urls, tmp = lab
    alice, carol = queue(urls, "alice", tmp), queue(urls, "carol", tmp)
    (job,) = alice.submit(Grid("alice-optin", base={"tokens": 100, "seed": 41}))
    opt_in = f"""UPDATE jobs SET resources = '{{"num_cpus": 1, "preemptible": true}}' WHERE id = {job}"""
    said = _try_sql(urls["bob"], opt_in)
    assert (
        f"refused: job {job} belongs to alice: changing another member's job needs the looplab_admin" in said
    )
    with sa.create_engine(urls["alice"], poolclass=sa.pool.NullPool).begin() as conn:
        assert conn.exec_driver_sql(opt_in).rowcount == 1
    with sa.create_engine(urls["carol"], poolclass=sa.pool.NullPool).begin() as conn:
        assert conn.exec_driver_sql(f"UPDATE jobs SET resources = NULL WHERE id = {job}").rowcount == 1
    rows = carol.audit(job_ids=[job])[["actor", "action", "owner", "detail"]].values.tolist()
    changes = [r for r in rows if r[1] == "resources"]
    assert [r[:3] for r in changes] == [["alice", "resources", "alice"], ["carol", "resources", "alice"]]
    assert changes[0][3].endswith(' -> {"num_cpus": 1, "preemptible": true}'), changes[0][3]
    assert changes[1][3] == '{"num_cpus": 1, "preemptible": true} -> null'
