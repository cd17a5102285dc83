"""A step's start and success events folded into its row (saga_schema_version 6).

- ``saga_steps.started_event``, ``saga_steps.finished_event``: the ids a step's
  ``step_started`` and ``step_succeeded`` events hold in the saga's history, when the
  step row says all the event would (PostgreSQL's writer folds them: two fewer event
  rows and index entries per step); ``saga_steps.fold_epoch``: the epoch they were
  written at. The history reads them back in place (see adapters/sql/folding.py).
  Nothing to fill in: the events written before stay rows of ``saga_events``.

Downgrading writes the folded events back as rows, with their ids, so that revision
0005's history has every event in its place.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels: str | None = None
depends_on: str | None = None

_LEGACY = sa.table("saga_schema_version", sa.column("version", sa.Integer()))
_STEPS = sa.table(
    "saga_steps",
    sa.column("saga_id", sa.String()),
    sa.column("name", sa.String()),
    sa.column("attempt", sa.Integer()),
    sa.column("started_at", sa.Float()),
    sa.column("finished_at", sa.Float()),
    sa.column("started_event", sa.BigInteger()),
    sa.column("finished_event", sa.BigInteger()),
    sa.column("fold_epoch", sa.Integer()),
)
_EVENTS = sa.table(
    "saga_events",
    *(sa.column(name) for name in ("id", "saga_id", "at", "kind", "step", "attempt", "epoch")),
)


def upgrade() -> None:
    """Add the three columns (nullable: nothing to fill in)."""
    op.add_column("saga_steps", sa.Column("started_event", sa.BigInteger()))
    op.add_column("saga_steps", sa.Column("finished_event", sa.BigInteger()))
    op.add_column("saga_steps", sa.Column("fold_epoch", sa.Integer()))
    op.execute(_LEGACY.insert().values(version=6))


def downgrade() -> None:
    """Back to revision 0005's shape: the folded events become rows again first."""
    s = _STEPS.c
    for id_column, at_column, kind in (
        (s.started_event, s.started_at, "step_started"),
        (s.finished_event, s.finished_at, "step_succeeded"),
    ):
        folded = sa.select(
            id_column, s.saga_id, at_column, sa.literal(kind), s.name, s.attempt, s.fold_epoch
        ).where(id_column.is_not(None))
        op.execute(_EVENTS.insert().from_select(list(_EVENTS.c), folded))
    for name in ("fold_epoch", "finished_event", "started_event"):
        op.drop_column("saga_steps", name)  # SQLite >= 3.35 drops it in place
    op.execute(_LEGACY.delete().where(_LEGACY.c.version == 6))
