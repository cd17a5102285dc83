"""The SQL store (PostgreSQL through psycopg 3, SQLite through the standard library)."""

from __future__ import annotations

from saga._internal.errors import ConfigurationError
from saga._internal.policy import STORE_RETRY, RetryPolicy

from .store import SqlSagaStore, masked

__all__ = ["SqlSagaStore", "masked", "open_sql_store"]


def open_sql_store(url: str, retry: RetryPolicy = STORE_RETRY) -> SqlSagaStore:
    """A store for a ``postgresql+psycopg://`` or ``sqlite:///`` URL."""
    if url.startswith("sqlite"):
        from .sqlite import SqliteDialect

        return SqlSagaStore(url, SqliteDialect(), retry)
    if url.startswith("postgresql+psycopg://"):
        from .postgres import PostgresDialect

        return SqlSagaStore(url, PostgresDialect(), retry)
    raise ConfigurationError(f"unsupported database URL {masked(url)}")
