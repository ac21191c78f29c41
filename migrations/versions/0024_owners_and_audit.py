"""Owners and an audit trail; on PostgreSQL, roles the database itself enforces (issue 56).

Revision ID: 0024_owners_and_audit
Revises: 0023_view_times_and_grid
Create Date: 2026-12-06

- `grids.owner`, `jobs.owner`: who submitted them. PostgreSQL: the session user, written by a trigger
  on the server whatever the client sent (a client cannot forge its session user), and never changed
  afterwards. SQLite: the operating-system user of the process that opened the file (`local_user`,
  written by looplab when it opens the database): a SQLite file is a single-user database.
- `audit`: one row per grid submitted, job submitted, cancellation, retry, priority change and
  preemption, written by triggers on `grids`, `jobs` and `attempts`, so an action taken in plain SQL is
  recorded like one taken through looplab. On PostgreSQL the trigger function is SECURITY DEFINER: no
  other role needs (or gets, from `looplab db grant`) a right to write the trail.
- PostgreSQL only: row-level security on `grids`, `jobs`, `job_deps`. Everybody may read and add; a
  row may be changed only by its owner or by a privileged session (`looplab_privileged()`: a
  superuser, the tables' owner, or a member of `looplab_admin` / `looplab_driver`); only a privileged
  session may delete. The tables' owner (the role that migrates) bypasses the policies as usual.
Existing rows are owned by the user who runs this upgrade. Downgrade drops all of it.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0024_owners_and_audit"
down_revision: str | Sequence[str] | None = "0023_view_times_and_grid"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# (table, action, WHEN clause, job id, grid id, detail) of each audited change, in both dialects' SQL
_SQLITE_AUDITS = [
    ("grids", "INSERT", "grid", "1", "NULL", "NEW.id", "NEW.name"),
    ("jobs", "INSERT", "submit", "1", "NEW.id", "NEW.grid_id", "NEW.kind"),
    (
        "jobs",
        "UPDATE OF status",
        "cancel",
        "NEW.status = 'cancelled' AND OLD.status IS NOT 'cancelled'",
        "NEW.id",
        "NEW.grid_id",
        "OLD.status || ' -> cancelled'",
    ),
    (
        "jobs",
        "UPDATE OF status",
        "retry",
        "NEW.status = 'queued' AND OLD.status IN ('failed', 'cancelled')",
        "NEW.id",
        "NEW.grid_id",
        "OLD.status || ' -> queued'",
    ),
    (
        "jobs",
        "UPDATE OF priority",
        "priority",
        "NEW.priority IS NOT OLD.priority",
        "NEW.id",
        "NEW.grid_id",
        "OLD.priority || ' -> ' || NEW.priority",
    ),
    (
        "attempts",
        "UPDATE OF outcome",
        "preempt",
        "NEW.outcome = 'preempted' AND OLD.outcome IS NOT 'preempted'",
        "NEW.job_id",
        "(SELECT grid_id FROM jobs WHERE id = NEW.job_id)",
        "NEW.error",
    ),
]
_SQLITE_USER = "(SELECT name FROM local_user WHERE id = 1)"
_SQLITE_NOW = "((julianday('now') - 2440587.5) * 86400.0)"

_PG_FUNCTIONS = [
    """
CREATE OR REPLACE FUNCTION looplab_privileged() RETURNS boolean
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, public AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = session_user AND rolsuper) THEN
        RETURN true;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_class WHERE oid = 'public.jobs'::regclass
               AND pg_get_userbyid(relowner) = session_user) THEN
        RETURN true;
    END IF;
    RETURN EXISTS (SELECT 1 FROM pg_roles WHERE rolname IN ('looplab_admin', 'looplab_driver')
                   AND pg_has_role(session_user, oid, 'MEMBER'));
END $$""",
    """
CREATE OR REPLACE FUNCTION looplab_keep_owner() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        NEW.owner := session_user;
    ELSE
        NEW.owner := OLD.owner;
    END IF;
    RETURN NEW;
END $$""",
    """
CREATE OR REPLACE FUNCTION looplab_audit() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    act text;
    detail text;
    job integer;
    grid integer;
BEGIN
    IF TG_TABLE_NAME = 'grids' THEN
        act := 'grid'; grid := NEW.id; detail := NEW.name;
    ELSIF TG_TABLE_NAME = 'attempts' THEN
        IF NEW.outcome = 'preempted' AND (TG_OP = 'INSERT' OR OLD.outcome IS DISTINCT FROM 'preempted') THEN
            act := 'preempt'; job := NEW.job_id; detail := NEW.error;
            SELECT grid_id INTO grid FROM jobs WHERE id = NEW.job_id;
        END IF;
    ELSE
        job := NEW.id; grid := NEW.grid_id;
        IF TG_OP = 'INSERT' THEN
            act := 'submit'; detail := NEW.kind;
        ELSIF NEW.status = 'cancelled' AND OLD.status IS DISTINCT FROM 'cancelled' THEN
            act := 'cancel'; detail := OLD.status || ' -> cancelled';
        ELSIF NEW.status = 'queued' AND OLD.status IN ('failed', 'cancelled') THEN
            act := 'retry'; detail := OLD.status || ' -> queued';
        END IF;
        IF TG_OP = 'UPDATE' AND NEW.priority IS DISTINCT FROM OLD.priority THEN
            INSERT INTO audit (at, actor, action, job_id, grid_id, detail)
            VALUES (extract(epoch FROM clock_timestamp())::double precision, session_user, 'priority',
                    job, grid, OLD.priority || ' -> ' || NEW.priority);
        END IF;
    END IF;
    IF act IS NOT NULL THEN
        INSERT INTO audit (at, actor, action, job_id, grid_id, detail)
        VALUES (extract(epoch FROM clock_timestamp())::double precision, session_user, act, job, grid, detail);
    END IF;
    RETURN NULL;
END $$""",
]
_PG_TRIGGERS = [
    "CREATE TRIGGER grids_owner_set BEFORE INSERT ON grids FOR EACH ROW EXECUTE FUNCTION looplab_keep_owner()",
    "CREATE TRIGGER grids_owner_kept BEFORE UPDATE OF owner ON grids FOR EACH ROW "
    "EXECUTE FUNCTION looplab_keep_owner()",
    "CREATE TRIGGER jobs_owner_set BEFORE INSERT ON jobs FOR EACH ROW EXECUTE FUNCTION looplab_keep_owner()",
    "CREATE TRIGGER jobs_owner_kept BEFORE UPDATE OF owner ON jobs FOR EACH ROW "
    "EXECUTE FUNCTION looplab_keep_owner()",
    "CREATE TRIGGER grids_audit AFTER INSERT ON grids FOR EACH ROW EXECUTE FUNCTION looplab_audit()",
    "CREATE TRIGGER jobs_audit AFTER INSERT OR UPDATE OF status, priority ON jobs FOR EACH ROW "
    "EXECUTE FUNCTION looplab_audit()",
    "CREATE TRIGGER attempts_audit AFTER INSERT OR UPDATE OF outcome ON attempts FOR EACH ROW "
    "EXECUTE FUNCTION looplab_audit()",
]
_MINE = "(owner = session_user OR looplab_privileged())"
_JOB_IS_MINE = (
    "EXISTS (SELECT 1 FROM jobs j WHERE j.id = job_deps.job_id "
    "AND (j.owner = session_user OR looplab_privileged()))"
)
_PG_POLICIES = {
    "grids": [("SELECT", "true", None), ("INSERT", None, "true"), ("UPDATE", _MINE, _MINE)],
    "jobs": [("SELECT", "true", None), ("INSERT", None, "true"), ("UPDATE", _MINE, _MINE)],
    "job_deps": [
        ("SELECT", "true", None),
        ("INSERT", None, _JOB_IS_MINE),
        ("UPDATE", _JOB_IS_MINE, _JOB_IS_MINE),
    ],
}


def _pg_policy_sql(table: str) -> list[str]:
    statements = [f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY"]
    for command, using, check in [*_PG_POLICIES[table], ("DELETE", "looplab_privileged()", None)]:
        clauses = (f" USING ({using})" if using else "") + (f" WITH CHECK ({check})" if check else "")
        statements.append(f"CREATE POLICY {table}_{command.lower()} ON {table} FOR {command}{clauses}")
    return statements


def upgrade() -> None:
    import getpass

    op.add_column("grids", sa.Column("owner", sa.String(length=63), nullable=True))
    op.add_column("jobs", sa.Column("owner", sa.String(length=63), nullable=True))
    op.create_table(
        "audit",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("actor", sa.String(length=63), nullable=True),
        sa.Column("action", sa.String(length=16), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=True),
        sa.Column("grid_id", sa.Integer(), nullable=True),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_audit"),
    )
    op.create_index("ix_audit_job_id", "audit", ["job_id"])
    op.create_table(
        "local_user",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_local_user"),
    )
    conn = op.get_bind()
    if conn.dialect.name == "postgresql":
        op.execute("UPDATE grids SET owner = session_user")
        op.execute("UPDATE jobs SET owner = session_user")
        for statement in [*_PG_FUNCTIONS, *_PG_TRIGGERS]:
            op.execute(statement)
        for table in _PG_POLICIES:
            for statement in _pg_policy_sql(table):
                op.execute(statement)
        return
    user = getpass.getuser()
    conn.execute(sa.text("INSERT INTO local_user (id, name) VALUES (1, :u)"), {"u": user})
    conn.execute(sa.text("UPDATE grids SET owner = :u"), {"u": user})
    conn.execute(sa.text("UPDATE jobs SET owner = :u"), {"u": user})
    for table in ("grids", "jobs"):
        op.execute(
            f"CREATE TRIGGER {table}_owner_set AFTER INSERT ON {table} WHEN NEW.owner IS NULL BEGIN "
            f"UPDATE {table} SET owner = {_SQLITE_USER} WHERE id = NEW.id; END"
        )
    for table, event, action, when, job, grid, detail in _SQLITE_AUDITS:
        op.execute(
            f"CREATE TRIGGER {table}_audit_{action} AFTER {event} ON {table} WHEN {when} BEGIN "
            f"INSERT INTO audit (at, actor, action, job_id, grid_id, detail) VALUES "
            f"({_SQLITE_NOW}, {_SQLITE_USER}, '{action}', {job}, {grid}, {detail}); END"
        )


def downgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name == "postgresql":
        for table in _PG_POLICIES:
            for command in ("select", "insert", "update", "delete"):
                op.execute(f"DROP POLICY IF EXISTS {table}_{command} ON {table}")
            op.execute(f"ALTER TABLE {table} DISABLE ROW LEVEL SECURITY")
        for statement in _PG_TRIGGERS:
            name, table = statement.split()[2], statement.split(" ON ")[1].split()[0]
            op.execute(f"DROP TRIGGER IF EXISTS {name} ON {table}")
        for function in ("looplab_audit", "looplab_keep_owner", "looplab_privileged"):
            op.execute(f"DROP FUNCTION IF EXISTS {function}()")
    else:
        for table in ("grids", "jobs"):
            op.execute(f"DROP TRIGGER IF EXISTS {table}_owner_set")
        for table, _event, action, *_ in _SQLITE_AUDITS:
            op.execute(f"DROP TRIGGER IF EXISTS {table}_audit_{action}")
    op.drop_table("local_user")
    op.drop_index("ix_audit_job_id", table_name="audit")
    op.drop_table("audit")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("owner")
    with op.batch_alter_table("grids") as batch:
        batch.drop_column("owner")
