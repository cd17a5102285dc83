"""Which errors are worth another attempt: a dropped connection, a timeout, a server
restarting. ``is_transient`` is the default ``retry_on`` of a step.

The drivers a team's steps use raise their own classes on a dropped connection,
few of them subclasses of the builtin ``ConnectionError``: psycopg's and
pymysql's ``OperationalError``, SQLAlchemy's ``DisconnectionError``, redis-py's
``ConnectionError``, pika's ``AMQPConnectionError``, httpx's ``TransportError``.
They are recognised here by module and class name along the error's class
hierarchy, so that none of those libraries is imported to check.

A database error says more than its class: psycopg raises ``OperationalError`` for
a lost connection and for ``currval`` before ``nextval``, pymysql for a deadlock and
for a failed ``CHECK``, sqlite3 for a locked database and for a typo. Such an error
is judged by its code first (PostgreSQL's SQLSTATE, MySQL's error number, SQLite's
result code; SQLAlchemy's wrapper by the driver error inside), and by its class only
when it carries none. docs/concepts.md has the table this module implements.
"""

from __future__ import annotations

import errno
import urllib.error
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

INVALID_REQUEST_CLASSES = frozenset(
    {
        "httpx.UnsupportedProtocol",  # a URL without http:// or https://
        "httpx.LocalProtocolError",  # a request h11 will not send (a bad header)
        "httpx.InvalidURL",
    }
)
"""Errors of the request itself, raised before anything reached the network (some
are ``httpx.TransportError``\\ s): the same request fails the same way again."""

PG_TRANSIENT_SQLSTATES = frozenset({"40000", "40001", "40003", "40P01", "55P03", "57014"})
"""SQLSTATEs worth another attempt: a transaction rolled back to break a serialization
conflict or a deadlock, a lock not available (``NOWAIT``, ``lock_timeout``), a statement
cancelled (``statement_timeout``)."""
PG_TRANSIENT_CLASSES = frozenset({"08", "53", "57"})
"""SQLSTATE classes worth another attempt: connection exception, insufficient resources
(too many connections, out of memory, disk full), operator intervention (shutdown,
restart)."""
PG_PERMANENT_SQLSTATES = frozenset({"53400", "57000", "57P04"})
"""Within those classes, no retry helps: a configured limit, a dropped database."""

MYSQL_TRANSIENT_ERRORS = frozenset(
    {
        1040,  # ER_CON_COUNT_ERROR: too many connections
        1053,  # ER_SERVER_SHUTDOWN
        1158,  # ER_NET_READ_ERROR
        1159,  # ER_NET_READ_INTERRUPTED
        1160,  # ER_NET_ERROR_ON_WRITE
        1161,  # ER_NET_WRITE_INTERRUPTED
        1205,  # ER_LOCK_WAIT_TIMEOUT (also NOWAIT's answer)
        1213,  # ER_LOCK_DEADLOCK
        1226,  # ER_USER_LIMIT_REACHED: max_user_connections
        1317,  # ER_QUERY_INTERRUPTED: KILL QUERY
        1927,  # ER_CONNECTION_KILLED (MariaDB)
        1969,  # ER_STATEMENT_TIMEOUT (MariaDB's max_statement_time)
        2002,  # CR_CONNECTION_ERROR: the local socket refused
        2003,  # CR_CONN_HOST_ERROR: the TCP connection refused
        2006,  # CR_SERVER_GONE_ERROR
        2013,  # CR_SERVER_LOST
        2055,  # CR_SERVER_LOST_EXTENDED
        3024,  # ER_QUERY_TIMEOUT (MySQL's max_execution_time)
        4031,  # ER_CLIENT_INTERACTION_TIMEOUT (MySQL 8)
    }
)
"""MySQL/MariaDB error numbers worth another attempt; any other number of 1000 or more
names a fault of the statement or its data (1054 unknown column, 1064 syntax, 1062
duplicate key, 1644 ``SIGNAL``, 4025 ``CHECK``)."""

SQLITE_TRANSIENT_CODES = frozenset({5, 6})
"""SQLite primary result codes worth another attempt: ``SQLITE_BUSY`` (another
connection holds the write lock past the busy timeout), ``SQLITE_LOCKED``."""

_PG_MODULES = ("psycopg.", "psycopg2.", "asyncpg.")
_MYSQL_MODULES = ("pymysql.", "MySQLdb.", "mysql.connector.", "asyncmy.")

_MYSQL_PERMANENT = frozenset({1044, 1045, 1049})  # access denied (db, user), unknown database
# A failed connection comes with no sqlstate from libpq: its FATAL line is all there is.
_PG_PERMANENT = (
    "does not exist",  # the role or the database
    "authentication failed",
    "no pg_hba.conf entry",
    "pg_hba.conf rejects",
    "is not permitted to log in",  # a role made NOLOGIN
    "permission denied for database",  # CONNECT revoked
)
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
    coded = _coded_verdict(error)
    if coded is not None:
        return coded
    if set(class_names(error)) & INVALID_REQUEST_CLASSES:
        return False
    if isinstance(error, urllib.error.URLError) and isinstance(error.reason, BaseException):
        return is_transient(error.reason)  # urllib wraps the socket's error: judge that one
    if isinstance(error, ConnectionError | TimeoutError):
        return True
    if isinstance(error, OSError) and error.errno in TRANSIENT_ERRNOS:
        return True
    return any(name in TRANSIENT_CLASSES for name in class_names(error))


def _coded_verdict(error: BaseException) -> bool | None:
    """The verdict of a database error's code (SQLSTATE, MySQL error number, SQLite
    result code); None when it carries none, so that its class decides."""
    if getattr(error, "connection_invalidated", False) is True:
        return True  # SQLAlchemy: the driver's connection is gone
    orig = getattr(error, "orig", None)  # SQLAlchemy's wrapper: the driver's error inside
    if isinstance(orig, BaseException) and orig is not error:
        inner = _coded_verdict(orig)
        if inner is not None:
            return inner
    names = tuple(class_names(error))
    if any(name.startswith(_PG_MODULES) for name in names):
        return _sqlstate_verdict(getattr(error, "sqlstate", None) or getattr(error, "pgcode", None))
    if any(name.startswith(_MYSQL_MODULES) for name in names):
        return _mysql_verdict(error)
    code = getattr(error, "sqlite_errorcode", None)
    if isinstance(code, int) and any(name.startswith("sqlite3.") for name in names):
        return code & 0xFF in SQLITE_TRANSIENT_CODES  # the primary code: extended ones add bits
    return None


def _sqlstate_verdict(sqlstate: object) -> bool | None:
    if not isinstance(sqlstate, str) or len(sqlstate) != 5:
        return None  # the client's own failure (a refused or broken connection)
    if sqlstate in PG_PERMANENT_SQLSTATES:
        return False
    return sqlstate in PG_TRANSIENT_SQLSTATES or sqlstate[:2] in PG_TRANSIENT_CLASSES


def _mysql_verdict(error: BaseException) -> bool | None:
    number = getattr(error, "errno", None)  # mysql.connector
    if not isinstance(number, int) or number < 0:
        number = error.args[0] if error.args else None  # pymysql, MySQLdb
    if not isinstance(number, int) or number < 1000:
        return None  # no server or client error number ("already closed"): the class decides
    return number in MYSQL_TRANSIENT_ERRORS
