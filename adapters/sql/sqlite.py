"""SQLite details: WAL, busy timeout, IMMEDIATE transactions, foreign keys."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    ColumnElement,
    Engine,
    Insert,
    Select,
    Table,
    create_engine,
    event,
    func,
    select,
)
from sqlalchemy.dialects.sqlite import insert
from sqlalchemy.engine import make_url

from saga._internal.errors import ConfigurationError
from saga._internal.ports import CREATION_TICK, AsyncSagaStore

from .dialect import SqlStore
from .pool_option import OPTIONS
from .sqlite_writer import SqliteHotPath, is_file_database
from .tables import instances

BUSY_TIMEOUT_SECONDS = 30.0
_UNIX_EPOCH_JULIAN_DAY = 2440587.5


class SqliteDialect:
    name = "sqlite"
    read_isolation = None  # every transaction is IMMEDIATE: one writer, one snapshot

    def create_engine(self, url: str) -> Engine:
        given = [option for option in OPTIONS if option in make_url(url).query]
        if given:
            raise ConfigurationError(
                f"{given[0]} in the database URL applies to PostgreSQL only: SQLite opens "
                "a file, not server connections; remove it"
            )
        engine = create_engine(
            url,
            hide_parameters=True,
            connect_args={"timeout": BUSY_TIMEOUT_SECONDS, "check_same_thread": False},
        )
        event.listen(engine, "connect", _configure_connection)
        event.listen(engine, "begin", _begin_immediate)
        return engine

    def hot_path(self, url: str) -> SqliteHotPath | None:
        """Creations and commits as constant SQL on raw connections of their own, set up
        as the engine's; None for an in-memory database (private to one connection)."""
        if not is_file_database(url):
            return None
        return SqliteHotPath(
            url, lambda connection: _configure_connection(connection, None), BUSY_TIMEOUT_SECONDS
        )

    def native_async(self, store: SqlStore) -> AsyncSagaStore | None:
        """None: sqlite3 has no async interface; worker threads are the async form."""
        del store  # nothing native to wrap it in
        return None

    def now(self) -> ColumnElement[float]:
        # julianday('now') has millisecond precision, unlike CURRENT_TIMESTAMP.
        return (func.julianday("now") - _UNIX_EPOCH_JULIAN_DAY) * 86400.0

    def creation_time(self) -> ColumnElement[float]:
        # As the hot path's CREATED: one writer at a time, so the newest read is the newest.
        newest = select(func.max(instances.c.created_at)).scalar_subquery()
        return func.max(self.now(), func.coalesce(newest, 0.0) + CREATION_TICK)

    def insert_ignoring_conflicts(self, table: Table) -> Insert:
        return insert(table).on_conflict_do_nothing()

    def lock_for_claim(self, query: Select[Any]) -> Select[Any]:
        # The IMMEDIATE transaction already holds the single writer lock.
        return query

    def lock_schema(self, connection: Any) -> None:
        """Nothing to do: IMMEDIATE transactions serialise schema creation."""


def _configure_connection(dbapi_connection: Any, _record: Any) -> None:
    # We issue BEGIN ourselves (see _begin_immediate), so the driver must not.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    # WAL: readers never block the writer, and a SIGKILL loses no committed data.
    cursor.execute("PRAGMA journal_mode=WAL")
    # FULL: a commit survives power loss too, not only a process crash.
    cursor.execute("PRAGMA synchronous=FULL")
    # Enforce foreign keys if a user's own tables in this file declare them.
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_SECONDS * 1000)}")
    cursor.close()


def _begin_immediate(connection: Any) -> None:
    # IMMEDIATE takes the write lock at BEGIN: two writers never both read,
    # then fail to upgrade (SQLITE_BUSY mid-transaction cannot be waited out).
    connection.exec_driver_sql("BEGIN IMMEDIATE")
