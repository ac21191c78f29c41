"""A throw-away PostgreSQL server for the tests: one cluster per test session, on a temp dir.

    start_server()            PgServer, or raises PgUnavailable saying why (no binaries, initdb failed...)
    start_server(password=P)  the same with password authentication (scram-sha-256) for every TCP client:
                              the superuser's password is P; roles log in only with their own password
    server.url(name)          postgresql+psycopg:// URL of database `name` on it
    server.create_database(name, template=None) / server.drop_database(name)
    server.stop()             stop the server and delete its directory
    Databases(backend, directory, server)   fresh databases of one backend, removed by close()
    snapshot(url)             what "the database did not change" compares, on either backend

Why it is built this way: CI installs Debian's `postgresql` package, which brings the binaries but no
running cluster we may use; `initdb` on a temp dir with trust auth and fsync off gives a server in about a
second, and nothing of it survives the session. `initdb` refuses to run as root, so as root the cluster
belongs to the `postgres` system user (the package creates it) and every server command runs as that user.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

BACKENDS = ["sqlite", "postgresql"]  # the ids of the tests' database parametrisation
PG_TEMPLATE = "looplab_template"  # a database migrated to head once per session, copied per test
SUPERUSER = "postgres"
START_TIMEOUT_S = 60
# fsync and the like off: a test cluster is thrown away, its durability buys nothing
SERVER_SETTINGS = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "shared_buffers": "64MB",
    "max_connections": "200",
    "listen_addresses": "127.0.0.1",
}


class PgUnavailable(RuntimeError):
    """No PostgreSQL server could be started here (the reason is the message)."""


def find_binary(name: str) -> str | None:
    """`name` (initdb, pg_ctl) on PATH, else in the newest /usr/lib/postgresql/<version>/bin."""
    found = shutil.which(name)
    if found:
        return found
    candidates = glob.glob(f"/usr/lib/postgresql/*/bin/{name}")
    candidates.sort(key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    return candidates[-1] if candidates else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _as_server_user(argv: list[str]) -> list[str]:
    """`argv` run as the cluster's owner: the `postgres` user when we are root, else ourselves."""
    if os.geteuid() != 0:
        return argv
    runuser = shutil.which("runuser")
    if runuser:
        return [runuser, "-u", SUPERUSER, "--", *argv]
    return ["su", SUPERUSER, "-s", "/bin/sh", "-c", " ".join(f"'{a}'" for a in argv)]


@dataclass
class PgServer:
    """A running cluster: its directory, TCP port and unix socket directory."""

    base: Path
    port: int
    pg_ctl: str
    template_ready: bool = False  # the tests' migrated template database exists (tests/conftest.py)
    password: str | None = None  # the superuser's, on a password-authenticated server

    @property
    def data_dir(self) -> Path:
        return self.base / "data"

    @property
    def socket_dir(self) -> Path:
        return self.base / "sock"

    def url(self, name: str = "postgres", user: str = SUPERUSER, password: str | None = None) -> str:
        """The SQLAlchemy URL of database `name` (psycopg 3 driver, TCP on localhost) for `user`; the
        superuser's carries the server's password when it has one."""
        secret = password if user != SUPERUSER else self.password
        login = f"{user}:{secret}" if secret else user
        return f"postgresql+psycopg://{login}@127.0.0.1:{self.port}/{name}"

    def _admin(self):
        """An autocommit psycopg connection to the `postgres` database (CREATE/DROP DATABASE)."""
        import psycopg

        return psycopg.connect(
            host="127.0.0.1",
            port=self.port,
            user=SUPERUSER,
            password=self.password,
            dbname="postgres",
            autocommit=True,
        )

    def execute(self, sql: str) -> None:
        """Run one administrative statement on the `postgres` database."""
        with self._admin() as conn:
            conn.execute(sql)

    def create_database(self, name: str, template: str | None = None) -> str:
        """Create database `name` (a copy of `template` when given); return its URL."""
        clause = f" TEMPLATE {template}" if template else ""
        self.execute(f'CREATE DATABASE "{name}"{clause}')
        return self.url(name)

    def drop_database(self, name: str) -> None:
        """Drop database `name` if it exists, terminating any connection still open to it."""
        self.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def stop(self) -> None:
        """Stop the server (fast shutdown) and delete its directory."""
        subprocess.run(
            _as_server_user([self.pg_ctl, "stop", "-D", str(self.data_dir), "-m", "immediate", "-w"]),
            capture_output=True,
            timeout=60,
        )
        shutil.rmtree(self.base, ignore_errors=True)


def start_server(password: str | None = None) -> PgServer:
    """initdb a temp dir and start a server on a free port; raises PgUnavailable saying why not.
    `password`: TCP clients authenticate with scram-sha-256 (the superuser with this password), so a
    client cannot claim a role it has no password for (trust auth lets it claim any)."""
    initdb, pg_ctl = find_binary("initdb"), find_binary("pg_ctl")
    if not initdb or not pg_ctl:
        raise PgUnavailable("initdb/pg_ctl not found (apt-get install -y postgresql)")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        raise PgUnavailable("psycopg is not installed (pip install 'psycopg[binary]')") from None
    # Not under pytest's tmp dir: its parents are private to root, and the server runs as `postgres`.
    base = Path(tempfile.mkdtemp(prefix="looplab-pg-"))
    base.chmod(0o755)
    (base / "sock").mkdir()
    if os.geteuid() == 0:
        try:
            shutil.chown(base, SUPERUSER, SUPERUSER)
            shutil.chown(base / "sock", SUPERUSER, SUPERUSER)
        except (LookupError, PermissionError) as e:
            shutil.rmtree(base, ignore_errors=True)
            raise PgUnavailable(f"cannot hand {base} to the {SUPERUSER} user ({e})") from None
    data = base / "data"
    auth = ["-A", "trust"]
    if password is not None:
        pwfile = base / "pwfile"
        pwfile.write_text(password + "\n")
        if os.geteuid() == 0:
            shutil.chown(pwfile, SUPERUSER, SUPERUSER)
        auth = ["--auth-local=trust", "--auth-host=scram-sha-256", f"--pwfile={pwfile}"]
    init = subprocess.run(
        _as_server_user([initdb, "-D", str(data), "-U", SUPERUSER, *auth, "-E", "UTF8", "--no-sync"]),
        capture_output=True,
        text=True,
        timeout=120,
    )
    if init.returncode != 0:
        shutil.rmtree(base, ignore_errors=True)
        raise PgUnavailable(f"initdb failed: {(init.stderr or init.stdout).strip()[-500:]}")
    error = ""
    for _attempt in range(3):  # a free port can be taken between choosing it and binding it
        port = _free_port()
        options = " ".join(
            [f"-p {port}", f"-k {base / 'sock'}", *(f"-c {k}={v}" for k, v in SERVER_SETTINGS.items())]
        )
        argv = [pg_ctl, "start", "-D", str(data), "-l", str(base / "server.log"), "-w", "-o", options]
        started = subprocess.run(
            _as_server_user([*argv, "-t", str(START_TIMEOUT_S)]),
            capture_output=True,
            text=True,
            timeout=START_TIMEOUT_S + 10,
        )
        if started.returncode == 0:
            server = PgServer(base=base, port=port, pg_ctl=pg_ctl, password=password)
            _wait_ready(server)
            return server
        log = base / "server.log"
        error = (log.read_text()[-500:] if log.exists() else "") or started.stderr
    shutil.rmtree(base, ignore_errors=True)
    raise PgUnavailable(f"pg_ctl start failed: {error.strip()}")


def _wait_ready(server: PgServer) -> None:
    """Wait until the server accepts a connection (pg_ctl -w already waits; this guards the edge)."""
    import psycopg

    deadline = time.time() + START_TIMEOUT_S
    while True:
        try:
            server.execute("SELECT 1")
            return
        except psycopg.OperationalError:
            if time.time() > deadline:
                raise
            time.sleep(0.2)


# ---------------------------------------------------------------- fresh databases

_db_numbers = itertools.count(1)


class Databases:
    """Fresh databases of one backend ("sqlite" or "postgresql"): SQLite files under `directory`, or
    databases on `server` (a PgServer); `close()` closes every cached engine and drops what it made.
    `sqlite_template`: a callable giving a migrated SQLite file to copy for `new(migrated=True)`."""

    def __init__(self, backend: str, directory: Path, server: PgServer | None, sqlite_template=None):
        self.backend, self.tmp_path, self.server = backend, directory, server
        self.sqlite_template = sqlite_template
        self.pg_names: list[str] = []

    def new(self, migrated: bool = False) -> str:
        number = next(_db_numbers)
        if self.backend == "sqlite":
            path = self.tmp_path / f"looplab_{number}.db"
            if migrated and self.sqlite_template is not None:
                shutil.copyfile(self.sqlite_template(), path)
            elif migrated:
                from looplab.orchestrator.db import engine

                engine(f"sqlite:///{path}")
            return f"sqlite:///{path}"
        name = f"looplab_test_{number}"
        self.pg_names.append(name)
        if migrated:
            _pg_template(self.server)
        return self.server.create_database(name, template=PG_TEMPLATE if migrated else None)

    def close(self) -> None:
        from looplab.orchestrator.db import dispose_all

        dispose_all()  # engines are cached per URL: close their connections before the drop
        for name in self.pg_names:
            self.server.drop_database(name)


def _pg_template(server) -> None:
    """Create and migrate the session's template database once (CREATE DATABASE ... TEMPLATE copies it)."""
    if server.template_ready:
        return
    from alembic import command

    from looplab.orchestrator.db import alembic_config

    server.drop_database(PG_TEMPLATE)
    # Alembic on its own connection, closed after: a template must have none open while it is copied
    command.upgrade(alembic_config(server.create_database(PG_TEMPLATE)), "head")
    server.template_ready = True


def snapshot(url: str) -> object:
    """What "the database did not change" means: SQLite, the file's bytes; PostgreSQL (no file of its
    own), every table's and view's name and every table's rows."""
    import hashlib

    import sqlalchemy as sa
    from sqlalchemy.pool import NullPool

    parsed = sa.make_url(url)
    if parsed.get_backend_name() == "sqlite":  # sha256 of the file and its WAL (if any)
        path = Path(parsed.database)
        digest = hashlib.sha256(path.read_bytes())
        wal = path.with_name(path.name + "-wal")
        if wal.exists():
            digest.update(wal.read_bytes())
        return digest.hexdigest()
    raw = sa.create_engine(url, poolclass=NullPool)
    try:
        insp = sa.inspect(raw)
        tables = sorted(insp.get_table_names())
        with raw.connect() as conn:
            rows = {
                t: sorted(map(tuple, conn.exec_driver_sql(f'SELECT * FROM "{t}"').all()), key=repr)
                for t in tables
            }
        return tables, sorted(insp.get_view_names()), rows
    finally:
        raw.dispose()


def lab_database(server: PgServer, roles: dict[str, tuple[str, str]], kinds) -> dict[str, str]:
    """A database `lab` on a password-authenticated `server`, migrated by its superuser (the tables'
    owner), with each of `roles` (name -> (kind, password)) made by `looplab db grant NAME --as KIND`
    as a lab's administrator would, its password set. The URL of each role, and the superuser's as
    "postgres"."""
    from looplab import Queue
    from looplab.lab.cli import main

    admin_url = server.create_database("lab")
    Queue(db=admin_url, kinds=kinds)
    for role, (kind, _) in roles.items():
        assert main(["--db", admin_url, "db", "grant", role, "--as", kind]) == 0
        server.execute(f"ALTER ROLE {role} PASSWORD '{roles[role][1]}'")
    urls = {role: server.url("lab", user=role, password=pw) for role, (_, pw) in roles.items()}
    return {**urls, "postgres": admin_url}


@contextlib.contextmanager
def password_server(password: str) -> Iterator[PgServer]:
    """`start_server(password=...)` for a module's fixture: skips the tests when no server can start
    here (saying why); closes every cached engine and stops the server afterwards."""
    import pytest

    from looplab.orchestrator.db import dispose_all

    try:
        server = start_server(password=password)
    except PgUnavailable as e:
        pytest.skip(f"no PostgreSQL server here: {e}")
    try:
        yield server
    finally:
        dispose_all()
        server.stop()
