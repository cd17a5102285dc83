"""Dumps of saga's tables, for "nothing changed" checks, and forged rows for hostile ones."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from saga.adapters.sql import tables as t
from sqlalchemy import Connection, Engine, func, inspect, select, update
from sqlalchemy.pool import NullPool

from tests import postgres
from tests.faults import figures

Dump = dict[str, list[tuple[Any, ...]]]
_ACTIVE = ("running", "compensating")

_ORDER = {
    t.instances.name: (t.instances.c.id,),
    t.steps.name: (t.steps.c.saga_id, t.steps.c.seq),
    t.events.name: (t.events.c.id,),
}


@contextmanager
def connected(url: str) -> Iterator[Connection]:
    """One connection (in a transaction, committed at the end) to the saga database."""
    engine: Engine = postgres.engine(url, poolclass=NullPool)
    try:
        with engine.begin() as connection:
            yield connection
    finally:
        engine.dispose()


def dump(url: str, saga_id: str | None = None) -> Dump:
    """Every row of saga's tables (or of one saga), in a canonical order."""
    found: Dump = {}
    with connected(url) as connection:
        present = set(inspect(connection).get_table_names())
        for table in (t.instances, t.steps, t.events):
            if table.name not in present:
                found[table.name] = []
                continue
            query = select(table).order_by(*_ORDER[table.name])
            if saga_id is not None:
                column = table.c.id if table is t.instances else table.c.saga_id
                query = query.where(column == saga_id)
            found[table.name] = [tuple(row) for row in connection.execute(query).all()]
    return found


def unchanged(url: str, before: Dump, saga_id: str | None = None) -> None:
    """Assert the tables (or one saga's rows) are exactly as ``before``."""
    figures.count("dumps compared")
    after = dump(url, saga_id)
    for table, rows in before.items():
        assert after[table] == rows, f"{table} changed: {_difference(rows, after[table])}"


def _difference(before: list[tuple[Any, ...]], after: list[tuple[Any, ...]]) -> str:
    gone = [row for row in before if row not in after]
    new = [row for row in after if row not in before]
    return f"removed {gone[:3]}, added {new[:3]}"


def forge_step(url: str, saga_id: str, step: str, **values: Any) -> None:
    """Overwrite columns of a stored step, as someone with database access could."""
    with connected(url) as connection:
        connection.execute(
            update(t.steps)
            .where(t.steps.c.saga_id == saga_id, t.steps.c.name == step)
            .values(values)
        )


def forge_saga(url: str, saga_id: str, **values: Any) -> None:
    """Overwrite columns of a stored saga row."""
    with connected(url) as connection:
        connection.execute(update(t.instances).where(t.instances.c.id == saga_id).values(values))


def wait_until_stuck(url: str, now: Callable[[], float], limit: float = 30.0) -> None:
    """Until every unfinished saga's lease has expired by the database clock (``now``),
    reading the rows themselves: this works when some rows are corrupt, too."""
    deadline = time.monotonic() + limit
    i = t.instances.c
    while True:
        with connected(url) as connection:
            query = select(func.max(i.lease_expires_at)).where(i.status.in_(_ACTIVE))
            latest = connection.execute(query).scalar()
        if latest is None or latest < now():
            return
        assert time.monotonic() < deadline, f"leases still live after {limit:g}s"
        time.sleep(0.02)
