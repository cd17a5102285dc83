"""Fresh saga stores for tests: a SQLite file, or a private schema on a PostgreSQL server."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

ENV_URL = "SAGA_TEST_DATABASE_URL"
"""A PostgreSQL server for the tests (``postgresql+psycopg://user@host:port/db``)."""


def sqlalchemy_url(url: str) -> str:
    """``postgresql://`` spelled with the psycopg driver SQLAlchemy needs."""
    return url.replace("postgresql://", "postgresql+psycopg://", 1)


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
    libpq = base.replace("postgresql+psycopg://", "postgresql://", 1)
    schema = f"saga_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(libpq, autocommit=True) as connection:
        connection.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    separator = "&" if "?" in base else "?"
    try:
        yield f"{base}{separator}options={quote(f'-csearch_path={schema}')}"
    finally:
        with psycopg.connect(libpq, autocommit=True) as connection:
            connection.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
