"""PostgreSQL's hot path: a saga's creation, commits and reads as single statements on
autocommit connections (the statements: :mod:`.pg_writer`, :mod:`.pg_load`)."""

from __future__ import annotations

from typing import Any

import psycopg

from saga._internal.ports import Commit, SagaRecord

from . import pg_load
from .fold_memory import FoldMemory
from .messages import statement_failed, unavailable
from .pg_connections import BROKEN, HotConnections
from .pg_writer import commit_sql, create_sql


class PostgresHotPath:
    """Saga creation and commits as single statements on autocommit connections."""

    def __init__(self, connections: HotConnections) -> None:
        self.connections = connections
        self.memory = FoldMemory()  # shared with the native async store

    def create(self, saga: SagaRecord, first: Commit, lease_ttl: float) -> bool:
        """Insert the saga with its first commit; False when (name, key) or id clashed."""
        sql, params, prepare, slots = create_sql(saga, first, lease_ttl, self.memory)
        if execute_one(self.connections, sql, params, prepare) is None:
            return False
        self.memory.landed(first, slots)
        return True

    def commit(self, change: Commit) -> bool | None:
        """Apply ``change``; whether the saga must stop (cancel requested or deadline
        passed), or None when the fence matched nothing."""
        sql, params, prepare, slots = commit_sql(change, self.memory)
        row = execute_one(self.connections, sql, params, prepare)
        if row is None:
            return None
        self.memory.landed(change, slots)
        return bool(row[0])

    def load(self, saga_id: str) -> SagaRecord | None:
        """The saga with its steps in one statement (:mod:`.pg_load`), or None."""
        row = execute_one(self.connections, pg_load.LOAD, {"id": saga_id})
        return None if row is None else pg_load.saga_of(row)

    def find(self, name: str, key: str) -> SagaRecord | None:
        """The saga ``name`` ran under ``key``, with its steps, in one statement."""
        row = execute_one(self.connections, pg_load.FIND, {"name": name, "key": key})
        return None if row is None else pg_load.saga_of(row)

    def clash(self, saga: SagaRecord) -> tuple[SagaRecord, bool]:
        """What ``saga``'s creation clashed with, in one statement (as ``writes.clash``
        answers it in a transaction of four): ours (created), or the existing saga."""
        row = execute_one(self.connections, pg_load.CLASH, pg_load.clash_params(saga))
        return pg_load.clashed_with(row, saga)

    def close(self) -> None:
        self.connections.close()


def execute_one(
    connections: HotConnections, statement: str, params: dict[str, Any], prepare: bool | None = None
) -> Any:
    """Run one statement on a connection of ``connections``; return its first row (or
    None). ``prepare`` as psycopg takes it (None: prepared once used a few times).
    Driver errors become saga's: a broken connection is closed and reported as
    ``StorageUnavailableError`` (retried by the store)."""
    try:
        with connections.cursor() as cursor:
            cursor.execute(statement, params, prepare=prepare)
            return cursor.fetchone()
    except BROKEN as error:
        raise unavailable(connections.shown, error) from error
    except psycopg.Error as error:
        raise statement_failed(connections.shown, error) from error
