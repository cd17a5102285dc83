"""PostgreSQL details: psycopg 3, server clock, SKIP LOCKED claims."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    ColumnElement,
    Engine,
    Float,
    Insert,
    Select,
    Table,
    cast,
    create_engine,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.engine import make_url

from saga._internal.errors import ConfigurationError
from saga._internal.ports import AsyncSagaStore

from .dialect import SqlStore
from .pg_async import PostgresAsyncStore
from .pg_connections import HotConnections
from .pg_writer import PostgresHotPath
from .pool_option import pool_option
from .revisions import SCHEMA_LOCK_KEY

PREPARE_OPTION = "prepare_threshold"
"""The URL query option saga reads itself (libpq has no such parameter): psycopg's
``prepare_threshold``, a whole number or ``none``. ``none`` turns prepared statements
off, which PgBouncer's transaction pooling needs (see docs/operating.md)."""


def connect_options(url: str) -> tuple[str, dict[str, Any]]:
    """``url`` without saga's own query option, and psycopg's connect arguments."""
    parsed = make_url(url)
    args: dict[str, Any] = {"connect_timeout": 5}
    raw = parsed.query.get(PREPARE_OPTION)
    if raw is None:
        return url, args
    value = raw if isinstance(raw, str) else raw[-1]
    if value.lower() == "none":
        args[PREPARE_OPTION] = None
    elif value.isdigit():
        args[PREPARE_OPTION] = int(value)
    else:
        raise ConfigurationError(
            f"{PREPARE_OPTION}={value!r} in the database URL: use a whole number, or 'none' "
            "to turn prepared statements off (PgBouncer in transaction pooling mode)"
        )
    stripped = parsed.difference_update_query([PREPARE_OPTION])
    return stripped.render_as_string(hide_password=False), args


KEPT_CONNECTIONS = 15
"""Connections each pool keeps once opened (it opens them only as needed): as many
as a worker's threads use at once. SQLAlchemy's default keeps 5 and closes each of
its 10 overflow connections on its return, so 8 threads opened a server connection
(a forked process) every few sagas: 258 for a worker's 1,000 sagas at concurrency 8.
The overflow stays (10 more), so a burst beyond 15 threads waits for no one."""

OVERFLOW = 10
"""Connections a default pool opens beyond those it keeps, for a burst (SQLAlchemy's
default overflow; the hot path's pool allows as many)."""


class PostgresDialect:
    """``pool_size`` (or the URL's ``pool_size`` option, :data:`POOL_OPTION`) bounds
    each of the store's connection pools (no overflow); by default the store's pool and
    the hot path's keep :data:`KEPT_CONNECTIONS` each, plus :data:`OVERFLOW` for a
    burst, and each event loop's async pool opens up to ``pg_async.POOL_SIZE``."""

    name = "postgresql"
    # READ COMMITTED gives each statement its own snapshot: a saga row read before an
    # owner's commit and its steps read after it would describe no state that existed.
    read_isolation = "REPEATABLE READ"

    def __init__(self, pool_size: int | None = None, pool_wait: float = 30.0) -> None:
        self.pool_size = pool_size
        """Set here, or by the URL's option when not (read by :meth:`create_engine`)."""
        self.pool_wait = pool_wait
        """How long a thread waits for a free connection of a bounded pool."""
        self.connect_args: dict[str, Any] = {"connect_timeout": 5}
        """psycopg's connect arguments, from the URL (the async hot path uses them too)."""

    def _options(self, url: str) -> tuple[str, dict[str, Any], dict[str, Any]]:
        """``url`` without saga's own options, psycopg's connect arguments, and the
        pool's arguments for SQLAlchemy."""
        url, from_url = pool_option(url)
        if self.pool_size is None:
            self.pool_size = from_url
        url, connect_args = connect_options(url)
        if self.pool_size is None:
            return url, connect_args, {"pool_size": KEPT_CONNECTIONS, "max_overflow": OVERFLOW}
        bounded = {"pool_size": self.pool_size, "max_overflow": 0, "pool_timeout": self.pool_wait}
        return url, connect_args, bounded

    def create_engine(self, url: str) -> Engine:
        url, self.connect_args, pool = self._options(url)
        # No pool_pre_ping: it would cost a round trip per transaction. A dead
        # connection fails the statement instead, SQLAlchemy invalidates the
        # pool, and the store's retry (which recognises its own earlier commit)
        # runs it again on a fresh connection.
        return create_engine(
            url,
            # Bound values (user payloads) stay out of error messages.
            hide_parameters=True,
            connect_args=self.connect_args,
            **pool,
        )

    def hot_path(self, url: str) -> PostgresHotPath:
        """Single-statement commits on autocommit connections of their own (no
        BEGIN/COMMIT), bounded as the store's pool is."""
        url, connect_args, _ = self._options(url)
        conninfo = make_url(url).set(drivername="postgresql").render_as_string(False)
        keep, most = (KEPT_CONNECTIONS, KEPT_CONNECTIONS + OVERFLOW)
        if self.pool_size is not None:
            keep = most = self.pool_size
        return PostgresHotPath(HotConnections(conninfo, connect_args, keep, most, self.pool_wait))

    def native_async(self, store: SqlStore) -> AsyncSagaStore:
        """Creations and commits as the hot path's statements on psycopg's async
        connections (:mod:`.pg_async`); the rest of ``store`` in worker threads."""
        if self.pool_size is None:
            return PostgresAsyncStore(store, self.connect_args, pool_wait=self.pool_wait)
        return PostgresAsyncStore(store, self.connect_args, self.pool_size, self.pool_wait)

    def now(self) -> ColumnElement[float]:
        # clock_timestamp(), not now(): now() is frozen at the transaction's start.
        return cast(func.extract("epoch", func.clock_timestamp()), Float)

    def insert_ignoring_conflicts(self, table: Table) -> Insert:
        return insert(table).on_conflict_do_nothing()

    def lock_for_claim(self, query: Select[Any]) -> Select[Any]:
        # Rows another recoverer is claiming right now are skipped, not waited for.
        return query.with_for_update(skip_locked=True)

    def lock_schema(self, connection: Any) -> None:
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": SCHEMA_LOCK_KEY})
