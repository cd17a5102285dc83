"""The hot path's own connections (``saga.adapters.sql.pg_connections``): one that the
server ended is closed and replaced, and a forked child opens its own instead of
taking its parent's."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from saga.adapters.sql import SqlSagaStore
from saga.adapters.sql.pg_hot import execute_one
from saga.adapters.sql.postgres import PostgresDialect

from saga import StorageUnavailableError
from tests.postgres import libpq_url

pytestmark = pytest.mark.postgres


@pytest.fixture
def hot(pg_url: str) -> Iterator[Any]:
    """The hot path of a fresh store, one connection opened and idle."""
    store = SqlSagaStore(pg_url, PostgresDialect())
    try:
        assert store.hot is not None
        store.ensure_schema()
        store.hot.load(str(uuid.uuid4()))  # type: ignore[attr-defined]
        yield store.hot
    finally:
        store.close()


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
