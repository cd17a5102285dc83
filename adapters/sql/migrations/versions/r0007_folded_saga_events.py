"""A saga's start and completion events folded into its row (saga_schema_version 7).

- ``saga_instances.started_event``, ``saga_instances.finished_event``: the ids the
  saga's ``saga_started`` and ``saga_completed`` events hold in its history, when its
  row says all the event would (PostgreSQL's writer folds them: a finished saga keeps
  no event row at all on the happy path); ``started_module``: the module the start
  names, ``finished_at``: the completion's time. The history reads them back in place
  (see adapters/sql/folding.py). Nothing to fill in: the events written before stay
  rows of ``saga_events``.

Downgrading writes the folded events back as rows, with their ids, so that revision
0006's history has every event in its place.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels: str | None = None
depends_on: str | None = None

_LEGACY = sa.table("saga_schema_version", sa.column("version", sa.Integer()))
_INSTANCES = sa.table(
    "saga_instances",
    sa.column("id", sa.String()),
    sa.column("epoch", sa.Integer()),
    sa.column("created_at", sa.Float()),
    sa.column("started_event", sa.BigInteger()),
    sa.column("started_module", sa.String()),
    sa.column("finished_event", sa.BigInteger()),
    sa.column("finished_at", sa.Float()),
)
_EVENTS = sa.table(
    "saga_events",
    *(sa.column(name) for name in ("id", "saga_id", "at", "kind", "epoch", "detail")),
)
_COLUMNS = (
    sa.Column("started_event", sa.BigInteger()),
    sa.Column("started_module", sa.String()),
    sa.Column("finished_event", sa.BigInteger()),
    sa.Column("finished_at", sa.Float()),
)


def upgrade() -> None:
    """Add the four columns (nullable: nothing to fill in)."""
    for column in _COLUMNS:
        op.add_column("saga_instances", column)
    op.execute(_LEGACY.insert().values(version=7))


def downgrade() -> None:
    """Back to revision 0006's shape: the folded events become rows again first (a
    start's detail as the writer's JSON: the module is a plain dotted name)."""
    i = _INSTANCES.c
    module = i.started_module
    detail = sa.case(
        (module.is_(None), sa.null()), else_=sa.literal('{"module": "') + module + '"}'
    )
    for folded in (
        sa.select(
            i.started_event, i.id, i.created_at, sa.literal("saga_started"), sa.literal(1), detail
        ).where(i.started_event.is_not(None)),
        sa.select(i.finished_event, i.id, i.finished_at, sa.literal("saga_completed"), i.epoch)
        .add_columns(sa.null())
        .where(i.finished_event.is_not(None)),
    ):
        op.execute(_EVENTS.insert().from_select(list(_EVENTS.c), folded))
    for column in reversed(_COLUMNS):
        op.drop_column("saga_instances", column.name)  # SQLite >= 3.35 drops it in place
    op.execute(_LEGACY.delete().where(_LEGACY.c.version == 7))
