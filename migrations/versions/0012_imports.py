"""Jobs say where an imported model came from.

Revision ID: 0012_imports
Revises: 0011_retention
Create Date: 2027-01-20

- `jobs.imported_from`: SOURCE@REVISION of the model an import job brought in (workers/importer.py:
  `hf:ORG/NAME@<commit>`, or a local directory and `sha256:` of its config and weights), copied to the
  follow-ups about it; NULL for models trained here and for every job stored before this revision.

Nothing is back-filled: no import existed before. The views are re-created at head by
migrations/env.py (the `runs` view shows import jobs and this column).

Downgrade drops the column with ALTER TABLE ... DROP COLUMN (SQLite 3.35 or later, PostgreSQL).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012_imports"
down_revision: str | Sequence[str] | None = "0011_retention"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("imported_from", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("jobs", "imported_from")
