"""The lab's PostgreSQL roles: `looplab db grant NAME --as reader|member|admin|driver` (issue 56).

Five group roles (NOLOGIN), made once per server and given rights on one database:
  looplab_reader  reads every table and view; its members' sessions start read-only
  looplab_member  reads; submits (inserts grids, jobs, job_deps); changes only its own grids' jobs
  looplab_admin   everything, on anyone's jobs (and the alerts' outbox and channels)
  looplab_driver  the role `looplab run` connects as: everything a driver writes, on anyone's jobs
  looplab_dashboard  no rights of its own: it is a member of every person's role (reader, member, admin),
                  so the dashboard's login role (`--as dashboard`, NOINHERIT, sessions read-only) may
                  `SET ROLE` to the signed-in person and read with that person's rights only
                  (dashboard/access.py); it holds none of their rights without that SET ROLE
A person's login role is made a member of one of them. What a member may change is enforced by the
database itself: row-level security on grids, jobs and job_deps (revision 0024) lets a row be changed
only by its owner (the session user that inserted it) or a privileged session (`looplab_privileged()`,
which counts looplab_admin and looplab_driver), and a member holds no right to write any other table, so
a member's own psql session cannot do what looplab refuses. Run `looplab db grant` as the role that
migrates the database (it owns the tables); creating roles needs CREATEROLE. Passwords are set by the
lab's administrator (`ALTER ROLE name PASSWORD ...` in psql, `\\password name`), never on a command line.
"""

from __future__ import annotations

from looplab.model.errors import ConfigError
from looplab.orchestrator.db import ROLE_NAME, VERSION_TABLE, display_url, resolve_url, run_role_sql

KINDS = ("reader", "member", "admin", "driver", "dashboard")
RIGHTS = KINDS[:4]  # the groups with rights of their own; the dashboard's has none
PEOPLE = ("reader", "member", "admin")  # the kinds the dashboard may read as (dashboard/access.py)
GROUP = {kind: f"looplab_{kind}" for kind in KINDS}
DASHBOARD = GROUP["dashboard"]
MEMBER_WRITES = {"grids": "INSERT, UPDATE", "jobs": "INSERT, UPDATE", "job_deps": "INSERT"}


def _check_name(role: str) -> str:
    if not isinstance(role, str) or not ROLE_NAME.fullmatch(role) or role in GROUP.values():
        raise ConfigError(
            f"ROLE: expected a PostgreSQL role name (letters, digits, _; not starting with a digit; at "
            f"most 63 characters; not one of the group roles {', '.join(GROUP.values())}), got {role!r}"
        )
    return role


def _create(role: str, login: bool) -> str:
    return (
        f"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{role}') THEN "
        f'CREATE ROLE "{role}" {"LOGIN" if login else "NOLOGIN"}; END IF; END $$'
    )


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def group_sql(database: str) -> list[str]:
    """The statements that create the five group roles and give each its rights on `database`."""
    db_ident = _quoted(database)
    statements = [_create(DASHBOARD, login=False), f'ALTER ROLE "{DASHBOARD}" NOINHERIT']
    for kind in RIGHTS:
        group = f'"{GROUP[kind]}"'
        statements += [
            _create(GROUP[kind], login=False),
            f"GRANT CONNECT ON DATABASE {db_ident} TO {group}",
            f"GRANT USAGE ON SCHEMA public TO {group}",
            f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {group}",  # tables and views
            f"ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO {group}",
        ]
    member = f'"{GROUP["member"]}"'
    statements += [f"GRANT {rights} ON {table} TO {member}" for table, rights in MEMBER_WRITES.items()]
    statements.append(f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {member}")
    for kind in ("admin", "driver"):
        group = f'"{GROUP[kind]}"'
        statements += [
            f"GRANT ALL PRIVILEGES ON ALL TABLES IN SCHEMA public TO {group}",
            f"GRANT ALL PRIVILEGES ON ALL SEQUENCES IN SCHEMA public TO {group}",
            f"ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT ALL ON TABLES TO {group}",
            f"ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT ALL ON SEQUENCES TO {group}",
        ]
    # the audit trail is written by its SECURITY DEFINER trigger only: nobody but its owner edits it
    statements += [f'REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON audit FROM "{GROUP[k]}"' for k in RIGHTS]
    return statements


def grant_sql(role: str, kind: str, database: str) -> list[str]:
    """The statements that make login role `role` (created when missing) a `kind` of `database`: the
    group roles first, then `role` in exactly one of them (a role moved from member to admin leaves
    the member group)."""
    _check_name(role)
    if kind not in KINDS:
        raise ConfigError(f"--as: expected one of {', '.join(KINDS)}, got {kind!r}")
    statements = [*group_sql(database), _create(role, login=True)]
    statements += [f'REVOKE "{GROUP[k]}" FROM "{role}"' for k in KINDS if k != kind]
    # a person may be read as by the dashboard (its group is a member of theirs); no other role may
    statements.append(
        f'GRANT "{role}" TO "{DASHBOARD}"' if kind in PEOPLE else f'REVOKE "{role}" FROM "{DASHBOARD}"'
    )
    # the dashboard's login role holds nobody's rights until it SETs ROLE to the signed-in person
    statements.append(f'ALTER ROLE "{role}" {"NOINHERIT" if kind == "dashboard" else "INHERIT"}')
    statements.append(f'GRANT "{GROUP[kind]}" TO "{role}"')
    if kind == "dashboard":  # NOINHERIT: no group's rights count; it may connect and see the revision
        statements += [
            f'GRANT CONNECT ON DATABASE {_quoted(database)} TO "{role}"',
            f'GRANT USAGE ON SCHEMA public TO "{role}"',
            f'GRANT SELECT ON {VERSION_TABLE} TO "{role}"',  # `looplab dashboard` checks it at start
        ]
    read_only = (
        "SET default_transaction_read_only = on"
        if kind in ("reader", "dashboard")
        else "RESET default_transaction_read_only"
    )
    statements.append(f'ALTER ROLE "{role}" {read_only}')
    return statements


def grant(url: str | None, role: str, kind: str) -> list[str]:
    """Run `grant_sql` on the PostgreSQL database at `url` (`db.run_role_sql`); return the statements."""
    note = "a SQLite file is a single-user database"
    return run_role_sql(url, "`looplab db grant`", note, lambda database: grant_sql(role, kind, database))


def cli_db(args) -> int:
    """`looplab db grant ROLE --as KIND` here; every other `looplab db` action is orchestrator.db's."""
    from looplab.orchestrator.db import cli_db as db_actions

    if args.action != "grant":
        return db_actions(args)
    if not getattr(args, "role", None):
        raise ConfigError("ROLE: `looplab db grant ROLE --as KIND` needs the name of the role")
    kind = getattr(args, "grant_as", None) or "member"
    url = resolve_url(args.db)
    grant(url, args.role, kind)
    print(describe(args.role, kind, url))
    return 0


WHAT = {
    "reader": "can read {db} and write nothing (sessions start read-only)",
    "member": "can read {db}, submit, and cancel, retry or re-prioritise the jobs of its own grids",
    "admin": "can read {db} and act on anyone's jobs",
    "driver": "can run the queue of {db} (`looplab run` as this role)",
    "dashboard": (
        "can read {db} only as the person signed in to the dashboard (`looplab dashboard --auth proxy` "
        "as this role), as any person granted reader, member or admin: keep its password as an admin's"
    ),
}


def describe(role: str, kind: str, url: str) -> str:
    """The line `looplab db grant` prints."""
    return (
        f"role {role} is now a {kind} ({GROUP[kind]}): it {WHAT[kind].format(db=display_url(url))}; "
        f"set its password in psql (\\password {role}) and connect with password authentication"
    )
