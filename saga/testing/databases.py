"""Fresh saga stores for tests: a SQLite file, or a private schema on a PostgreSQL server."""

from __future__ import annotations

import contextlib
import queue
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

KEPT_TABLES = ("saga_schema_version", "saga_schema_revision")
"""Tables :class:`StorePool` keeps when it empties a schema for its next user: the
schema's version and migration revision (emptied, the store would refuse the schema)."""

ENV_URL = "SAGA_TEST_DATABASE_URL"
"""A PostgreSQL server for the tests (``postgresql+psycopg://user@host:port/db``)."""


def sqlalchemy_url(url: str) -> str:
    """``postgresql://`` spelled with the psycopg driver SQLAlchemy needs."""
    return url.replace("postgresql://", "postgresql+psycopg://", 1)


def _libpq(url: str) -> str:
    return sqlalchemy_url(url).replace("postgresql+psycopg://", "postgresql://", 1)


@contextlib.contextmanager
def fresh_store(server: str | None, directory: Path, name: str = "saga") -> Iterator[str]:
    """A saga URL no one else uses: ``directory/NAME.db`` when ``server`` is None, else a
    new schema on that PostgreSQL server (its ``search_path``), dropped afterwards."""
    if not server:
        yield f"sqlite:///{directory / name}.db"
        return
    import psycopg
    from psycopg import sql

    base = sqlalchemy_url(server)
    libpq = _libpq(server)
    schema = f"saga_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(libpq, autocommit=True) as connection:
        connection.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    separator = "&" if "?" in base else "?"
    try:
        yield f"{base}{separator}options={quote(f'-csearch_path={schema}')}"
    finally:
        with psycopg.connect(libpq, autocommit=True) as connection:
            connection.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


class StorePool:
    """Empty saga stores, one per case of a crash matrix, each with a coordinator to read it.

    SQLite: a new file each time. PostgreSQL: creating saga's tables costs
    far more than a case (DDL, hundreds of milliseconds on a busy server), so
    schemas are reused: once a case is done its schema is emptied (TRUNCATE
    of every table but saga's schema version) and lent again, and all of them
    are dropped by :meth:`close`. Tables a ``setup`` created survive, empty.
    """

    def __init__(self, server: str | None, directory: Path) -> None:
        self.server = server
        self.directory = directory
        self._idle: queue.SimpleQueue[Store] = queue.SimpleQueue()
        self._stack = contextlib.ExitStack()

    @contextlib.contextmanager
    def store(self, name: str) -> Iterator[Store]:
        """An empty store for the block (``name`` names a SQLite file)."""
        if not self.server:
            with contextlib.closing(Store(f"sqlite:///{self.directory / name}.db")) as store:
                yield store
            return
        try:
            store = self._idle.get_nowait()
        except queue.Empty:
            url = self._stack.enter_context(fresh_store(self.server, self.directory))
            store = self._stack.enter_context(contextlib.closing(Store(url, self.server)))
        try:
            yield store
        finally:
            store.empty()
            self._idle.put(store)

    def close(self) -> None:
        """Close every store and drop every schema made."""
        self._stack.close()


class Store:
    """One store lent by :class:`StorePool`: its ``url`` and a ``coordinator`` that reads it."""

    def __init__(self, url: str, server: str | None = None) -> None:
        self.url = url
        self._server = server
        self._coordinator: Any = None
        self._connection: Any = None

    @property
    def coordinator(self) -> Any:
        """A ``Coordinator`` on this store, made on first use and kept."""
        if self._coordinator is None:
            from saga._internal.coordinator import Coordinator

            self._coordinator = Coordinator(self.url)
        return self._coordinator

    def empty(self) -> None:
        """Delete every row but saga's schema version (PostgreSQL stores only)."""
        import psycopg
        from psycopg import sql

        assert self._server is not None
        if self._connection is None:
            self._connection = psycopg.connect(_libpq(self._server), autocommit=True)
        schema = self.url.rpartition("search_path%3D")[2]
        rows = self._connection.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)
        ).fetchall()
        tables = [sql.Identifier(schema, r[0]) for r in rows if r[0] not in KEPT_TABLES]
        if tables:
            statement: Any = sql.SQL("TRUNCATE {} RESTART IDENTITY CASCADE")
            self._connection.execute(statement.format(sql.SQL(", ").join(tables)))

    def close(self) -> None:
        if self._coordinator is not None:
            self._coordinator.close()
        if self._connection is not None:
            self._connection.close()
