"""The views show ISO times, the grid of every listed run and `recipe` in `decode`: re-create them.

Revision ID: 0023_view_times_and_grid
Revises: 0022_database_identity
Create Date: 2026-12-05

No table changes. The views are not versioned (migrations/env.py drops them before the revisions run
and creates them from orchestrator/views.py when the run ends at head), but a database already at head
runs no revision, so the new view definitions (issue 53: `runs` shows `created`/`finished` as ISO 8601
UTC text beside the epoch columns; `curves`, `depth`, `decode` and every follow-up view carry `grid`;
`decode` names the recipe `recipe`, keeping `arch`) would reach it only with the next table change.
This empty revision is that change: upgrading to it re-creates the views. Downgrade changes no table
either; below head the views are dropped, as for every revision.
"""

from collections.abc import Sequence

revision: str = "0023_view_times_and_grid"
down_revision: str | Sequence[str] | None = "0022_database_identity"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Nothing on the tables: env.py re-creates the views once the database is at this head."""


def downgrade() -> None:
    """Nothing on the tables: the views of the head below are re-created when it is upgraded again."""
