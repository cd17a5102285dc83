"""What differs between SQL backends; the store holds everything portable."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar, runtime_checkable

from sqlalchemy import ColumnElement, Connection, Engine, Insert, Select, Table

from saga._internal.policy import RetryPolicy
from saga._internal.ports import AsyncSagaStore, Commit, SagaRecord, SagaStore

T = TypeVar("T")


class HotPath(Protocol):
    """Creation and commits, applied without the portable path's round trips."""

    def create(self, saga: SagaRecord, first: Commit, lease_ttl: float) -> bool: ...

    def commit(self, change: Commit) -> bool | None: ...

    def close(self) -> None: ...


@runtime_checkable
class LoadsInOneStatement(Protocol):
    """A hot path that also reads a saga with its steps in one statement (PostgreSQL:
    one statement sees one snapshot, where the portable read needs a transaction)."""

    def load(self, saga_id: str) -> SagaRecord | None: ...

    def find(self, name: str, key: str) -> SagaRecord | None: ...

    def clash(self, saga: SagaRecord) -> tuple[SagaRecord, bool]: ...


class SqlStore(SagaStore, Protocol):
    """What a dialect's native async form needs of the SQL store it serves."""

    engine: Engine
    dialect: Dialect
    retry: RetryPolicy
    hot: HotPath | None

    @property
    def schema_ready(self) -> bool: ...

    def ensure_schema(self) -> None: ...

    def once(self, work: Callable[[Connection], T]) -> T:
        """``work`` in one transaction of the store, not retried."""
        ...


class Dialect(Protocol):
    """Backend details the portable store asks for."""

    name: str

    @property
    def read_isolation(self) -> str | None:
        """The isolation level of read-only transactions (a saga row and its steps are
        read by separate statements, which must see one snapshot), or None: the default."""
        ...

    def create_engine(self, url: str) -> Engine: ...

    def hot_path(self, url: str) -> HotPath | None:
        """A faster way to create sagas and apply commits, if the backend has one."""
        ...

    def native_async(self, store: SqlStore) -> AsyncSagaStore | None:
        """An async form of ``store`` native to the backend, if it has one."""
        ...

    def now(self) -> ColumnElement[float]:
        """The database clock as seconds since the epoch."""
        ...

    def creation_time(self) -> ColumnElement[float]:
        """A new saga's ``created_at``: the clock, made later than every saga's before
        it where the clock alone could tie (lists are ordered by it, newest first)."""
        ...

    def insert_ignoring_conflicts(self, table: Table) -> Insert:
        """``INSERT`` that silently skips a row clashing with a unique key."""
        ...

    def lock_for_claim(self, query: Select[Any]) -> Select[Any]:
        """Make the stuck-saga scan skip rows another claimer holds."""
        ...

    def lock_schema(self, connection: Any) -> None:
        """Serialise concurrent schema creation."""
        ...
