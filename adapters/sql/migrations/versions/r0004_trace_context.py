"""The trace context a saga started in (saga_schema_version 4).

- ``saga_instances.trace_context``: the W3C trace-context headers (``traceparent``
  and, if any, ``tracestate``) of the span a saga's run started, as a JSON object;
  written once, at creation, and only when a tracing listener is installed. A
  process that recovers the saga continues that trace. Rows written before have none.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels: str | None = None
depends_on: str | None = None

_LEGACY = sa.table("saga_schema_version", sa.column("version", sa.Integer()))


def upgrade() -> None:
    """Add the trace_context column (nullable: nothing to fill in)."""
    op.add_column("saga_instances", sa.Column("trace_context", sa.String()))
    op.execute(_LEGACY.insert().values(version=4))


def downgrade() -> None:
    """Back to revision 0003's shape; trace contexts are dropped (0003 never reads them)."""
    op.drop_column("saga_instances", "trace_context")  # SQLite >= 3.35 drops it in place
    op.execute(_LEGACY.delete().where(_LEGACY.c.version == 4))
