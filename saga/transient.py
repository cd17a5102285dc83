"""Which errors are worth another attempt: a dropped connection, a timeout, a server
restarting. ``is_transient`` is the default ``retry_on`` of a step.

The drivers a team's steps use raise their own classes on a dropped connection,
few of them subclasses of the builtin ``ConnectionError``: psycopg's and
pymysql's ``OperationalError``, SQLAlchemy's ``DisconnectionError``, redis-py's
``ConnectionError``, pika's ``AMQPConnectionError``, httpx's ``TransportError``.
They are recognised here by module and class name along the error's class
hierarchy, so that none of those libraries is imported to check.
"""

from __future__ import annotations

import errno
from collections.abc import Iterable

TRANSIENT_ERRNOS = frozenset(
    {
        errno.ECONNRESET,
        errno.ECONNREFUSED,
        errno.ECONNABORTED,
        errno.EPIPE,
        errno.ETIMEDOUT,
        errno.EHOSTUNREACH,
        errno.ENETUNREACH,
        errno.ENETDOWN,
        errno.ENETRESET,
        errno.EAGAIN,
    }
)
"""``OSError`` numbers that say the network, not the request, failed."""

TRANSIENT_CLASSES = frozenset(
    {
        # PostgreSQL
        "psycopg.OperationalError",
        "psycopg2.OperationalError",
        "asyncpg.exceptions.PostgresConnectionError",
        "asyncpg.exceptions.ConnectionDoesNotExistError",
        # SQLAlchemy (OperationalError wraps a driver's; DisconnectionError is a pool's)
        "sqlalchemy.exc.OperationalError",
        "sqlalchemy.exc.DisconnectionError",
        "sqlalchemy.exc.TimeoutError",
        # MySQL / MariaDB
        "pymysql.err.OperationalError",
        "pymysql.err.InterfaceError",
        "MySQLdb.OperationalError",
        "MySQLdb._exceptions.OperationalError",
        "mysql.connector.errors.OperationalError",
        "mysql.connector.errors.InterfaceError",
        # Redis
        "redis.exceptions.ConnectionError",
        "redis.exceptions.TimeoutError",
        "redis.exceptions.BusyLoadingError",
        # RabbitMQ
        "pika.exceptions.AMQPConnectionError",
        "pika.exceptions.StreamLostError",
        "pika.exceptions.ConnectionClosed",
        "pika.exceptions.ConnectionWrongStateError",
        "pika.exceptions.ChannelWrongStateError",
        "aio_pika.exceptions.AMQPConnectionError",
        "aiormq.exceptions.AMQPConnectionError",
        # HTTP clients
        "httpx.TransportError",
        "requests.exceptions.ConnectionError",
        "requests.exceptions.Timeout",
        "urllib3.exceptions.ProtocolError",
        "urllib3.exceptions.NewConnectionError",
        "aiohttp.client_exceptions.ClientConnectionError",
        "aiohttp.client_exceptions.ServerTimeoutError",
        # gRPC and cloud SDKs
        "botocore.exceptions.EndpointConnectionError",
        "botocore.exceptions.ConnectionClosedError",
        "botocore.exceptions.ReadTimeoutError",
    }
)
"""Classes (``module.QualifiedName``) that mean a lost or refused connection. A
refused login or an unknown database raises some of them too: those are told apart
(see ``refused_for_good``) and never retried."""


PERMANENT_CLASSES = frozenset(
    {
        "pika.exceptions.ProbableAuthenticationError",
        "pika.exceptions.ProbableAccessDeniedError",
        "pika.exceptions.AuthenticationError",
        "redis.exceptions.AuthenticationError",
    }
)
"""Subclasses of the classes above that no retry can fix: a refused login."""

_MYSQL_PERMANENT = frozenset({1044, 1045, 1049})  # access denied (db, user), unknown database
_PG_PERMANENT = ("does not exist", "authentication failed", "no pg_hba.conf entry")
_ANY_PERMANENT = ("unable to open database file",)  # SQLite: a path that cannot be


def refused_for_good(error: BaseException) -> bool:
    """A login or a database that is wrong, not unreachable: retrying cannot help."""
    names = set(class_names(error))
    if names & PERMANENT_CLASSES:
        return True
    cause = getattr(error, "orig", None) or error  # SQLAlchemy wraps the driver's error
    sqlstate = getattr(cause, "sqlstate", None)
    if isinstance(sqlstate, str) and sqlstate[:2] in ("28", "3D"):
        return True  # invalid authorization, invalid catalog (no such database)
    code = cause.args[0] if cause.args else None
    if isinstance(code, int) and code in _MYSQL_PERMANENT and "OperationalError" in str(names):
        return True
    text = str(cause)
    if any(phrase in text for phrase in _ANY_PERMANENT):
        return True
    return "FATAL:" in text and any(phrase in text for phrase in _PG_PERMANENT)


def class_names(error: BaseException) -> Iterable[str]:
    """``module.QualifiedName`` of the error's class and of every class it derives from."""
    return (f"{cls.__module__}.{cls.__qualname__}" for cls in type(error).__mro__)


def is_transient(error: BaseException) -> bool:
    """Whether ``error`` says a connection was lost, refused or timed out (so that the
    same call may well succeed in a moment), whichever library raised it."""
    if refused_for_good(error):
        return False
    if isinstance(error, ConnectionError | TimeoutError):
        return True
    if isinstance(error, OSError) and error.errno in TRANSIENT_ERRNOS:
        return True
    return any(name in TRANSIENT_CLASSES for name in class_names(error))
