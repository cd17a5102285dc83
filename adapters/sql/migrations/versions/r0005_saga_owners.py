"""How a claimer tells that an owner died (saga_schema_version 5).

- ``saga_owners``: one row per coordinator that has held a saga, keyed by its owner
  id. On PostgreSQL it names the owner's liveness session (backend pid and start, and
  the server's start, and since when a claimer suspects that session gone); on SQLite
  the owner's process (host, pid and process start).
  A claim may take a saga whose owner is known dead without waiting for its lease
  (see adapters/sql/liveness.py). Nothing to fill in: a saga whose owner has no row
  waits for its lease, as before.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels: str | None = None
depends_on: str | None = None

_LEGACY = sa.table("saga_schema_version", sa.column("version", sa.Integer()))


def upgrade() -> None:
    """Create saga_owners (empty)."""
    op.create_table(
        "saga_owners",
        sa.Column("owner", sa.String(), primary_key=True),
        sa.Column("host", sa.String()),
        sa.Column("pid", sa.Integer()),
        sa.Column("process_start", sa.String()),
        sa.Column("backend_pid", sa.Integer()),
        sa.Column("backend_start", sa.Float()),
        sa.Column("server_start", sa.Float()),
        sa.Column("registered_at", sa.Float(), nullable=False),
        sa.Column("suspected_at", sa.Float()),
    )
    op.execute(_LEGACY.insert().values(version=5))


def downgrade() -> None:
    """Back to revision 0004's shape: sagas wait for their leases again."""
    op.drop_table("saga_owners")
    op.execute(_LEGACY.delete().where(_LEGACY.c.version == 5))
