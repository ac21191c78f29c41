"""Alembic environment and revisions of the looplab results database.

No alembic.ini: `orchestrator.db.alembic_config()` builds the Config in code with this package's
directory as `script_location`, so it works from an installed package and from any directory.
Every schema change is a new revision in `versions/`; a released revision never changes.

Adding a revision: change `orchestrator/schema.py`, then autogenerate against a database at head:

    looplab --db /tmp/dev.db db upgrade
    python -c "from alembic import command; from looplab.orchestrator.db import alembic_config; \\
        command.revision(alembic_config('/tmp/dev.db'), message='what changed', \\
                         rev_id='0004_what_changed', autogenerate=True)"

then read and tidy the generated `versions/0004_what_changed.py` (views are plain SQL written by
hand), and run `pytest tests/db`: the no-drift and data-survives-upgrade tests cover it.
"""
