"""The audit trail records a change of a job's resources; on PostgreSQL a member's UPDATE of another's
grid or job is an error naming its owner (issue 56).

Revision ID: 0025_audit_resources
Revises: 0024_owners_and_audit
Create Date: 2026-12-06

- `resources` holds a job's `preemptible` flag, which decides whether an urgent job may stop it: its
  change is an audit row (action `resources`, detail `OLD -> NEW`, the JSON of each), written by a
  trigger like 0024's (SECURITY DEFINER on PostgreSQL), so one made in plain SQL is recorded too.
- PostgreSQL: 0024's UPDATE policies on `grids` and `jobs` hid another member's rows from the member's
  UPDATE, which then reported `UPDATE 0`: a silent no. Now the rows are visible to UPDATE and a BEFORE
  UPDATE trigger refuses, naming the row, its owner and the role needed (`insufficient_privilege`),
  the statement changing nothing; the WITH CHECK of the policy still holds as before. The owner and
  privileged sessions (`looplab_privileged()`) are unaffected. Deleting stays privileged-only (rows
  hidden, `DELETE 0`).
Downgrade restores 0024's policies and drops the triggers and functions made here.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0025_audit_resources"
down_revision: str | Sequence[str] | None = "0024_owners_and_audit"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_MINE = "(owner = session_user OR looplab_privileged())"
_PG_FUNCTIONS = [
    """
CREATE OR REPLACE FUNCTION looplab_audit_resources() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
BEGIN
    INSERT INTO audit (at, actor, action, job_id, grid_id, detail)
    VALUES (extract(epoch FROM clock_timestamp())::double precision, session_user, 'resources',
            NEW.id, NEW.grid_id, coalesce(OLD.resources, 'null') || ' -> ' || coalesce(NEW.resources, 'null'));
    RETURN NULL;
END $$""",
    """
CREATE OR REPLACE FUNCTION looplab_refuse_others() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.owner IS DISTINCT FROM session_user AND NOT looplab_privileged() THEN
        RAISE EXCEPTION '% % belongs to %: changing another member''s % needs the looplab_admin role '
                        '(% is not a member of it; nothing was changed)',
            CASE TG_TABLE_NAME WHEN 'jobs' THEN 'job' ELSE 'grid' END, OLD.id,
            coalesce(OLD.owner, 'nobody (unowned)'),
            CASE TG_TABLE_NAME WHEN 'jobs' THEN 'job' ELSE 'grid' END, session_user
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END $$""",
]
_PG_TRIGGERS = [
    "CREATE TRIGGER jobs_audit_resources AFTER UPDATE OF resources ON jobs FOR EACH ROW "
    "WHEN (NEW.resources IS DISTINCT FROM OLD.resources) EXECUTE FUNCTION looplab_audit_resources()",
    "CREATE TRIGGER grids_refuse_others BEFORE UPDATE ON grids FOR EACH ROW EXECUTE FUNCTION looplab_refuse_others()",
    "CREATE TRIGGER jobs_refuse_others BEFORE UPDATE ON jobs FOR EACH ROW EXECUTE FUNCTION looplab_refuse_others()",
]


def _update_policy(table: str, using: str) -> list[str]:
    return [
        f"DROP POLICY IF EXISTS {table}_update ON {table}",
        f"CREATE POLICY {table}_update ON {table} FOR UPDATE USING ({using}) WITH CHECK ({_MINE})",
    ]


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for statement in [*_PG_FUNCTIONS, *_PG_TRIGGERS]:
            op.execute(statement)
        for table in ("grids", "jobs"):  # visible to UPDATE, so the trigger above can say whose
            for statement in _update_policy(table, "true"):
                op.execute(statement)
        return
    op.execute(
        "CREATE TRIGGER jobs_audit_resources AFTER UPDATE OF resources ON jobs "
        "WHEN NEW.resources IS NOT OLD.resources BEGIN "
        "INSERT INTO audit (at, actor, action, job_id, grid_id, detail) VALUES "
        "(((julianday('now') - 2440587.5) * 86400.0), (SELECT name FROM local_user WHERE id = 1), "
        "'resources', NEW.id, NEW.grid_id, "
        "coalesce(OLD.resources, 'null') || ' -> ' || coalesce(NEW.resources, 'null')); END"
    )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for table in ("grids", "jobs"):
            for statement in _update_policy(table, _MINE):
                op.execute(statement)
        for statement in _PG_TRIGGERS:
            name, table = statement.split()[2], statement.split(" ON ")[1].split()[0]
            op.execute(f"DROP TRIGGER IF EXISTS {name} ON {table}")
        for function in ("looplab_refuse_others", "looplab_audit_resources"):
            op.execute(f"DROP FUNCTION IF EXISTS {function}()")
        return
    op.execute("DROP TRIGGER IF EXISTS jobs_audit_resources")
