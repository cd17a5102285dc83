"""The SQL store's core: its engine, its transactions, their retries and the schema.

Driver errors are translated here, at the adapter boundary, into
``StorageUnavailableError`` (the database is unreachable: retried, with
backoff, under the store's ``RetryPolicy``) or ``StorageError``. The statements
themselves live in :mod:`.reads`, :mod:`.writes` and :mod:`.claims`;
:mod:`.store` puts them together as the ``SagaStore``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, TypeVar

from sqlalchemy import Connection, select
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.orm import Session

from saga._internal.errors import StorageUnavailableError
from saga._internal.policy import STORE_RETRY, RetryPolicy

from . import revisions
from .binding import check_session_factory
from .dialect import Dialect
from .messages import (
    first_line,
    masked,
    not_connected,
    pool_exhausted,
    statement_failed,
    unavailable,
)
from .owner_liveness import OwnerLiveness

if TYPE_CHECKING:
    from . import migrate

T = TypeVar("T")


class SqlTransactions:
    """One SQL database's engine (and hot path), its transactions and its schema."""

    def __init__(self, url: str, dialect: Dialect, retry: RetryPolicy = STORE_RETRY) -> None:
        self.url = masked(url)
        self.dialect = dialect
        self.retry = retry
        self.engine = dialect.create_engine(url)
        self.hot = dialect.hot_path(url)
        self.liveness = OwnerLiveness(self.engine, dialect, getattr(dialect, "connect_args", {}))
        self.session_factory: Callable[..., Session] = Session
        self._schema_ready = False
        self.creates_schema = True  # first use creates saga's tables in an empty database

    def use_session_factory(self, factory: Callable[..., Session]) -> None:
        """Give transactional steps sessions made by ``factory`` (the application's
        ``sessionmaker``), refused with ``ConfigurationError`` unless it can only
        reach this store's database (see :mod:`saga.adapters.sql.binding`)."""
        check_session_factory(factory, self.engine.url)
        self.session_factory = factory

    # -- transactions -------------------------------------------------------------------

    @contextlib.contextmanager
    def translated(self) -> Iterator[None]:
        """Driver errors inside become ``StorageUnavailableError`` or ``StorageError``."""
        try:
            yield
        except (OperationalError, InterfaceError) as error:
            raise not_connected(self.url, error) from error
        except DBAPIError as error:
            if error.connection_invalidated:
                raise unavailable(self.url, error) from error
            raise statement_failed(self.url, error) from error
        except PoolTimeout as error:
            raise pool_exhausted(first_line(error)) from error
        except SQLAlchemyError as error:
            raise statement_failed(self.url, error) from error

    def transaction(self, work: Callable[[Connection], T]) -> T:
        """Run ``work`` in one transaction, retried while the database is unreachable."""
        return self.retried(lambda: self.once(work))

    def once(self, work: Callable[[Connection], T]) -> T:
        """Run ``work`` in one transaction, not retried (the caller's retry decides)."""
        self.ensure_schema()
        with self.translated(), self.engine.begin() as connection:
            return work(connection)

    def read(self, work: Callable[[Connection], T]) -> T:
        """Run ``work`` in one read-only transaction that sees one snapshot throughout."""

        def once() -> T:
            self.ensure_schema()
            with self.translated(), self.engine.connect() as connection:
                if self.dialect.read_isolation is not None:
                    connection.execution_options(isolation_level=self.dialect.read_isolation)
                with connection.begin():
                    return work(connection)

        return self.retried(once)

    def retried(self, work: Callable[[], T]) -> T:
        """``work()``; while the database is unreachable, tenacity retries it with backoff."""
        try:  # the common case pays nothing for the retry machinery
            return work()
        except StorageUnavailableError:
            pass
        for attempt in self.retry.retrying(attempts_used=1):
            with attempt:
                return work()
        raise AssertionError("unreachable: tenacity re-raises")  # pragma: no cover

    # -- the schema ---------------------------------------------------------------------

    @property
    def schema_ready(self) -> bool:
        """Whether this store has checked the schema (once, on first use)."""
        return self._schema_ready

    def ensure_schema(self) -> None:
        """Check the schema on first use (create it in an empty database)."""
        # Always called under the caller's retry: retrying here too would
        # multiply the time an unreachable database takes to report.
        if not self._schema_ready:
            if not self._at_head():
                # The migration machinery (and the shapes of every revision) is imported
                # only for a database not at this release's revision, or for `saga db`.
                from . import migrate

                migrate.check(self)
            self._schema_ready = True

    def _at_head(self) -> bool:
        with self.translated(), self.engine.connect() as connection:
            return revisions.at_head(connection)

    def create_schema(self) -> None:
        """Create the tables, or migrate them to this release's revision (``saga db
        upgrade``); a database saga does not recognise is refused, unchanged."""
        self.upgrade_schema()

    def schema_version(self) -> str | None:
        """The schema revision the database is at; None while saga's tables do not
        exist (creates nothing)."""
        return self.read_schema().at

    def read_schema(self) -> migrate.Found:
        """What the database holds of saga's schema (creates nothing)."""

        from . import migrate

        def read() -> migrate.Found:
            with self.translated(), self.engine.connect() as connection:
                return migrate.read(connection)

        return self.retried(read)

    def upgrade_schema(self) -> list[str]:
        """Migrate to this release's revision; the revisions applied, oldest first."""
        from . import migrate

        applied = self.retried(lambda: migrate.upgrade(self))
        self._schema_ready = True
        return applied

    def upgrade_schema_sql(self) -> str:
        """The SQL :meth:`upgrade_schema` would run, for a DBA (empty: nothing to do)."""
        from . import migrate

        return self.retried(lambda: migrate.upgrade_sql(self))

    def downgrade_schema(self, revision: str) -> list[str]:
        """Reverse the migrations after ``revision`` (refused where one cannot be)."""
        from . import migrate

        return self.retried(lambda: migrate.downgrade(self, revision))

    # -- the rest -----------------------------------------------------------------------

    def close(self) -> None:
        """Release the engine's connections (and the hot path's)."""
        self.liveness.close()
        self.engine.dispose()
        if self.hot is not None:
            self.hot.close()

    def now(self) -> float:
        """The database clock, in seconds since the epoch."""
        return self.transaction(lambda c: float(c.execute(select(self.dialect.now())).scalar_one()))
