"""Opening the results database: URL resolution, engines, sessions, migrate-on-open.

    resolve_url(url)        --db / $LOOPLAB_DB / sqlite:///looplab.db; a plain path means SQLite
    engine(url)             read-write; on SQLite WAL, foreign keys, busy timeout; migrates to head
    readonly_engine(url)    SQLite `mode=ro` + `PRAGMA query_only=ON`; PostgreSQL a read-only session
                            (`default_transaction_read_only=on`); never migrates
    session(engine)         an ORM Session that commits on success and rolls back on error
    ping(engine)            one real round trip (raises while the server is away)
    server_epoch()          the server's clock in a statement (heartbeats are stamped and judged by it)
    outage(error)           UNREACHABLE / FULL / DISK / LOCKED (a state to wait out), or None (a real error)
    describe_error(e, url)  the one line a person reads: the database, what failed, what to do
    outage_phrase(outage)   "is full (database or disk is full)": the driver's pause messages
    reader_role_sql(role, database)   the SQL that makes a PostgreSQL role able to read and nothing else

Backends: SQLite (a file path, or sqlite:///...) and PostgreSQL (postgresql+psycopg://user@host/dbname;
a bare postgresql:// URL is given the psycopg 3 driver, which looplab installs).

Why it is built this way (lessons from Optuna's RDB storage and MLflow's tracking store):
- opening for writing upgrades the schema, under a file lock next to the SQLite file, so two
  processes opening a new database at once do not both run the initial revision;
- a database stamped at a revision this looplab does not know (written by a newer looplab) is
  refused before anything is written to it: the check reads the file read-only, first;
- `busy_timeout` on every connection, because concurrent logging otherwise fails with
  "database is locked"; WAL so readers (dashboard, `looplab sql`, `sqlite3`) never block the writer;
- on PostgreSQL the same one-migrator rule holds through an advisory lock (there is no file to lock);
- the Alembic version table has our own name, so the file can be shared with other tools.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import re
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

from sqlalchemy import Engine, Float, create_engine, event, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import Session
from sqlalchemy.sql.functions import FunctionElement

from looplab.model.errors import ConfigError
from looplab.orchestrator.errors import DatabaseError

VERSION_TABLE = "looplab_alembic_version"
DEFAULT_FILE = "looplab.db"
BUSY_TIMEOUT_S = 30.0
# PostgreSQL advisory lock key held while migrating ("loop" in ASCII): one migrator per database
MIGRATION_LOCK_KEY = 0x6C6F6F70
# URL schemes that mean PostgreSQL through the driver looplab installs (psycopg 3)
PG_SCHEMES = {"postgresql": "postgresql+psycopg", "postgres": "postgresql+psycopg"}

_engines: dict[str, Engine] = {}
_ro_engines: dict[str, Engine] = {}
_lock = threading.Lock()
# Alembic announces every plugin it loads at INFO; keep `Running upgrade ...` lines, drop the noise.
logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)


# ---------------------------------------------------------------- URLs


def resolve_url(url: str | os.PathLike | None = None) -> str:
    """The database URL to use: `url`, else $LOOPLAB_DB, else `sqlite:///looplab.db` in the cwd.

    A value without `://` is a path to a SQLite file. SQLite paths are made absolute, so the same
    file always gives the same URL (engine cache, lock file) whatever the working directory later is.
    """
    if url is None:
        url = os.environ.get("LOOPLAB_DB") or DEFAULT_FILE
    text = os.fspath(url).strip()
    if not text:
        raise ConfigError("--db: empty database URL or path (give a SQLite file path or a SQLAlchemy URL)")
    if "://" not in text:
        return "sqlite:///" + str(Path(text).expanduser().absolute())
    scheme, _, rest = text.partition("://")
    if scheme in PG_SCHEMES:  # no driver named: the one installed with looplab
        text = f"{PG_SCHEMES[scheme]}://{rest}"
    try:
        parsed = make_url(text)
        parsed.get_dialect()
    except (ArgumentError, NoSuchModuleError, ValueError) as e:
        raise ConfigError(
            f"--db: {text!r} is not a database URL this installation can open ({e}); "
            "give a SQLite file path, or a URL like sqlite:///path/to/looplab.db or "
            "postgresql+psycopg://user@host/dbname"
        ) from None
    if parsed.get_backend_name() == "sqlite":
        path = _sqlite_path(parsed)
        if path is not None and not Path(path).is_absolute():
            query = text.partition("?")[2]
            return f"{parsed.drivername}:///{Path(path).expanduser().absolute()}" + (
                f"?{query}" if query else ""
            )
    return text


def display_url(url: str) -> str:
    """`url` with any password masked, for messages."""
    return make_url(url).render_as_string(hide_password=True) if "@" in url else url


def _sqlite_path(url: URL) -> str | None:
    """The file of a SQLite URL, or None for an in-memory database."""
    db = url.database
    if not db or db == ":memory:" or db.startswith("file:"):
        return None
    return db


def sqlite_file(url: str | None = None) -> Path | None:
    """The SQLite file behind `url` (resolved), or None when it is not a SQLite file."""
    parsed = make_url(resolve_url(url))
    if parsed.get_backend_name() != "sqlite":
        return None
    path = _sqlite_path(parsed)
    return Path(path) if path else None


# ---------------------------------------------------------------- Alembic


def alembic_config(url: str | None = None, connection=None):
    """An Alembic Config built in code (no alembic.ini), valid from an installed package and any cwd."""
    from alembic.config import Config

    from looplab import migrations

    cfg = Config()
    cfg.set_main_option("script_location", os.path.dirname(migrations.__file__).replace("%", "%%"))
    cfg.set_main_option("file_template", "%%(rev)s")  # versions/<revision id>.py, e.g. 0002_metrics_wall_s.py
    if url is not None:
        cfg.set_main_option("sqlalchemy.url", resolve_url(url).replace("%", "%%"))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


@functools.cache
def _script():
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config())


def head_revision() -> str:
    """The newest revision this looplab knows."""
    return _script().get_current_head()


def known_revisions() -> set[str]:
    """Every revision this looplab knows, oldest to newest (as a set)."""
    return {s.revision for s in _script().walk_revisions()}


def _check_known(rev: str | None, url: str) -> None:
    """Refuse a database stamped by a newer looplab, before anything writes to it."""
    if rev is not None and rev not in known_revisions():
        raise DatabaseError(
            f"database {display_url(url)} at revision {rev}, unknown to this looplab "
            f"(head is {head_revision()}): upgrade looplab (the database was left untouched)"
        )


def _sqlite_ro_connect(path: Path) -> sqlite3.Connection:
    """A read-only sqlite3 connection: `mode=ro`, so opening it cannot create or change the file."""
    conn = sqlite3.connect(
        f"file:{quote(str(path))}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S, check_same_thread=False
    )
    conn.execute("PRAGMA query_only=ON")
    return conn


def _sqlite_revision(path: Path) -> str | None:
    """The revision a SQLite file is stamped at (None: no file, or no looplab version table)."""
    if not path.exists():
        return None
    conn = _sqlite_ro_connect(path)
    try:
        has = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (VERSION_TABLE,)
        ).fetchone()
        if not has:
            return None
        row = conn.execute(f"SELECT version_num FROM {VERSION_TABLE}").fetchone()
        return row[0] if row else None
    except sqlite3.DatabaseError as e:
        raise DatabaseError(f"{path} is not a readable SQLite database ({e})") from None
    finally:
        conn.close()


def _current_revision(eng: Engine) -> str | None:
    """The revision stamped in the database (None: no looplab version table yet)."""
    with eng.connect() as conn:
        return _revision_on(conn)


def _revision_on(conn) -> str | None:
    from sqlalchemy import inspect

    if not inspect(conn).has_table(VERSION_TABLE):
        return None
    return conn.exec_driver_sql(f"SELECT version_num FROM {VERSION_TABLE}").scalar()


def _upgrade(eng: Engine, url: str) -> None:
    """Migrate `eng` to head. On SQLite the caller holds the file lock that makes this exclusive; on
    PostgreSQL a session advisory lock does, so two processes opening a new database at once do not
    both run the initial revision (the second waits, then finds the schema at head)."""
    from alembic import command

    postgres = eng.dialect.name == "postgresql"
    with eng.connect() as conn:
        if postgres:
            conn.exec_driver_sql(f"SELECT pg_advisory_lock({MIGRATION_LOCK_KEY})")
            conn.commit()
        try:
            rev = _revision_on(conn)
            conn.commit()  # end the read's transaction: Alembic begins its own
            _check_known(rev, url)
            if rev == head_revision():
                return  # the common case: nothing to do, and no Alembic start-up cost
            command.upgrade(alembic_config(connection=conn), "head")
            if conn.in_transaction():
                conn.commit()
        finally:
            if postgres:
                if conn.in_transaction():
                    conn.rollback()
                conn.exec_driver_sql(f"SELECT pg_advisory_unlock({MIGRATION_LOCK_KEY})")
                conn.commit()


# ---------------------------------------------------------------- engines


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    """Per-connection settings: WAL (readers never block the writer), FK enforcement, a busy wait."""
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
    cur.execute("PRAGMA synchronous=NORMAL")  # safe with WAL; a commit is not an fsync
    cur.close()


def engine(url: str | None = None) -> Engine:
    """A read-write engine at `url`, migrated to head. One engine per URL per process.

    Raises DatabaseError when the database is stamped at a revision unknown to this looplab.
    """
    return _cached(_engines, url, _open)


def _cached(cache: dict[str, Engine], url: str | None, opener) -> Engine:
    url = resolve_url(url)
    with _lock:
        eng = cache.get(url)
        if eng is None:
            eng = cache[url] = opener(url)
        return eng


def _open(url: str) -> Engine:
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        eng = create_engine(url, pool_pre_ping=True)
        _upgrade(eng, url)
        return eng
    path = _sqlite_path(parsed)
    kwargs: dict = {"connect_args": {"timeout": BUSY_TIMEOUT_S, "check_same_thread": False}}
    if path is None:  # in-memory: one shared connection, or each connection is a new empty database
        from sqlalchemy.pool import StaticPool

        kwargs["poolclass"] = StaticPool
        eng = create_engine(url, **kwargs)
        event.listen(eng, "connect", _sqlite_pragmas)
        _upgrade(eng, url)
        note_local_user(eng)
        return eng
    file = Path(path)
    if not file.parent.is_dir():
        raise ConfigError(f"--db: directory {file.parent} does not exist (for database file {file})")
    from filelock import FileLock, Timeout

    lock = FileLock(str(file) + ".lock")
    try:
        lock.acquire(timeout=300)
    except Timeout:
        raise DatabaseError(
            f"another process has held {lock.lock_file} for 5 minutes (a stuck migration?)"
        ) from None
    try:
        # Read-only look first: a file from a newer looplab must stay byte-for-byte as it is,
        # and even setting journal_mode=WAL on it would change its header.
        _check_known(_sqlite_revision(file), url)
        eng = create_engine(url, **kwargs)
        event.listen(eng, "connect", _sqlite_pragmas)
        try:
            _upgrade(eng, url)
            note_local_user(eng)
        except BaseException:
            eng.dispose()
            raise
    finally:
        lock.release()
    return eng


def note_local_user(eng: Engine) -> None:
    """SQLite: make `local_user` name the operating-system user of this process, whom the audit
    triggers record (revision 0024; a SQLite file is a single-user database). Written only when it
    differs, so opening a file as the same user changes none of its bytes."""
    import getpass

    user = getpass.getuser()
    with eng.connect() as conn:
        if conn.exec_driver_sql("SELECT name FROM local_user WHERE id = 1").scalar() == user:
            return
    with eng.begin() as conn:
        conn.exec_driver_sql("DELETE FROM local_user")
        conn.exec_driver_sql("INSERT INTO local_user (id, name) VALUES (1, ?)", (user,))


def readonly_engine(url: str | None = None) -> Engine:
    """A read-only engine (SQLite `mode=ro` + `PRAGMA query_only=ON`). Never creates or migrates.

    Raises DatabaseError when the file does not exist or its schema is not at head.
    """
    return _cached(_ro_engines, url, _open_readonly)


def _open_readonly(url: str) -> Engine:
    parsed = make_url(url)
    head = head_revision()
    if parsed.get_backend_name() != "sqlite" or _sqlite_path(parsed) is None:
        kwargs: dict = {}
        if parsed.get_backend_name() == "postgresql":  # every transaction of the session read-only
            more = parsed.query.get("options")  # e.g. the dashboard's `-c role=USER` (dashboard/access.py)
            options = "-c default_transaction_read_only=on" + (f" {more}" if isinstance(more, str) else "")
            kwargs["connect_args"] = {"options": options}
        eng = create_engine(url, pool_pre_ping=True, **kwargs)
        rev = _current_revision(eng)
    else:
        file = Path(_sqlite_path(parsed))
        if not file.exists():
            raise DatabaseError(
                f"no database at {file}: run `looplab db upgrade` to create it, "
                "or point --db (or $LOOPLAB_DB) at the right file"
            )
        rev = _sqlite_revision(file)
        eng = create_engine(url, creator=lambda: _sqlite_ro_connect(file))
    if rev != head:
        _check_known(rev, url)
        eng.dispose()
        state = "has no looplab schema" if rev is None else f"is at revision {rev}, behind head {head}"
        raise DatabaseError(f"database {display_url(url)} {state}: run `looplab db upgrade`")
    return eng


def dispose_all() -> None:
    """Close every cached engine (tests; a forked child must not reuse its parent's connections)."""
    with _lock:
        for eng in (*_engines.values(), *_ro_engines.values()):
            eng.dispose()
        _engines.clear()
        _ro_engines.clear()


@contextlib.contextmanager
def session(eng: Engine) -> Iterator[Session]:
    """An ORM Session that commits when the block succeeds and rolls back when it raises.

    `expire_on_commit=False`: objects read or added in the block stay usable after it (their
    attributes are not reloaded from a closed session).
    """
    with Session(eng, expire_on_commit=False) as s:
        try:
            yield s
            s.commit()
        except BaseException:
            s.rollback()
            raise


# ---------------------------------------------------------------- when the database fails

# What an outage is (a state to wait out, not a bug): the server cannot be reached, the disk (or quota)
# is full, the disk failed a write (SQLite's I/O error: a volume gone or full), or another process
# holds the SQLite file locked past the busy timeout.
UNREACHABLE, FULL, DISK, LOCKED = "unreachable", "full", "disk", "locked"
# SQLite result codes (the primary code, the low byte of `sqlite_errorcode`)
_SQLITE_OUTAGES = {
    5: LOCKED,
    6: LOCKED,
    10: DISK,
    13: FULL,
    14: UNREACHABLE,
}  # BUSY, LOCKED, IOERR, FULL, CANTOPEN
# PostgreSQL SQLSTATE classes and codes: 53 insufficient resources (53100 disk_full), 08 connection
# exception, 57P01-57P03 admin/crash shutdown and "cannot connect now"
_PG_OUTAGES = {
    "53": FULL,
    "08": UNREACHABLE,
    "57P01": UNREACHABLE,
    "57P02": UNREACHABLE,
    "57P03": UNREACHABLE,
}


@dataclasses.dataclass(frozen=True)
class Outage:
    """Why the database cannot be used right now: `kind` (UNREACHABLE, FULL, DISK, LOCKED) and the driver's
    own words (`detail`, one line)."""

    kind: str
    detail: str


def outage(error: BaseException) -> Outage | None:
    """The outage `error` (an exception SQLAlchemy raised) stands for, or None when it is something
    else (a bad statement, a constraint, a bug), which waiting would not cure."""
    from sqlalchemy.exc import DBAPIError

    if not isinstance(error, DBAPIError):
        return None
    orig = error.orig
    detail = (str(orig).strip().splitlines() or [type(orig).__name__])[0]
    if isinstance(orig, sqlite3.Error):
        code = getattr(orig, "sqlite_errorcode", None)
        kind = _SQLITE_OUTAGES.get(code & 0xFF) if code is not None else None
        if kind is None and "database or disk is full" in detail:
            kind = FULL
        return Outage(kind, detail) if kind else None
    state = getattr(orig, "sqlstate", None)
    if state is not None:
        kind = _PG_OUTAGES.get(state) or _PG_OUTAGES.get(state[:2])
        return Outage(kind, detail) if kind else None
    # no SQLSTATE: the client could not talk to the server at all (refused, reset, closed, timed out)
    if error.connection_invalidated or type(orig).__name__ in ("OperationalError", "InterfaceError"):
        return Outage(UNREACHABLE, detail)
    return None


class server_epoch(FunctionElement):  # noqa: N801 - used as a SQL function, like sa.func.now
    """The database server's clock, epoch seconds, inside a statement: what heartbeats are stamped with
    and judged by (`recovery.touch`, `recover_stale`, the writer's heartbeats), so a driver whose clock
    is off neither takes live jobs over nor keeps dead ones (one clock: the server's, as MLflow's and
    Optuna's users learnt). SQLite's server is the machine that opens the file."""

    type = Float()
    inherit_cache = True


@compiles(server_epoch)
def _sqlite_epoch(_element, _compiler, **_kw) -> str:
    return "((julianday('now') - 2440587.5) * 86400.0)"


@compiles(server_epoch, "postgresql")
def _pg_epoch(_element, _compiler, **_kw) -> str:
    return "CAST(EXTRACT(EPOCH FROM clock_timestamp()) AS DOUBLE PRECISION)"


def ping(eng: Engine) -> None:
    """One real round trip to the server (`SELECT 1` on a fresh checkout): raises as any statement
    would while it is away. A paused driver that holds nothing to write tries this before it says
    the database is back, instead of concluding so from a write it never made."""
    with eng.connect() as conn:
        conn.execute(text("SELECT 1"))


_PHRASES = {
    UNREACHABLE: "cannot be reached",
    FULL: "is full",
    DISK: "could not be written",
    LOCKED: f"stayed locked by another process for {BUSY_TIMEOUT_S:g} s",
}


def outage_phrase(what: Outage) -> str:
    """What an outage is, to follow "database URL ...": e.g. `is full (database or disk is full)`."""
    return f"{_PHRASES[what.kind]} ({what.detail})"


def describe_error(error: BaseException, url: str) -> str:
    """One line for a person: which database (`url`, password hidden), what failed, what to do."""
    shown = display_url(url)
    what = outage(error)
    if what is None:
        orig = getattr(error, "orig", error)
        first = (str(orig).strip().splitlines() or [""])[0]
        return (
            f"database {shown} refused the command: {type(orig).__name__}: {first} (-v shows the traceback)"
        )
    file = sqlite_file(url) if url.startswith("sqlite") else None
    volume = f"the volume of {file.parent}" if file else "the server's data volume"
    advice = {
        UNREACHABLE: "start the server or check the address (--db or $LOOPLAB_DB)",
        FULL: f"free space on {volume} (or raise its quota), then run the command again",
        DISK: f"check that {volume} is mounted and not full",
        LOCKED: "run the command again when the process writing it is done",
    }[what.kind]
    paused = "" if what.kind == LOCKED else "; a running `looplab run` pauses and resumes by itself"
    return f"database {shown} {outage_phrase(what)}: {advice}{paused}"


# ---------------------------------------------------------------- CLI


# ---------------------------------------------------------------- a read-only PostgreSQL role

ROLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


def reader_role_sql(role: str, database: str) -> list[str]:
    """The statements that let `role` read every table and view of `database` and write nothing.

    For people who query the results with their own tools (psql, a notebook): the role has SELECT and
    nothing else, and its sessions start read-only. `ALTER DEFAULT PRIVILEGES` covers what the running
    role creates later (the views are re-created by every upgrade), so run this as the role that
    migrates the database (the one `looplab run` connects as). Creating the role needs CREATEROLE; give
    it a password yourself (`ALTER ROLE name PASSWORD '...'`)."""
    if not isinstance(role, str) or not ROLE_NAME.fullmatch(role):
        raise ConfigError(
            f"ROLE: expected a PostgreSQL role name (letters, digits, _; not starting "
            f"with a digit; at most 63 characters), got {role!r}"
        )
    ident = f'"{role}"'
    db_ident = '"' + database.replace('"', '""') + '"'
    return [
        f"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{role}') THEN "
        f"CREATE ROLE {ident} LOGIN; END IF; END $$",
        f"GRANT CONNECT ON DATABASE {db_ident} TO {ident}",
        f"GRANT USAGE ON SCHEMA public TO {ident}",
        f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {ident}",  # tables and views
        f"ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO {ident}",
        f"ALTER ROLE {ident} SET default_transaction_read_only = on",
    ]


def run_role_sql(url: str | None, command: str, sqlite_note: str, make_sql) -> list[str]:
    """Run the role statements `make_sql(database name)` on the PostgreSQL database at `url` (migrated
    first), in one transaction; return them. Roles are a server feature: any other database is refused
    naming --db, `command` and `sqlite_note` (what a SQLite file offers instead)."""
    url = resolve_url(url)
    parsed = make_url(url)
    if parsed.get_backend_name() != "postgresql":
        raise ConfigError(
            f"--db: {command} needs a PostgreSQL database (roles are a server feature), got "
            f"{display_url(url)}; {sqlite_note}"
        )
    statements = make_sql(parsed.database or "")
    with engine(url).begin() as conn:
        for statement in statements:
            conn.exec_driver_sql(statement)
    return statements


def grant_reader(url: str | None, role: str) -> list[str]:
    """Run `reader_role_sql` on the PostgreSQL database at `url` (`run_role_sql`); return the statements."""
    note = "a SQLite file is read-only through `looplab sql` and the dashboard already"
    return run_role_sql(url, "grant-reader", note, lambda database: reader_role_sql(role, database))


def cli_db(args) -> int:
    """`looplab db upgrade` (create or migrate to head), `looplab db current` (report, change nothing),
    `looplab db grant-reader ROLE` (PostgreSQL: a role that can read everything and write nothing)."""
    url = resolve_url(args.db)
    shown = display_url(url)
    head = head_revision()
    if args.action == "grant-reader":
        if not getattr(args, "role", None):
            raise ConfigError("ROLE: `looplab db grant-reader ROLE` needs the name of the role to create")
        grant_reader(url, args.role)
        print(f"role {args.role} can now read {shown} and write nothing (sessions start read-only)")
        return 0
    if getattr(args, "role", None):
        raise ConfigError(
            f"ROLE: only `looplab db grant` and `grant-reader` take a role, not `db {args.action}`"
        )
    if args.action == "upgrade":
        eng = engine(url)
        print(f"database {shown} at revision {_current_revision(eng)} (head)")
        return 0
    file = sqlite_file(url)
    if file is not None:
        if not file.exists():
            print(f"no database at {file}: run `looplab db upgrade` to create it")
            return 1
        rev = _sqlite_revision(file)
    else:
        eng = create_engine(url)
        try:
            rev = _current_revision(eng)
        finally:
            eng.dispose()
    if rev == head:
        print(f"database {shown} at revision {rev} (head)")
        return 0
    if rev is None:
        print(f"database {shown} has no looplab schema: run `looplab db upgrade`")
        return 1
    _check_known(rev, url)
    print(f"database {shown} at revision {rev}, behind head {head}: run `looplab db upgrade`")
    return 1
