"""The SQL tables, as SQLModel models: the newest schema, as the store's statements use it.

The tables are made by the migrations in ``migrations/versions`` (each revision states
its own DDL); a test checks that the migrated schema and these models agree.

There are no foreign keys: steps and events are only ever written under
their saga's fence (the fenced UPDATE found the saga row, in the same
transaction), and purging deletes them with their saga. Foreign-key checks
cost a third of a commit's execution time on PostgreSQL.

Times are seconds since the Unix epoch (double precision) taken from the
database clock, so lease and deadline comparisons never depend on a client's
clock and compare the same way on PostgreSQL and SQLite.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Index, Integer, Table, UniqueConstraint, text
from sqlmodel import Field, SQLModel

_ACTIVE = text("status IN ('running', 'compensating')")


class SagaInstanceRow(SQLModel, table=True):
    __tablename__ = "saga_instances"
    __table_args__ = (
        UniqueConstraint("name", "key", name="uq_saga_instances_name_key"),
        Index("ix_saga_instances_created", "created_at", "id"),
        Index("ix_saga_instances_status_created", "status", "created_at"),
        Index("ix_saga_instances_name_created", "name", "created_at"),
        # Only unfinished sagas are indexed: the stuck-saga scan costs the same
        # with a million finished sagas as with none.
        Index(
            "ix_saga_instances_active_lease",
            "lease_expires_at",
            postgresql_where=_ACTIVE,
            sqlite_where=_ACTIVE,
        ),
    )

    id: str = Field(primary_key=True, max_length=36)
    name: str
    key: str | None = None
    kind: str
    status: str
    input: str | None = None
    version: str | None = None
    owner: str | None = None
    epoch: int = 0
    lease_expires_at: float | None = None
    created_at: float
    updated_at: float
    error: str | None = None
    deadline: float | None = None
    cancel_requested: bool = False
    commit_token: str | None = None
    fingerprint: str | None = None
    trace_context: str | None = None
    # The saga's start and completion events, folded into this row (revision 0007): the
    # ids they hold in the history's order, the module the start names, the completion's
    # time. See folding.py.
    started_event: int | None = Field(default=None, sa_type=BigInteger)
    started_module: str | None = None
    finished_event: int | None = Field(default=None, sa_type=BigInteger)
    finished_at: float | None = None


class SagaStepRow(SQLModel, table=True):
    __tablename__ = "saga_steps"
    saga_id: str = Field(primary_key=True)
    seq: int = Field(primary_key=True)
    name: str
    status: str
    attempt: int = 0
    kind: str
    transactional: bool = False
    action_ref: str | None = None
    compensation_ref: str | None = None
    args: str | None = None
    input_digest: str | None = None
    result: str | None = None
    output_digest: str | None = None
    error: str | None = None
    undo_attempt: int = 0
    started_at: float | None = None
    finished_at: float | None = None
    commit_token: str | None = None
    # The step's start and success events, folded into this row (revision 0006): the ids
    # they hold in the history's order, and the epoch they were written at. See folding.py.
    started_event: int | None = Field(default=None, sa_type=BigInteger)
    finished_event: int | None = Field(default=None, sa_type=BigInteger)
    fold_epoch: int | None = None


class SagaEventRow(SQLModel, table=True):
    __tablename__ = "saga_events"
    # On PostgreSQL the primary key is (saga_id, id) instead of this index (revision 0003).
    __table_args__ = (Index("ix_saga_events_saga", "saga_id", "id"),)

    id: int | None = Field(
        default=None,
        sa_column=Column(
            BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
        ),
    )
    saga_id: str
    at: float
    kind: str
    step: str | None = None
    attempt: int | None = None
    epoch: int | None = None
    detail: str | None = None


class SagaSchemaVersionRow(SQLModel, table=True):
    """Kept from releases before migrations, which read it to refuse newer schemas."""

    __tablename__ = "saga_schema_version"

    version: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})


class SagaOwnerRow(SQLModel, table=True):
    """How to tell, from another process, that an owner (a coordinator) has died.

    PostgreSQL: the owner's liveness session (``backend_pid``, ``backend_start``) on
    the server instance it was opened on (``server_start``), and since when a claimer
    has found that session gone (``suspected_at``); SQLite: the owner's
    process (``host``, ``pid``, ``process_start``). See :mod:`.liveness`.
    """

    __tablename__ = "saga_owners"

    owner: str = Field(primary_key=True)
    host: str | None = None
    pid: int | None = None
    process_start: str | None = None
    backend_pid: int | None = None
    backend_start: float | None = None
    server_start: float | None = None
    registered_at: float
    suspected_at: float | None = None


FOLD_COLUMNS = ("started_event", "finished_event", "fold_epoch")
"""The step row's columns that hold its folded events (only PostgreSQL's writer fills
them; read by the history and nothing else)."""
INSTANCE_FOLD_COLUMNS = ("started_event", "started_module", "finished_event", "finished_at")
"""The saga row's columns that hold its folded start and completion (the same)."""


def _table(model: type[SQLModel]) -> Table:
    table = model.__table__  # type: ignore[attr-defined]
    assert isinstance(table, Table)
    return table


instances = _table(SagaInstanceRow)
steps = _table(SagaStepRow)
events = _table(SagaEventRow)
schema_version = _table(SagaSchemaVersionRow)
owners = _table(SagaOwnerRow)
ALL_TABLES = (instances, steps, events, schema_version, owners)
