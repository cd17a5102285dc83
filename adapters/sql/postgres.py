"""PostgreSQL details: psycopg 3, server clock, SKIP LOCKED claims."""

from __future__ import annotations

from typing import Any, NamedTuple

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
from .pg_hot import PostgresHotPath
from .pool_option import DEFAULT_WAIT, PoolOptions, pool_options
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
"""Connections each pool keeps once opened (it opens them only as needed): as many as
a worker's threads use at once, so that they are not closed and opened again (a
forked server process each) between one saga and the next."""

OVERFLOW = 10
"""Connections a default pool opens beyond those it keeps, for a burst (SQLAlchemy's
default overflow; the hot path's pool allows as many)."""


class _Settings(NamedTuple):
    """A URL's connection settings, as the store's pools use them."""

    source: str
    """The URL as given."""
    url: str
    """Without saga's own options."""
    connect_args: dict[str, Any]
    size: int | None
    wait: float


def _settings(url: str, given: PoolOptions) -> _Settings:
    stripped, from_url = pool_options(url)
    stripped, connect_args = connect_options(stripped)
    size = given.size if given.size is not None else from_url.size
    wait = next((w for w in (given.wait, from_url.wait) if w is not None), DEFAULT_WAIT)
    return _Settings(url, stripped, connect_args, size, wait)


class PostgresDialect:
    """``pool_size`` (or the URL's ``pool_size`` option, :data:`.pool_option.POOL_OPTION`)
    bounds each of the store's connection pools (no overflow); by default the store's
    pool and the hot path's keep :data:`KEPT_CONNECTIONS` each, plus :data:`OVERFLOW` for
    a burst, and each event loop's async pool opens up to ``pg_async.POOL_SIZE``.
    ``pool_wait`` (or the URL's ``pool_wait``) is how long a thread or task waits for a
    free connection of a full pool. Given here, either wins over the URL's."""

    name = "postgresql"
    # READ COMMITTED gives each statement its own snapshot: a saga row read before an
    # owner's commit and its steps read after it would describe no state that existed.
    read_isolation = "REPEATABLE READ"

    def __init__(self, pool_size: int | None = None, pool_wait: float | None = None) -> None:
        self.given = PoolOptions(pool_size, pool_wait)
        self._read: _Settings | None = None

    def settings(self, url: str) -> _Settings:
        """``url``'s settings, read once: the store, its hot path and its async pools
        all ask for them."""
        if self._read is None or self._read.source != url:
            self._read = _settings(url, self.given)
        return self._read

    @property
    def connect_args(self) -> dict[str, Any]:
        """psycopg's connect arguments, from the URL the store was made with."""
        return {"connect_timeout": 5} if self._read is None else self._read.connect_args

    def create_engine(self, url: str) -> Engine:
        settings = self.settings(url)
        pool: dict[str, Any] = {"pool_size": KEPT_CONNECTIONS, "max_overflow": OVERFLOW}
        if settings.size is not None:
            pool = {"pool_size": settings.size, "max_overflow": 0}
        # No pool_pre_ping: it would cost a round trip per transaction. A dead
        # connection fails the statement instead, SQLAlchemy invalidates the
        # pool, and the store's retry (which recognises its own earlier commit)
        # runs it again on a fresh connection.
        return create_engine(
            settings.url,
            # Bound values (user payloads) stay out of error messages.
            hide_parameters=True,
            connect_args=settings.connect_args,
            pool_timeout=settings.wait,
            **pool,
        )

    def hot_path(self, url: str) -> PostgresHotPath:
        """Single-statement commits on autocommit connections of their own (no
        BEGIN/COMMIT), bounded as the store's pool is."""
        settings = self.settings(url)
        conninfo = make_url(settings.url).set(drivername="postgresql").render_as_string(False)
        keep, most = (KEPT_CONNECTIONS, KEPT_CONNECTIONS + OVERFLOW)
        if settings.size is not None:
            keep = most = settings.size
        connections = HotConnections(
            conninfo, settings.connect_args, keep, most, settings.wait, shown=url
        )
        return PostgresHotPath(connections)

    def native_async(self, store: SqlStore) -> AsyncSagaStore:
        """Creations and commits as the hot path's statements on psycopg's async
        connections (:mod:`.pg_async`); the rest of ``store`` in worker threads."""
        assert self._read is not None, "the store's engine is made first"
        size, wait = self._read.size, self._read.wait
        if size is None:
            return PostgresAsyncStore(store, self._read.connect_args, pool_wait=wait)
        return PostgresAsyncStore(store, self._read.connect_args, size, wait)

    def now(self) -> ColumnElement[float]:
        # clock_timestamp(), not now(): now() is frozen at the transaction's start.
        return cast(func.extract("epoch", func.clock_timestamp()), Float)

    def creation_time(self) -> ColumnElement[float]:
        # Microseconds, and a creation takes a round trip: no two sagas tie.
        return self.now()

    def insert_ignoring_conflicts(self, table: Table) -> Insert:
        return insert(table).on_conflict_do_nothing()

    def lock_for_claim(self, query: Select[Any]) -> Select[Any]:
        # Rows another recoverer is claiming right now are skipped, not waited for.
        return query.with_for_update(skip_locked=True)

    def lock_schema(self, connection: Any) -> None:
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": SCHEMA_LOCK_KEY})
