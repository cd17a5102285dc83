"""The first release's tables, as it created them (saga_schema_version 1)."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None

_ACTIVE = sa.text("status IN ('running', 'compensating')")


def upgrade() -> None:
    """Create the first release's tables, indexes and schema version."""
    _instances()
    op.create_table(
        "saga_steps",
        sa.Column("saga_id", sa.String(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("transactional", sa.Boolean(), nullable=False),
        *(sa.Column(name, sa.String()) for name in ("action_ref", "compensation_ref", "args")),
        *(sa.Column(name, sa.String()) for name in ("input_digest", "result", "output_digest")),
        sa.Column("error", sa.String()),
        sa.Column("undo_attempt", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.Float()),
        sa.Column("finished_at", sa.Float()),
        sa.PrimaryKeyConstraint("saga_id", "seq"),
        sa.UniqueConstraint("saga_id", "name", name="uq_saga_steps_saga_name"),
    )
    op.create_table(
        "saga_events",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True),
        sa.Column("saga_id", sa.String(), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("step", sa.String()),
        sa.Column("attempt", sa.Integer()),
        sa.Column("epoch", sa.Integer()),
        sa.Column("detail", sa.String()),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_saga_events_saga", "saga_events", ["saga_id", "id"])
    legacy = op.create_table(
        "saga_schema_version",
        sa.Column("version", sa.Integer(), autoincrement=False),
        sa.PrimaryKeyConstraint("version"),
    )
    op.bulk_insert(legacy, [{"version": 1}])


def _instances() -> None:
    op.create_table(
        "saga_instances",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("key", sa.String()),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("status", sa.String(), nullable=False),
        *(sa.Column(name, sa.String()) for name in ("input", "version", "owner")),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("lease_expires_at", sa.Float()),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.Column("error", sa.String()),
        sa.Column("deadline", sa.Float()),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.Column("commit_token", sa.String()),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name", "key", name="uq_saga_instances_name_key"),
    )
    op.create_index("ix_saga_instances_created", "saga_instances", ["created_at", "id"])
    op.create_index("ix_saga_instances_status_created", "saga_instances", ["status", "created_at"])
    op.create_index("ix_saga_instances_name_created", "saga_instances", ["name", "created_at"])
    # Only unfinished sagas are indexed: the stuck-saga scan costs the same with a
    # million finished sagas as with none.
    op.create_index(
        "ix_saga_instances_active_lease",
        "saga_instances",
        ["lease_expires_at"],
        postgresql_where=_ACTIVE,
        sqlite_where=_ACTIVE,
    )


def downgrade() -> None:
    """Refused: below the first revision there is nothing but data loss."""
    raise NotImplementedError(
        "the first revision is not reversed: drop saga's tables yourself if you mean it"
    )
