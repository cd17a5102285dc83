"""Saga versions side by side, and lighter indexes (saga_schema_version 3).

- ``saga_instances.fingerprint``: a digest of the definition an instance started with
  (step names, order, dependencies, kinds); ``version`` now holds the definition's
  declared version number. Rows written before keep their fingerprint in ``version``.
- The unique index on ``saga_steps (saga_id, name)`` goes: the primary key serves every
  lookup, and step names are kept distinct by the code that names them (a definition
  is validated; a context-manager saga numbers repeated names).
- PostgreSQL: the events' ``(saga_id, id)`` index becomes their primary key. SQLite keeps
  its rowid key (its index on saga_id already carries the rowid).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels: str | None = None
depends_on: str | None = None

_LEGACY = sa.table("saga_schema_version", sa.column("version", sa.Integer()))


def upgrade() -> None:
    """Add the fingerprint column; drop the step-name index; re-key events on PostgreSQL."""
    op.add_column("saga_instances", sa.Column("fingerprint", sa.String()))
    # SQLite rebuilds the table; from a stated shape, so --sql needs no live database.
    with op.batch_alter_table("saga_steps", copy_from=_steps(unique=True)) as batch:
        batch.drop_constraint("uq_saga_steps_saga_name", type_="unique")
    if op.get_context().dialect.name == "postgresql":
        op.drop_index("ix_saga_events_saga", table_name="saga_events")
        op.drop_constraint("saga_events_pkey", "saga_events", type_="primary")
        op.create_primary_key("saga_events_pkey", "saga_events", ["saga_id", "id"])
    op.execute(_LEGACY.insert().values(version=3))


def downgrade() -> None:
    """Back to revision 0002's shape; fingerprints are dropped (0002 never reads them)."""
    if op.get_context().dialect.name == "postgresql":
        op.drop_constraint("saga_events_pkey", "saga_events", type_="primary")
        op.create_primary_key("saga_events_pkey", "saga_events", ["id"])
        op.create_index("ix_saga_events_saga", "saga_events", ["saga_id", "id"])
    with op.batch_alter_table("saga_steps", copy_from=_steps(unique=False)) as batch:
        batch.create_unique_constraint("uq_saga_steps_saga_name", ["saga_id", "name"])
    op.drop_column("saga_instances", "fingerprint")  # SQLite >= 3.35 drops it in place
    op.execute(_LEGACY.delete().where(_LEGACY.c.version == 3))


def _steps(*, unique: bool) -> sa.Table:
    """saga_steps as revision 0002 left it (``unique``) or as this one leaves it."""
    names = {"name", "status", "kind"}
    counts = {"attempt", "undo_attempt"}
    texts = "action_ref compensation_ref args input_digest result output_digest error"
    key = [sa.UniqueConstraint("saga_id", "name", name="uq_saga_steps_saga_name")]
    return sa.Table(
        "saga_steps",
        sa.MetaData(),
        sa.Column("saga_id", sa.String(), primary_key=True),
        sa.Column("seq", sa.Integer(), primary_key=True, autoincrement=False),
        *(sa.Column(name, sa.String(), nullable=False) for name in sorted(names)),
        *(sa.Column(name, sa.Integer(), nullable=False) for name in sorted(counts)),
        sa.Column("transactional", sa.Boolean(), nullable=False),
        *(sa.Column(name, sa.String()) for name in texts.split()),
        sa.Column("started_at", sa.Float()),
        sa.Column("finished_at", sa.Float()),
        sa.Column("commit_token", sa.String()),
        *(key if unique else []),
    )
