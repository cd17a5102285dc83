"""saga_steps.commit_token: the token of the commit that last wrote the row, so that a
retry after a lost acknowledgement recognises its own commit even when a sibling
step's commit has overwritten the saga row's token since (saga_schema_version 2)."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels: str | None = None
depends_on: str | None = None

_LEGACY = sa.table("saga_schema_version", sa.column("version", sa.Integer()))


def upgrade() -> None:
    """Add the column (null on rows written before it: nothing to backfill)."""
    op.add_column("saga_steps", sa.Column("commit_token", sa.String()))
    op.execute(_LEGACY.insert().values(version=2))


def downgrade() -> None:
    """Drop the column; the first release never reads it."""
    op.drop_column("saga_steps", "commit_token")  # SQLite >= 3.35 drops it in place
    op.execute(_LEGACY.delete().where(_LEGACY.c.version == 2))
