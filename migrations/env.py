"""Alembic environment for the looplab results database.

There is no alembic.ini: `orchestrator.db.alembic_config()` builds the Config in code, pointing
`script_location` at this package, so migrations run from an installed package and from any working
directory. The caller usually hands over an open connection in `config.attributes["connection"]`
(that is how `orchestrator.db.engine()` migrates under its file lock); otherwise the URL in the
`sqlalchemy.url` option is opened here.

Choices, and why:
- the version table is ours (`looplab_alembic_version`), so looplab can share a database file with
  other Alembic-managed tools without either one reading the other's revision;
- `render_as_batch` on SQLite, whose ALTER TABLE cannot change columns or constraints in place;
- foreign keys are switched off on SQLite while migrating: a batch migration recreates a table by
  copy + DROP, and with `foreign_keys=ON` that DROP would cascade-delete every child row
  (`ON DELETE CASCADE`). They are checked (`PRAGMA foreign_key_check`) and switched back on after;
- the views are not versioned (they hold no data): every run drops them before the revisions run
  (SQLite will not drop or rebuild a column a view reads) and, when it ends at head, creates them from
  `orchestrator/views.py`, their one definition. Revision 0003's downgrade restores 0001's views.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, create_engine, pool

from looplab.orchestrator.db import VERSION_TABLE
from looplab.orchestrator.schema import Base
from looplab.orchestrator.views import create_views, drop_views

config = context.config
target_metadata = Base.metadata


def include_name(name: str | None, type_: str, parent_names: dict) -> bool:
    """Autogenerate compares only our tables: not the views, not other tools' tables."""
    if type_ == "table":
        return name in target_metadata.tables
    return True


def _configure(**kw) -> None:
    context.configure(
        target_metadata=target_metadata,
        version_table=VERSION_TABLE,
        compare_type=True,
        include_name=include_name,
        **kw,
    )


def run_offline() -> None:
    """`alembic upgrade --sql`: print the DDL instead of running it."""
    url = config.get_main_option("sqlalchemy.url")
    _configure(url=url, literal_binds=True, render_as_batch=url.startswith("sqlite"))
    with context.begin_transaction():
        context.run_migrations()


def _migrate(connection: Connection) -> None:
    """Run the revisions, with the views dropped around them and re-created at head."""
    with context.begin_transaction():
        drop_views(connection)
        context.run_migrations()
        if context.get_context().get_current_revision() == context.script.get_current_head():
            create_views(connection)


def _run_on(connection: Connection) -> None:
    if connection.dialect.name != "sqlite":
        _configure(connection=connection)
        _migrate(connection)
        return
    # PRAGMA foreign_keys is a no-op inside a transaction: end any open one first.
    if connection.in_transaction():
        connection.commit()
    connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
    try:
        # SQLite can roll DDL back, but the driver never opens a transaction for it: open one
        # ourselves, so a failed upgrade leaves the database at its old revision, not half-built.
        connection.exec_driver_sql("BEGIN IMMEDIATE")
        _configure(connection=connection, render_as_batch=True, transactional_ddl=True)
        _migrate(connection)
        broken = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
        if broken:
            raise RuntimeError(f"migration left rows with dangling foreign keys: {broken[:5]}")
        connection.commit()
    except BaseException:
        connection.rollback()
        raise
    finally:
        connection.exec_driver_sql("PRAGMA foreign_keys=ON")


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run_on(connection)
        return
    eng = create_engine(config.get_main_option("sqlalchemy.url"), poolclass=pool.NullPool)
    with eng.connect() as connection:
        _run_on(connection)
        connection.commit()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
