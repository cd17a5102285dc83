"""Which database a session factory reaches, checked against the saga store's.

A transactional step's writes commit in the store's transaction, so they can
only ever land in the store's own database. An application that installs its
``sessionmaker`` (``Coordinator(url, session_factory=...)``) gets it checked
here, once, before anything runs: bound to another database, routed through
per-table ``binds``, or asynchronous, it is refused with a clear error rather
than writing outside the transaction that records the step.

The check compares URLs (no connection is opened): the backend, then the
file for SQLite, or the host, port and database name for PostgreSQL, with
``localhost``, ``127.0.0.1`` and ``::1`` taken as one host.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from sqlalchemy.engine import URL, make_url

from saga._internal.errors import ConfigurationError

_LOOPBACK = frozenset({"", "localhost", "127.0.0.1", "::1", "[::1]"})
_DEFAULT_PORTS = {"postgresql": 5432}


def check_session_factory(factory: Callable[..., Any], store_url: URL | str) -> None:
    """Refuse ``factory`` unless its sessions can only reach the store's database."""
    if not callable(factory):
        raise ConfigurationError(f"session_factory must be callable, not {factory!r}")
    options: dict[str, Any] = getattr(factory, "kw", None) or {}  # a sessionmaker's options
    session_class = getattr(factory, "class_", factory)
    if _is_async(session_class):
        raise ConfigurationError(
            "session_factory makes asynchronous sessions; transactional steps take a "
            "synchronous Session (they run in a worker thread): pass a sessionmaker"
        )
    if options.get("binds"):
        raise ConfigurationError(
            "session_factory routes tables to engines of their own (binds=...): a "
            "transactional step's writes would leave the transaction that records the step"
        )
    bind = options.get("bind")
    if bind is None:  # unbound: saga binds each session to its own transaction
        return
    app_url = bound_url(bind)
    if not same_database(app_url, store_url):
        raise ConfigurationError(
            f"session_factory is bound to {_shown(app_url)}, but saga stores its records in "
            f"{_shown(store_url)}: a transactional step commits in the saga store's database, "
            "so the application's tables must live there (open the Coordinator on the "
            "application's database), or call the other database from an ordinary, "
            "idempotent step"
        )


def bound_url(bind: Any) -> URL:
    """The URL of an Engine or Connection (or of a URL string)."""
    if isinstance(bind, str | URL):
        return make_url(bind)
    engine = getattr(bind, "engine", None)
    url = getattr(engine, "url", None)
    if url is None:
        raise ConfigurationError(f"session_factory is bound to {bind!r}, which has no URL")
    return make_url(url)


def same_database(left: URL | str, right: URL | str) -> bool:
    """Whether two URLs name the same database (driver and credentials aside)."""
    a, b = make_url(left), make_url(right)
    if a.get_backend_name() != b.get_backend_name():
        return False
    if a.get_backend_name() == "sqlite":
        return _sqlite_file(a) is not None and _sqlite_file(a) == _sqlite_file(b)
    return _server(a) == _server(b) and (a.database or "") == (b.database or "")


def _sqlite_file(url: URL) -> str | None:
    """The database file's real path; None for in-memory databases (never shared)."""
    database = url.database or ""
    if database in ("", ":memory:") or url.query.get("mode") == "memory":
        return None
    return os.path.realpath(database.removeprefix("file:"))


def _server(url: URL) -> tuple[str, int | None]:
    host = (url.host or str(url.query.get("host", "")) or "").lower()
    port = url.port or _DEFAULT_PORTS.get(url.get_backend_name())
    return ("localhost" if host in _LOOPBACK else host), port


def _shown(url: URL | str) -> str:
    return make_url(url).render_as_string(hide_password=True)


def _is_async(session_class: Any) -> bool:
    # By name: importing sqlalchemy.ext.asyncio needs greenlet, which saga does not.
    mro = getattr(session_class, "__mro__", ())
    return any(cls.__name__ == "AsyncSession" for cls in mro)
