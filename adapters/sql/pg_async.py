"""PostgreSQL for the async driver: the hot path on psycopg's async connections.

A saga's commits (its creation, then about one per step) are nearly all an
async application waits for. Here they go from the event loop straight to
the server, as the very statements :mod:`.pg_writer` builds for the sync
store, on ``psycopg.AsyncConnection``s in autocommit mode: no worker thread,
no thread hand-over per commit. Everything else (loading, claiming, listing,
the check after a lost acknowledgement) is rare and keeps the sync store in
a worker thread, as on SQLite (see docs/async.md for the measurements).

The retry and fencing rules are the sync store's: a lost connection is
``StorageUnavailableError``, retried under the store's policy, and a retry
first asks whether the earlier try committed (the commit token); a fence
that matched no row is ``LeaseLostError``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import psycopg

from saga._internal import faults
from saga._internal.errors import LeaseLostError, StorageUnavailableError
from saga._internal.ports import Commit, SagaRecord

from ..threaded_async import ThreadedAsyncStore
from . import pg_load
from .dialect import SqlStore
from .fold_memory import FoldMemory
from .messages import not_connected, pool_exhausted, statement_failed, unavailable
from .pg_hot import PostgresHotPath
from .pg_writer import commit_sql, create_sql
from .pool_option import DEFAULT_WAIT
from .writes import landed

T = TypeVar("T")
POOL_SIZE = 10
"""Connections per event loop; more concurrent commits wait for one to be free."""


class _Pool:
    """Autocommit async connections made on one event loop, at most ``size`` in use,
    each lent with a cursor of its own that every statement on it reuses (a cursor
    made per statement cost a quarter of the driver's client time for it)."""

    def __init__(
        self, conninfo: str, shown: str, size: int, connect_args: dict[str, Any], wait: float
    ) -> None:
        self.conninfo, self.shown = conninfo, shown  # shown: the URL errors name (masked)
        self.connect_args = connect_args
        self.loop = asyncio.get_running_loop()
        self.idle: list[psycopg.AsyncCursor[Any]] = []
        self.size, self.wait = size, wait
        self.slots = asyncio.Semaphore(size)

    async def lend(self) -> psycopg.AsyncCursor[Any]:
        """A connection's cursor, to be given back (:meth:`give_back`, or :meth:`discard`
        when its statement failed); ``StorageUnavailableError`` when none was free within
        ``wait`` seconds, as the sync hot path's pool says it. Not a context manager on
        the hot path: its generator and object per statement cost more than the rest."""
        await self._slot()
        try:
            return self.idle.pop() if self.idle else (await self._connect()).cursor()
        except BaseException:
            self.slots.release()
            raise

    def give_back(self, cursor: psycopg.AsyncCursor[Any]) -> None:
        self.idle.append(cursor)
        self.slots.release()

    async def discard(self, cursor: psycopg.AsyncCursor[Any]) -> None:
        """A cursor whose statement failed or was interrupted: its connection is never
        reused (broken, or mid-statement)."""
        try:
            await _close(cursor.connection)
        finally:
            self.slots.release()

    async def _slot(self) -> None:
        """Take a slot, waiting at most ``wait`` seconds for one: under a timeout scope,
        not ``wait_for``, whose task and future per statement cost about 5 % of the
        event loop's time with 256 sagas in flight."""
        if not self.slots.locked():  # acquire does not suspend: no timer to set
            await self.slots.acquire()
            return
        try:
            async with asyncio.timeout(self.wait):
                await self.slots.acquire()
        except TimeoutError:
            raise pool_exhausted(f"{self.size} in use for {self.wait:g} s") from None

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        try:
            return await psycopg.AsyncConnection.connect(
                self.conninfo, autocommit=True, **self.connect_args
            )
        except psycopg.Error as error:  # a server down (retried), or a login refused
            raise not_connected(self.shown, error) from error

    async def close(self) -> None:
        idle, self.idle = self.idle, []
        for cursor in idle:
            await _close(cursor.connection)

    def abandon(self) -> None:
        """Close the connections of a loop that is gone (no await possible there)."""
        idle, self.idle = self.idle, []
        for cursor in idle:
            cursor.connection.pgconn.finish()


async def _close(connection: psycopg.AsyncConnection[Any]) -> None:
    with contextlib.suppress(psycopg.Error, OSError):
        await connection.close()


class PostgresAsyncStore(ThreadedAsyncStore):
    """``ThreadedAsyncStore`` whose creations and commits are native async statements."""

    def __init__(
        self,
        store: SqlStore,
        connect_args: dict[str, Any],
        pool_size: int = POOL_SIZE,
        pool_wait: float = DEFAULT_WAIT,
    ) -> None:
        """``connect_args``: the sync store's (connect_timeout, and prepare_threshold
        from the URL), so that both sides connect alike."""
        super().__init__(store)
        # the sync hot path's (:mod:`.fold_memory`): both sides must know what either folded
        hot = store.hot
        self.memory = hot.memory if isinstance(hot, PostgresHotPath) else FoldMemory()
        self.store = store
        url = store.engine.url.set(drivername="postgresql")
        self.conninfo = url.render_as_string(hide_password=False)
        self.connect_args = dict(connect_args)
        self.pool_size, self.pool_wait = pool_size, pool_wait
        self._pool: _Pool | None = None

    async def create(
        self, saga: SagaRecord, first: Commit, lease_ttl: float
    ) -> tuple[SagaRecord, bool]:
        statement, params, prepare, slots = create_sql(saga, first, lease_ttl, self.memory)

        async def once() -> tuple[SagaRecord, bool]:
            await self._schema()
            if await self._execute(statement, params, prepare) is not None:
                self.memory.landed(first, slots)
                faults.answer_to_commit()
                return saga, True
            # A clash on (name, key), or our own insert whose acknowledgement was lost.
            row = await self._execute(pg_load.CLASH, pg_load.clash_params(saga))
            return pg_load.clashed_with(row, saga)

        return await self._retried(once)

    async def commit(self, change: Commit) -> bool:
        statement, params, prepare, slots = commit_sql(change, self.memory)
        tries = 0

        async def once() -> bool:
            nonlocal tries
            tries += 1
            if tries > 1:  # the last try may have committed before its connection dropped
                dialect = self.store.dialect
                mine = await asyncio.to_thread(
                    self.store.once, lambda c: landed(c, dialect, change)
                )
                if mine is not None:
                    return mine
            await self._schema()
            row = await self._execute(statement, params, prepare)
            if row is None:
                raise LeaseLostError(change.saga_id, change.epoch)
            self.memory.landed(change, slots)
            faults.answer_to_commit()
            return bool(row[0])

        return await self._retried(once)

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    # -- plumbing ---------------------------------------------------------------------

    async def _schema(self) -> None:
        if not self.store.schema_ready:
            await asyncio.to_thread(self.store.ensure_schema)

    async def _execute(
        self, statement: str, params: dict[str, Any], prepare: bool | None = None
    ) -> Any:
        """Run one statement; its first row (or None). Driver errors become saga's.
        ``prepare`` as psycopg takes it (:func:`.pg_writer.prepared`)."""
        pool = self._here()
        cursor = await pool.lend()
        try:
            await cursor.execute(statement, params, prepare=prepare)
            row = await cursor.fetchone()
        except BaseException as error:
            await pool.discard(cursor)
            if isinstance(error, (psycopg.OperationalError, psycopg.InterfaceError)):
                raise unavailable(self.store.url, error) from error
            if isinstance(error, psycopg.Error):
                raise statement_failed(self.store.url, error) from error
            raise
        pool.give_back(cursor)
        return row

    def _here(self) -> _Pool:
        """The pool of the running event loop (a coordinator may outlive a loop)."""
        loop = asyncio.get_running_loop()
        if self._pool is None or self._pool.loop is not loop:
            if self._pool is not None:
                self._pool.abandon()
            self._pool = _Pool(
                self.conninfo, self.store.url, self.pool_size, self.connect_args, self.pool_wait
            )
        return self._pool

    async def _retried(self, work: Callable[[], Awaitable[T]]) -> T:
        """``await work()``; while the database is unreachable, retried with backoff."""
        try:  # the common case pays nothing for the retry machinery
            return await work()
        except StorageUnavailableError:
            pass
        async for attempt in self.store.retry.async_retrying(attempts_used=1):
            with attempt:
                return await work()
        raise AssertionError("unreachable: tenacity re-raises")  # pragma: no cover
