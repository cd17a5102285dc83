"""``pool_size`` in the database URL: the most connections each of saga's pools in one
process opens (the store's, the hot path's, each event loop's async pool), so that a
fleet of processes fits the server's ``max_connections``."""

from __future__ import annotations

import asyncio
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import pytest
from saga.adapters.sql import SqlSagaStore
from saga.adapters.sql.pg_async import PostgresAsyncStore
from saga.adapters.sql.pg_hot import execute_one
from saga.adapters.sql.postgres import PostgresDialect

from saga import (
    AsyncCoordinator,
    ConfigurationError,
    Coordinator,
    Saga,
    SagaStatus,
    StepContext,
    StorageUnavailableError,
)
from tests.cli.conftest import one_error_line, run_saga
from tests.postgres import libpq_url, with_query

THREADS = 6
"""More threads than connections: they take turns, none fails."""

SAGA = Saga("pool-size-two-steps")


@SAGA.step()
def reserve(ctx: StepContext) -> str:
    return f"R-{ctx.data}"


@SAGA.step()
def charge(ctx: StepContext) -> int:
    return len(ctx.results["reserve"])


def server_connections(server: str, application: str) -> int:
    """How many server connections carry ``application`` as their application_name."""
    with psycopg.connect(libpq_url(server), autocommit=True) as connection:
        row = connection.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (application,)
        ).fetchone()
    assert row is not None
    return int(row[0])


def bounded_url(pg_url: str, size: int) -> tuple[str, str]:
    """``pg_url`` with ``pool_size`` and an application_name of its own (to count by)."""
    application = f"pool-size-{uuid.uuid4().hex[:8]}"
    return with_query(pg_url, pool_size=str(size), application_name=application), application


@pytest.mark.postgres
def test_threads_beyond_the_pool_take_turns_on_its_connections(
    pg_url: str, postgres_server: str
) -> None:
    url, application = bounded_url(pg_url, 1)
    coordinator = Coordinator(url)
    try:
        store = coordinator.store
        assert isinstance(store, SqlSagaStore)
        assert store.hot is not None
        assert store.engine.pool.size() == 1
        assert store.hot.connections.most == 1  # type: ignore[attr-defined]
        with ThreadPoolExecutor(THREADS) as threads:
            views = list(threads.map(lambda n: coordinator.run(SAGA, data=n), range(4 * THREADS)))
        assert {view.status for view in views} == {SagaStatus.COMPLETED}
        # One for each pool, and the liveness session that tells this process is alive.
        assert server_connections(postgres_server, application) <= 3
    finally:
        coordinator.close()


@pytest.mark.postgres
def test_the_async_pool_of_an_event_loop_keeps_to_the_bound(
    pg_url: str, postgres_server: str
) -> None:
    url, application = bounded_url(pg_url, 2)

    async def main() -> tuple[set[SagaStatus], int, int]:
        async with AsyncCoordinator(url) as coordinator:
            views = await asyncio.gather(*(coordinator.run(SAGA, data=n) for n in range(24)))
            size = getattr(coordinator.store, "pool_size", None)
            return {v.status for v in views}, size, server_connections(postgres_server, application)

    statuses, size, connections = asyncio.run(main())
    assert statuses == {SagaStatus.COMPLETED}
    assert size == 2
    assert connections <= 2 + 2 + 2 + 1  # store, hot path, this loop's async pool, liveness


BAD_VALUES = [
    *(("pool_size", value, "whole number of at least 1") for value in ("0", "-1", "1.5", "many")),
    *(
        ("pool_wait", value, "number of seconds (0 or more)")
        for value in ("-1", "soon", "inf", "nan")
    ),
]


@pytest.mark.postgres
@pytest.mark.parametrize(("option", "value", "wanted"), BAD_VALUES)
def test_a_bad_pool_option_is_one_clear_error(
    pg_url: str, option: str, value: str, wanted: str
) -> None:
    with pytest.raises(ConfigurationError) as raised:
        Coordinator(with_query(pg_url, **{option: value}))
    message = str(raised.value)
    assert f"{option}={value!r} in the database URL" in message
    assert wanted in message
    assert "\n" not in message


@pytest.mark.parametrize("option", ["pool_size", "pool_wait"])
def test_a_pool_option_on_sqlite_is_refused_not_ignored(sqlite_url: str, option: str) -> None:
    with pytest.raises(ConfigurationError, match=f"{option} in the database URL applies to Post"):
        Coordinator(f"{sqlite_url}?{option}=4")


@pytest.mark.postgres
def test_the_admin_command_says_a_bad_pool_size_in_one_line(pg_url: str, tmp_path: Path) -> None:
    listed = run_saga("--db", with_query(pg_url, pool_size="lots"), "list", cwd=tmp_path)
    assert listed.returncode == 2
    assert "pool_size='lots' in the database URL" in one_error_line(listed.stderr)


@pytest.mark.postgres
def test_a_pool_whose_connections_all_stay_in_use_is_unavailable_storage(pg_url: str) -> None:
    store = SqlSagaStore(pg_url, PostgresDialect(pool_size=1, pool_wait=0.01))
    try:
        assert store.hot is not None
        hot: Any = store.hot
        full = pytest.raises(StorageUnavailableError, match="no free connection in saga's")
        with hot.connections.cursor(), full:  # the only connection, held
            hot.load(str(uuid.uuid4()))
        held = store.engine.raw_connection()
        with pytest.raises(StorageUnavailableError, match="raise pool_size in the database URL"):
            store.once(lambda connection: connection.exec_driver_sql("SELECT 1"))
        held.close()
    finally:
        store.close()


@pytest.mark.postgres
def test_an_async_pool_whose_connections_all_stay_in_use_is_unavailable_storage(
    pg_url: str,
) -> None:
    store = SqlSagaStore(pg_url, PostgresDialect())
    native = PostgresAsyncStore(store, {}, pool_size=1, pool_wait=0.01)

    async def main() -> None:
        pool = native._here()
        full = pytest.raises(StorageUnavailableError, match="no free connection in saga's")
        held = await pool.lend()  # the only connection
        with full:
            await native._execute("SELECT 1", {})
        pool.give_back(held)
        assert await native._execute("SELECT 1", {}) == (1,)  # free again
        await native.close()

    try:
        asyncio.run(main())
    finally:
        store.close()


@pytest.mark.postgres
def test_an_async_statement_cancelled_midway_never_lends_its_connection_again(
    pg_url: str,
) -> None:
    """A task cancelled while its statement runs leaves its connection mid-statement: the
    pool closes it and frees the slot, and the next statement gets a new connection."""
    store = SqlSagaStore(pg_url, PostgresDialect())
    native = PostgresAsyncStore(store, {}, pool_size=1)
    marker = f"pool-size-cancelled-{uuid.uuid4().hex[:8]}"
    sleeping_sql = f"SELECT pg_sleep(30) -- {marker}"

    async def main() -> None:
        sleeping = asyncio.create_task(native._execute(sleeping_sql, {}))
        with psycopg.connect(libpq_url(pg_url), autocommit=True) as watcher:
            pid = await _backend_running(watcher, marker)
            sleeping.cancel()
            with pytest.raises(asyncio.CancelledError):
                await sleeping
            assert native._here().idle == []  # closed, not kept
            assert await native._execute("SELECT pg_backend_pid()", {}) != (pid,)
        await native.close()

    try:
        asyncio.run(main())
    finally:
        store.close()


async def _backend_running(watcher: psycopg.Connection[Any], marker: str) -> int:
    """The pid of the server backend running the statement tagged ``marker``, once it
    runs (read from pg_stat_activity: the statement is on the server, not just sent)."""
    query = "SELECT pid FROM pg_stat_activity WHERE state = 'active' AND query LIKE %s"
    while True:
        row = watcher.execute(query, (f"%{marker}%",)).fetchone()
        if row is not None and row[0] != watcher.info.backend_pid:
            return int(row[0])
        await asyncio.sleep(0.01)


@pytest.mark.postgres
def test_pool_wait_in_the_url_is_how_long_each_pool_waits(pg_url: str) -> None:
    """With ``pool_wait=0.01`` every pool of the store gives up on a full pool after
    0.01 s, and says so; libpq never sees the option (the connections open)."""
    store = SqlSagaStore(with_query(pg_url, pool_size="1", pool_wait="0.01"), PostgresDialect())
    native = store.native_async()
    try:
        hot: Any = store.hot
        with hot.connections.cursor(), pytest.raises(StorageUnavailableError) as hot_full:
            hot.load(str(uuid.uuid4()))
        assert "1 in use for 0.01 s" in str(hot_full.value)
        held = store.engine.raw_connection()
        with pytest.raises(StorageUnavailableError) as store_full:
            store.once(lambda connection: connection.exec_driver_sql("SELECT 1"))
        assert "timeout 0.01" in str(store_full.value)
        held.close()
        assert isinstance(native, PostgresAsyncStore)

        async def main() -> None:
            pool = native._here()
            lent = await pool.lend()  # the only connection
            with pytest.raises(StorageUnavailableError) as async_full:
                await native._execute("SELECT 1", {})
            assert "1 in use for 0.01 s" in str(async_full.value)
            pool.give_back(lent)
            await native.close()

        asyncio.run(main())
    finally:
        store.close()


@pytest.mark.postgres
def test_pool_wait_zero_gives_up_at_once_on_a_full_pool(pg_url: str) -> None:
    store = SqlSagaStore(with_query(pg_url, pool_size="1", pool_wait="0"), PostgresDialect())
    try:
        hot: Any = store.hot
        assert execute_one(hot.connections, "SELECT 1", {}) == (1,)  # free: taken at once
        with hot.connections.cursor(), pytest.raises(StorageUnavailableError, match="for 0 s"):
            execute_one(hot.connections, "SELECT 1", {})
    finally:
        store.close()
