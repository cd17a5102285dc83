"""What the SQL adapters say about a database: its URL, password hidden, and the
first line of a driver's error (the rest is the driver's traceback of the query)."""

from __future__ import annotations

from saga._internal._secrets import masked as masked  # every credential form, in one place
from saga._internal.errors import DatabaseRefusedError, StorageError, StorageUnavailableError
from saga._internal.ports import SagaRecord
from saga._internal.transient import refused_for_good


def first_line(error: BaseException) -> str:
    """The first line of a driver error's message (SQLAlchemy's wrapped one unwrapped),
    or its type name when it has none."""
    text = str(getattr(error, "orig", None) or error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def clash_not_found(saga: SagaRecord) -> StorageError:
    """A creation inserted nothing, yet neither its own row nor the one holding its
    (name, key) was there to read: the row was purged in between."""
    return StorageError(f"saga {saga.name!r} key {saga.key!r} clashed but was not found")


def pool_exhausted(detail: str) -> StorageUnavailableError:
    """Every connection of a pool stayed in use for its whole wait: more threads than
    connections, or statements that take long (retried, as an unreachable database)."""
    return StorageUnavailableError(
        f"no free connection in saga's pool ({detail}); raise pool_size in the database "
        "URL, or run fewer sagas at once"
    )


def refused(url: str, error: BaseException) -> DatabaseRefusedError:
    """The database at ``url`` refused us for good (a login or a database that is
    wrong): said with the URL, its password hidden, and where to mend it."""
    return DatabaseRefusedError(
        f"{masked(url)}: {first_line(error)}; check --db or $SAGA_DATABASE_URL "
        "(its user, password and database)"
    )


def not_connected(url: str, error: BaseException) -> StorageUnavailableError | DatabaseRefusedError:
    """What a connection to ``url`` that could not be made is: refused for good, which
    no retry mends, or unavailable (a server down or restarting: retried)."""
    if refused_for_good(error):
        return refused(url, error)
    return unavailable(url, error)


def unavailable(url: str, error: BaseException) -> StorageUnavailableError:
    """The database at ``url`` could not be reached, or dropped the connection mid-statement
    (retried): said with the URL, its password hidden, as the portable path says it."""
    return StorageUnavailableError(f"{masked(url)}: {first_line(error)}")


def statement_failed(url: str, error: BaseException) -> StorageError:
    """The database at ``url`` refused a statement (not retried), said as :func:`unavailable`."""
    return StorageError(f"{masked(url)}: {first_line(error)}")
