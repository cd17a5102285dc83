"""The application's SQLAlchemy / SQLModel sessions in transactional steps.

A transactional step's ``ctx.session`` is bound to the saga store's own
transaction. By default it is a plain ``sqlalchemy.orm.Session``; an
application that configures its sessions (a ``sessionmaker`` with
``expire_on_commit=False``, ``class_=sqlmodel.Session``, event hooks ...)
installs its factory instead::

    SessionLocal = sessionmaker(engine, class_=sqlmodel.Session)
    coord = Coordinator(engine.url.render_as_string(hide_password=False),
                        session_factory=SessionLocal)
    # or, on a coordinator that already exists:
    install_session_factory(coord, SessionLocal)

The factory's own ``bind`` is only checked, never used: every session saga
makes is bound to the store's connection, joined through a savepoint. A
factory bound to another database, routing tables elsewhere (``binds=``) or
making ``AsyncSession`` objects is refused with ``ConfigurationError``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import Engine

from saga._internal.coordinator import Coordinator
from saga._internal.errors import ConfigurationError
from saga._internal.store import use_session_factory

from ..sql.binding import check_session_factory, same_database
from ..sql.transactions import SqlTransactions

__all__ = ["check_session_factory", "install_session_factory", "same_database", "store_engine"]


def install_session_factory(coord: Any, factory: Callable[..., Any]) -> None:
    """Make ``factory`` build the ``ctx.session`` of ``coord``'s transactional steps.

    ``coord`` is a ``Coordinator`` or an ``AsyncCoordinator``.
    """
    sync = coord if isinstance(coord, Coordinator) else coord.sync
    use_session_factory(sync.store, factory)


def store_engine(coord: Any) -> Engine:
    """The saga store's SQLAlchemy ``Engine``: where the tables that transactional
    steps write must live (create them with it, read them with it)."""
    sync = coord if isinstance(coord, Coordinator) else coord.sync
    store = sync.store
    if not isinstance(store, SqlTransactions):
        raise ConfigurationError(f"the store at {store.url} is not a SQL database")
    return store.engine
