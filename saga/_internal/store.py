"""Choosing a store from a URL; the backend is imported only when asked for."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from saga._internal.errors import ConfigurationError, DatabaseNotFoundError
from saga._internal.policy import STORE_RETRY, RetryPolicy
from saga._internal.ports import AsyncSagaStore, JoinsSessions, NativeAsync, SagaStore

DEFAULT_URL = "sqlite:///saga.db"
_log = logging.getLogger("saga.store")


def default_url() -> str:
    """``$SAGA_DATABASE_URL``, else the embedded SQLite file ``saga.db``."""
    return os.environ.get("SAGA_DATABASE_URL") or DEFAULT_URL


def normalise_url(url: str) -> str:
    """Accept plain ``postgresql://`` and ``postgres://`` as psycopg 3 URLs."""
    for prefix in ("postgresql://", "postgres://", "postgresql+psycopg2://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def open_store(
    url: str | None = None, retry: RetryPolicy = STORE_RETRY, create_tables: bool = True
) -> SagaStore:
    """The store for ``url`` (default: :func:`default_url`). Without ``create_tables``
    a missing SQLite file, or a database without saga's tables, is refused
    (``DatabaseNotFoundError``) instead of created. An empty URL is refused, not taken for
    the default: it is what an unset variable gives (``os.environ.get("DB_URL", "")``),
    and the default would write a production service's sagas to a local ``saga.db``."""
    if url is not None and not url.strip():
        raise ConfigurationError(
            "the database URL is empty; pass one (postgresql+psycopg://... or sqlite:///FILE), "
            "or none at all for $SAGA_DATABASE_URL, else sqlite:///saga.db"
        )
    url = normalise_url(url or default_url())
    scheme = url.split(":", 1)[0]
    if scheme in ("sqlite", "postgresql+psycopg"):
        from saga.adapters.sql import masked, open_sql_store

        if not create_tables:
            _refuse_missing_file(url)
        _log.debug("saga store: %s", masked(url))
        store = open_sql_store(url, retry)
        store.creates_schema = create_tables
        return store
    if scheme == "memory":
        from saga.adapters.memory import InMemorySagaStore

        return InMemorySagaStore()
    raise ConfigurationError(
        f"unknown database URL scheme {scheme!r}; use postgresql+psycopg://... or sqlite:///FILE"
    )


def async_store(store: SagaStore) -> AsyncSagaStore:
    """The async form of ``store``: its own native one if it has one (PostgreSQL's hot
    path: creations and commits as async statements), else its calls in worker threads."""
    if isinstance(store, NativeAsync):
        native = store.native_async()
        if native is not None:
            return native
    from saga.adapters.threaded_async import ThreadedAsyncStore

    return ThreadedAsyncStore(store)


def _refuse_missing_file(url: str) -> None:
    """A SQLite file that is not there: connecting would create it, empty."""
    from sqlalchemy.engine import make_url

    path = make_url(url).database
    if url.startswith("sqlite") and path and path != ":memory:" and not os.path.exists(path):
        raise DatabaseNotFoundError(
            f"no such database file: {os.path.abspath(path)}; check --db or $SAGA_DATABASE_URL "
            "(or run `saga db upgrade` to create it)"
        )


def use_session_factory(store: SagaStore, factory: Callable[..., Any]) -> None:
    """Install the application's session factory on a SQL store (checked there)."""
    if not isinstance(store, JoinsSessions):
        raise ConfigurationError(
            f"the store at {store.url} has no SQL transactions to join; "
            "session_factory needs a PostgreSQL or SQLite store"
        )
    store.use_session_factory(factory)
