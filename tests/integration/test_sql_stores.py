"""The SQL stores keep the SagaStore contract (tests/store_contract.py): SQLite on a
real file, PostgreSQL on a private schema; and the async forms of both."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from saga.adapters.sql.pg_async import PostgresAsyncStore
from saga.adapters.sql.store import SqlSagaStore
from saga.adapters.threaded_async import ThreadedAsyncStore

from saga._internal.ports import (
    AsyncSagaStore,
    Deletable,
    JoinsSessions,
    MigratableSchema,
    SagaStore,
)
from saga._internal.store import async_store, open_store
from tests.store_contract import AsyncStoreContract, StoreContract


def _opened(url: str) -> Iterator[SqlSagaStore]:
    store = open_store(url)
    assert isinstance(store, SqlSagaStore)
    try:
        yield store
    finally:
        store.close()


class TestSqliteStore(StoreContract):
    @pytest.fixture
    def store(self, sqlite_url: str) -> Iterator[SagaStore]:
        yield from _opened(sqlite_url)

    def test_a_sql_store_has_every_optional_capability(self, store: SagaStore) -> None:
        for capability in (Deletable, JoinsSessions, MigratableSchema):
            assert isinstance(store, capability)


@pytest.mark.postgres
class TestPostgresStore(StoreContract):
    @pytest.fixture
    def store(self, pg_url: str) -> Iterator[SagaStore]:
        yield from _opened(pg_url)


class TestThreadedAsyncOnSqlite(AsyncStoreContract):
    @pytest.fixture
    def store(self, sqlite_url: str) -> Iterator[AsyncSagaStore]:
        for sync in _opened(sqlite_url):
            native = async_store(sync)
            assert type(native) is ThreadedAsyncStore  # sqlite3 has no async interface
            yield native


@pytest.mark.postgres
class TestPostgresAsyncStore(AsyncStoreContract):
    @pytest.fixture
    def store(self, pg_url: str) -> Iterator[AsyncSagaStore]:
        for sync in _opened(pg_url):
            native = async_store(sync)
            assert isinstance(native, PostgresAsyncStore)  # creations and commits native
            yield native
