"""The SQL store's reads: a saga with its steps, lists of sagas, their history.

Each function runs in the caller's transaction (``connection``); the store
chooses which (a read-only snapshot, or the transaction of a write that reads).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Row,
    Select,
    Table,
    and_,
    case,
    func,
    null,
    or_,
    select,
)

from saga._internal.ports import EventRecord, ListQuery, SagaRecord, StepRecord
from saga._internal.record import IN_FLIGHT
from saga._internal.status import SagaStatus, StepStatus

from . import folding
from . import tables as t
from .dialect import Dialect
from .rows import saga_record, step_record

ACTIVE = (SagaStatus.RUNNING.value, SagaStatus.COMPENSATING.value)
"""The statuses of a saga someone should be executing (stuck when its lease ran out)."""

PAYLOADS = {
    "saga_instances": ("input", "trace_context"),
    "saga_steps": ("args", "result", "error"),
}
"""The columns a listing without payloads leaves out (``ListQuery.payloads``): they
hold what a saga carries, unbounded but for the payload limit, and no list shows them.
Errors are short (``MAX_ERROR_LENGTH``) and a list shows the saga's: its own column is
read, and of its steps' errors the one that can be it (see :func:`_left_out`)."""


def load(connection: Connection, saga_id: str) -> SagaRecord | None:
    """The saga ``saga_id`` with its steps, or None."""
    row = connection.execute(select(t.instances).where(t.instances.c.id == saga_id)).first()
    return None if row is None else with_steps(connection, [row])[0]


def find(connection: Connection, name: str, key: str) -> SagaRecord | None:
    """The saga of definition ``name`` run under ``key``, with its steps, or None."""
    i = t.instances.c
    row = connection.execute(select(t.instances).where(i.name == name, i.key == key)).first()
    return None if row is None else with_steps(connection, [row])[0]


def listed(connection: Connection, dialect: Dialect, query: ListQuery) -> list[SagaRecord]:
    """One page of sagas matching ``query``, newest first, with their steps."""
    rows = connection.execute(list_statement(dialect, query)).all()
    return with_steps(connection, rows, payloads=query.payloads)


def columns(table: Table, payloads: bool = True) -> list[Any]:
    """What to select of ``table``: every column, or (without ``payloads``) every column
    but its :data:`PAYLOADS`, each read back as NULL so that rows keep one shape."""
    left_out = () if payloads else PAYLOADS.get(table.name, ())
    kept: list[Any] = [c for c in table.c if c.name not in left_out]
    return kept + [_left_out(table, name) for name in left_out]


def _left_out(table: Table, name: str) -> Any:
    """NULL in place of the payload column ``name``; but a compensating step's error,
    which is the saga's headline error when its compensation failed for good
    (``views.headline_error``): the listing reads it in the same query, not per row."""
    if table is t.steps and name == "error":
        s = t.steps.c
        return case((s.status == StepStatus.COMPENSATING.value, s.error)).label(name)
    return null().label(name)


def list_statement(dialect: Dialect, query: ListQuery) -> Select[Any]:
    """The SELECT for ``query``: its filters, newest first (ties on id), keyset paged."""
    i = t.instances.c
    now = dialect.now()
    conditions: list[ColumnElement[bool]] = []
    if query.status:
        conditions.append(i.status.in_([s.value for s in query.status]))
    if query.name is not None:
        conditions.append(i.name == query.name)
    if query.key is not None:
        conditions.append(i.key == query.key)
    if query.id_prefix is not None:
        conditions.append(i.id.startswith(query.id_prefix, autoescape=True))
    if query.key_prefix is not None:
        conditions.append(_starts(i.key, query.key_prefix))
    if query.step is not None:
        conditions.append(_current_step_name() == query.step)
    if query.stuck:
        conditions.append(and_(i.status.in_(ACTIVE), i.lease_expires_at < now))
    if query.older_than is not None:
        conditions.append(i.created_at < now - query.older_than)
    if query.before is not None:
        anchor = select(i.created_at).where(i.id == query.before).scalar_subquery()
        conditions.append(
            or_(i.created_at < anchor, and_(i.created_at == anchor, i.id < query.before))
        )
    return (
        select(*columns(t.instances, query.payloads))
        .where(*conditions)
        .order_by(i.created_at.desc(), i.id.desc())
        .limit(query.limit)
    )


def _starts(column: Any, prefix: str) -> ColumnElement[bool]:
    """``column`` starts with exactly ``prefix``, a bound parameter: LIKE with its
    wildcards escaped (which an index may serve), and the leading characters compared,
    since SQLite's LIKE ignores the case of ASCII letters."""
    return and_(
        column.startswith(prefix, autoescape=True),
        func.substr(column, 1, len(prefix)) == prefix,
    )


def _current_step_name() -> Any:
    """The name of each listed saga's current step (``record.current_step``): its newest
    step in flight, else its newest step (NULL before any step)."""
    s = t.steps.c
    in_flight = case((s.status.in_([status.value for status in IN_FLIGHT]), 1), else_=0)
    return (
        select(s.name)
        .where(s.saga_id == t.instances.c.id)
        .order_by(in_flight.desc(), s.seq.desc())
        .limit(1)
        .scalar_subquery()
    )


def status_counts(
    connection: Connection, cap: int | None = None, statuses: Collection[SagaStatus] | None = None
) -> dict[SagaStatus, int]:
    """How many sagas there are in each status (or each of ``statuses``); with ``cap``, at
    most ``cap + 1`` each."""
    i = t.instances.c
    if cap is None:  # GROUP BY the leading column of ix_saga_instances_status_created
        statement = select(i.status, func.count()).group_by(i.status)
        if statuses is not None:  # index ranges of those statuses alone
            statement = statement.where(i.status.in_([status.value for status in statuses]))
        return {SagaStatus(status): int(n) for status, n in connection.execute(statement)}
    # Each status's count stops at cap + 1 index entries: a million finished sagas cost
    # what ten thousand do, where a GROUP BY would read every entry of the index.
    counts = {}
    for status in SagaStatus if statuses is None else statuses:
        some = select(i.id).where(i.status == status.value).limit(cap + 1).subquery()
        n = int(connection.execute(select(func.count()).select_from(some)).scalar_one())
        if n:
            counts[status] = n
    return counts


def stuck_count(connection: Connection, dialect: Dialect) -> int:
    """How many active sagas have a lease that ran out (an index range on the lease)."""
    i = t.instances.c
    statement = select(func.count()).where(i.status.in_(ACTIVE), i.lease_expires_at < dialect.now())
    return int(connection.execute(statement).scalar_one())


def events(connection: Connection, saga_id: str) -> list[EventRecord]:
    """The saga's history, oldest first (with the events folded into its step rows)."""
    return folding.history(connection, saga_id)


def with_steps(
    connection: Connection, rows: Sequence[Row[Any]], payloads: bool = True
) -> list[SagaRecord]:
    """The sagas of ``rows``, each with its steps in seq order (one query for all)."""
    ids = [row.id for row in rows]
    by_saga: dict[str, list[StepRecord]] = {saga_id: [] for saga_id in ids}
    if ids:
        s = t.steps.c
        step_rows = connection.execute(
            select(*columns(t.steps, payloads)).where(s.saga_id.in_(ids)).order_by(s.saga_id, s.seq)
        ).all()
        for step_row in step_rows:
            by_saga[step_row.saga_id].append(step_record(step_row))
    return [saga_record(row, tuple(by_saga[row.id])) for row in rows]
