"""The hot path's own connections (``saga.adapters.sql.pg_connections``): one that the
server ended is closed and replaced, and a forked child opens its own instead of
taking its parent's."""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from saga.adapters.sql import SqlSagaStore
from saga.adapters.sql.pg_async import PostgresAsyncStore
from saga.adapters.sql.pg_hot import execute_one
from saga.adapters.sql.postgres import PostgresDialect
from sqlalchemy.engine import make_url

from saga import StorageError, StorageUnavailableError
from tests.postgres import libpq_url

pytestmark = pytest.mark.postgres


@contextlib.contextmanager
def hot_path(url: str) -> Iterator[Any]:
    """The hot path of a fresh store on ``url``, one connection opened and idle."""
    store = SqlSagaStore(url, PostgresDialect())
    try:
        assert store.hot is not None
        store.ensure_schema()
        store.hot.load(str(uuid.uuid4()))  # type: ignore[attr-defined]
        yield store.hot
    finally:
        store.close()


@pytest.fixture
def hot(pg_url: str) -> Iterator[Any]:
    with hot_path(pg_url) as path:
        yield path


def test_a_connection_the_server_ended_is_closed_and_replaced(
    hot: Any, postgres_server: str
) -> None:
    (backend,) = execute_one(hot.connections, "SELECT pg_backend_pid()", {})
    with psycopg.connect(libpq_url(postgres_server), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (backend,))
    with pytest.raises(StorageUnavailableError):
        hot.load(str(uuid.uuid4()))
    assert hot.load(str(uuid.uuid4())) is None  # on a connection opened for it
    (replacement,) = execute_one(hot.connections, "SELECT pg_backend_pid()", {})
    assert replacement != backend
    assert hot.connections.opened == 2


# The test servers trust every local login (CI's and the embedded one): a password in
# the URL is sent and ignored, so the messages below can be checked for it.
PASSWORD = "pw-" + uuid.uuid4().hex


def with_password(url: str) -> str:
    return make_url(url).set(password=PASSWORD).render_as_string(hide_password=False)


@pytest.fixture
def hot_with_password(pg_url: str) -> Iterator[Any]:
    """The hot path of a store whose URL carries a password."""
    with hot_path(with_password(pg_url)) as path:
        yield path


def test_a_connection_lost_mid_statement_names_the_database_not_its_password(
    hot_with_password: Any, postgres_server: str
) -> None:
    connections = hot_with_password.connections
    (backend,) = execute_one(connections, "SELECT pg_backend_pid()", {})
    with psycopg.connect(libpq_url(postgres_server), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (backend,))
    with pytest.raises(StorageUnavailableError) as lost:
        execute_one(connections, "SELECT 1", {})
    said = str(lost.value)
    assert said.startswith("postgresql+psycopg://postgres:***@"), said  # the URL as given
    assert PASSWORD not in said


def test_a_statement_the_database_refuses_names_it_too(hot_with_password: Any) -> None:
    with pytest.raises(StorageError) as refused:
        execute_one(hot_with_password.connections, "SELECT 1 / 0", {})
    said = str(refused.value)
    assert not isinstance(refused.value, StorageUnavailableError)  # not retried
    assert said.startswith("postgresql+psycopg://postgres:***@"), said
    assert "division by zero" in said
    assert PASSWORD not in said


def test_the_async_hot_path_names_the_database_as_the_sync_one(pg_url: str) -> None:
    store = SqlSagaStore(with_password(pg_url), PostgresDialect())
    native = PostgresAsyncStore(store, connect_args={})

    async def divide_by_zero() -> str:
        try:
            with pytest.raises(StorageError) as refused:
                await native._execute("SELECT 1 / 0", {})
            return str(refused.value)
        finally:
            await native.close()

    try:
        said = asyncio.run(divide_by_zero())
    finally:
        store.close()
    assert said.startswith("postgresql+psycopg://postgres:***@"), said
    assert "division by zero" in said
    assert PASSWORD not in said


def test_a_forked_child_opens_a_connection_of_its_own(hot: Any) -> None:
    (parents,) = execute_one(hot.connections, "SELECT pg_backend_pid()", {})
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through its exit code
        try:
            (own,) = execute_one(hot.connections, "SELECT pg_backend_pid()", {})
            os._exit(0 if own != parents else 3)
        except BaseException:  # noqa: BLE001 - anything else is a failure too
            os._exit(4)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    # The parent's connection was left alone: it still answers, and is still the one.
    assert execute_one(hot.connections, "SELECT pg_backend_pid()", {}) == (parents,)
    assert hot.connections.opened == 1


def test_after_close_the_pool_opens_connections_again(hot: Any) -> None:
    with hot.connections.cursor() as lent:  # in use while the pool is closed
        hot.connections.close()
    assert lent.connection.closed  # closed as it came back, not kept
    assert hot.load(str(uuid.uuid4())) is None
    assert hot.connections.opened == 2


def test_a_child_forked_while_every_connection_is_in_use_has_its_own(pg_url: str) -> None:
    store = SqlSagaStore(pg_url, PostgresDialect(pool_size=1, pool_wait=0.5))
    try:
        hot: Any = store.hot
        with hot.connections.cursor():  # the parent's only connection, in use at the fork
            child = os.fork()
            if child == 0:  # pragma: no cover - the child reports through its exit code
                try:
                    os._exit(0 if execute_one(hot.connections, "SELECT 1", {}) == (1,) else 3)
                except BaseException:  # noqa: BLE001 - the pool stayed full: a failure
                    os._exit(4)
            _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        store.close()
