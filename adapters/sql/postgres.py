"""PostgreSQL details: psycopg 3, server clock, SKIP LOCKED claims."""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, Engine, Insert, Select, Table, create_engine, func, text
from sqlalchemy.dialects.postgresql import insert

_SCHEMA_LOCK_KEY = 0x5A6A  # an arbitrary advisory-lock number reserved for saga's DDL


class PostgresDialect:
    name = "postgresql"

    def create_engine(self, url: str) -> Engine:
        return create_engine(
            url,
            # A terminated backend is noticed before a statement is sent on it.
            pool_pre_ping=True,
            # Bound values (user payloads) stay out of error messages.
            hide_parameters=True,
            connect_args={"connect_timeout": 5},
        )

    def now(self) -> ColumnElement[float]:
        # clock_timestamp(), not now(): now() is frozen at the transaction's start.
        return func.extract("epoch", func.clock_timestamp())

    def insert_ignoring_conflicts(self, table: Table) -> Insert:
        return insert(table).on_conflict_do_nothing()

    def lock_for_claim(self, query: Select[Any]) -> Select[Any]:
        # Rows another recoverer is claiming right now are skipped, not waited for.
        return query.with_for_update(skip_locked=True)

    def lock_schema(self, connection: Any) -> None:
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _SCHEMA_LOCK_KEY})
