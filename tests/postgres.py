"""Where the tests' PostgreSQL comes from, and isolated schemas and databases on it.

``SAGA_TEST_DATABASE_URL`` when set, else a testcontainers PostgreSQL when
Docker is available, else PostgreSQL tests skip with the reason, except
when ``SAGA_REQUIRE_POSTGRES=1`` (CI), where they fail.
"""

from __future__ import annotations

import contextlib
import gc
import os
import uuid
import warnings
from collections.abc import Iterator
from urllib.parse import quote

import psycopg
from psycopg import sql

ENV_URL = "SAGA_TEST_DATABASE_URL"
ENV_REQUIRED = "SAGA_REQUIRE_POSTGRES"


def required() -> bool:
    return os.environ.get(ENV_REQUIRED) == "1"


def libpq_url(url: str) -> str:
    """The same URL without SQLAlchemy's driver suffix, for psycopg itself."""
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


def saga_url(url: str) -> str:
    return url.replace("postgresql://", "postgresql+psycopg://", 1)


@contextlib.contextmanager
def server_url() -> Iterator[str | None]:
    """A reachable PostgreSQL server URL, or None (with the reason printed)."""
    url = os.environ.get(ENV_URL)
    if url:
        yield saga_url(url)
        return
    try:  # testcontainers >= 4.15 moved it; the old path warns (an error under pytest)
        from testcontainers.community.postgres import PostgresContainer
    except ImportError:
        try:
            from testcontainers.postgres import PostgresContainer
        except ImportError:
            yield None
            return
    started = False
    try:
        container = PostgresContainer("postgres:15", driver="psycopg")
        container.start()
        started = True
    except Exception:  # no Docker: the caller skips with a reason
        pass
    if not started:
        with warnings.catch_warnings():  # docker-py leaves its socket to the collector
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()
        yield None
        return
    try:
        yield container.get_connection_url()
    finally:
        container.stop()


def with_query(url: str, **params: str) -> str:
    separator = "&" if "?" in url else "?"
    return url + separator + "&".join(f"{k}={quote(v)}" for k, v in params.items())


@contextlib.contextmanager
def isolated_schema(url: str) -> Iterator[str]:
    """A fresh schema, dropped afterwards; the URL's search_path points at it."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(libpq_url(url), autocommit=True) as connection:
        connection.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    try:
        yield with_query(url, options=f"-csearch_path={schema}")
    finally:
        with psycopg.connect(libpq_url(url), autocommit=True) as connection:
            connection.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


@contextlib.contextmanager
def isolated_database(url: str) -> Iterator[str]:
    """A fresh database (for server-wide counters such as xact_commit), dropped afterwards."""
    name = f"saga_t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(libpq_url(url), autocommit=True) as connection:
        connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    base, _, query = url.partition("?")
    database_url = base.rsplit("/", 1)[0] + "/" + name + (("?" + query) if query else "")
    try:
        yield database_url
    finally:
        with psycopg.connect(libpq_url(url), autocommit=True) as connection:
            connection.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
