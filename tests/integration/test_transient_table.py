"""The table of docs/concepts.md ("Which errors are transient"), row by row: each error
is raised by the real server or client (a SQLite file, PostgreSQL, MariaDB through
pymysql, httpx and urllib against a local port) and must get the verdict the table
gives it, raw and, for databases, inside SQLAlchemy's wrapper as well."""

from __future__ import annotations

import contextlib
import socket
import sqlite3
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pymysql
import pytest
from sqlalchemy import create_engine, exc, text

from saga import Coordinator, Saga, SagaFailed, SagaStatus, StepContext
from saga._internal.transient import is_transient
from tests import participants, postgres


def _raised(action: Callable[[], Any]) -> BaseException:
    try:
        action()
    except Exception as error:  # noqa: BLE001 - the error is what the test looks at
        return error
    raise AssertionError("no error was raised")


def _wrapped(error: BaseException, base: type[BaseException]) -> BaseException:
    """The error as SQLAlchemy hands it to a step (its own class around the driver's)."""
    wrapper: BaseException = exc.DBAPIError.instance("SELECT 1", None, error, base)  # type: ignore[arg-type]
    assert getattr(wrapper, "orig", None) is error
    return wrapper


@contextlib.contextmanager
def _closed_port() -> Iterator[int]:
    """A port on 127.0.0.1 where nothing listens (connecting is refused)."""
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = int(probe.getsockname()[1])
    probe.close()
    yield port


@contextlib.contextmanager
def _silent_server() -> Iterator[int]:
    """A port whose kernel accepts connections that nobody ever reads or answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    try:
        yield int(server.getsockname()[1])
    finally:
        server.close()


@contextlib.contextmanager
def _hanging_up_server() -> Iterator[int]:
    """A port whose server accepts one connection and closes it without a word."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)

    def hang_up() -> None:
        connection, _ = server.accept()
        connection.recv(65536)
        connection.close()

    thread = threading.Thread(target=hang_up)
    thread.start()
    try:
        yield int(server.getsockname()[1])
    finally:
        thread.join(60)
        server.close()


# -- PostgreSQL: by SQLSTATE (none: the client's own connection failure) -------------------


def _pg_refused(dsn: str) -> BaseException:
    with _closed_port() as port:
        return _raised(lambda: psycopg.connect(f"host=127.0.0.1 port={port} connect_timeout=5"))


def _pg_terminated(dsn: str) -> BaseException:
    with psycopg.connect(dsn, autocommit=True) as victim, psycopg.connect(dsn) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (victim.info.backend_pid,))
        return _raised(lambda: victim.execute("SELECT 1"))


def _pg_table(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as setup:
        setup.execute("CREATE TABLE IF NOT EXISTS item (id int PRIMARY KEY, n int)")
        setup.execute("INSERT INTO item VALUES (1, 0), (2, 0) ON CONFLICT DO NOTHING")


def _pg_serialization_failure(dsn: str) -> BaseException:
    _pg_table(dsn)
    with psycopg.connect(dsn) as reader, psycopg.connect(dsn, autocommit=True) as writer:
        reader.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        reader.execute("SELECT n FROM item WHERE id = 1")  # its snapshot is taken
        writer.execute("UPDATE item SET n = 1 WHERE id = 1")
        return _raised(lambda: reader.execute("UPDATE item SET n = 2 WHERE id = 1"))


def _pg_deadlock(dsn: str) -> BaseException:
    """Each holds one row and asks for the other's: whatever the order of the second
    updates, both end up waiting on each other and the server breaks one."""
    _pg_table(dsn)
    errors: list[BaseException] = []
    with psycopg.connect(dsn) as one, psycopg.connect(dsn) as two:
        for connection in (one, two):
            connection.execute("SET deadlock_timeout = '50ms'")
        one.execute("UPDATE item SET n = n + 1 WHERE id = 1")
        two.execute("UPDATE item SET n = n + 1 WHERE id = 2")

        def cross(connection: psycopg.Connection[Any], row: int) -> None:
            try:
                connection.execute("UPDATE item SET n = n + 1 WHERE id = %s", (row,))
            except psycopg.Error as error:
                errors.append(error)
                connection.rollback()  # its locks go: the other one goes on

        threads = [
            threading.Thread(target=cross, args=(one, 2)),
            threading.Thread(target=cross, args=(two, 1)),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    assert len(errors) == 1, errors
    return errors[0]


def _pg_too_many_connections(dsn: str) -> BaseException:
    role = f"saga_t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN CONNECTION LIMIT 0")  # our own characters
        try:
            return _raised(lambda: psycopg.connect(dsn, user=role))
        finally:
            admin.execute(f"DROP ROLE {role}")


def _pg_lock_not_available(dsn: str) -> BaseException:
    _pg_table(dsn)
    with psycopg.connect(dsn) as holder, psycopg.connect(dsn) as other:
        holder.execute("SELECT n FROM item WHERE id = 1 FOR UPDATE")
        return _raised(lambda: other.execute("SELECT n FROM item WHERE id = 1 FOR UPDATE NOWAIT"))


def _pg_not_in_prerequisite_state(dsn: str) -> BaseException:
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute("CREATE SEQUENCE IF NOT EXISTS counter")
        return _raised(lambda: connection.execute("SELECT currval('counter')"))


def _pg_object_in_use(dsn: str) -> BaseException:
    name = f"saga_t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")  # our own characters
        try:
            with psycopg.connect(dsn, dbname=name):
                return _raised(lambda: admin.execute(f"DROP DATABASE {name}"))
        finally:
            admin.execute(f"DROP DATABASE IF EXISTS {name}")


def _pg_statement(statement: str) -> Callable[[str], BaseException]:
    def produce(dsn: str) -> BaseException:
        _pg_table(dsn)
        with psycopg.connect(dsn, autocommit=True) as connection:
            return _raised(lambda: connection.execute(statement))

    return produce


PG_ROWS = [
    ("08-refused", _pg_refused, True),
    ("57P01-terminated", _pg_terminated, True),
    ("40001-serialization", _pg_serialization_failure, True),
    ("40P01-deadlock", _pg_deadlock, True),
    ("53300-too-many-connections", _pg_too_many_connections, True),
    ("55P03-lock-not-available", _pg_lock_not_available, True),
    (
        "57014-statement-timeout",
        _pg_statement("SET statement_timeout = 1; SELECT pg_sleep(5)"),
        True,
    ),
    ("55000-not-in-prerequisite-state", _pg_not_in_prerequisite_state, False),
    ("55006-object-in-use", _pg_object_in_use, False),
    ("42601-syntax", _pg_statement("SELEC 1"), False),
    ("42703-unknown-column", _pg_statement("SELECT nope FROM item"), False),
    ("23505-unique", _pg_statement("INSERT INTO item VALUES (1, 0)"), False),
    ("22012-division-by-zero", _pg_statement("SELECT 1 / 0"), False),
    ("P0001-raise", _pg_statement("DO $$ BEGIN RAISE EXCEPTION 'refused'; END $$"), False),
]


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("produce", "transient"), [r[1:] for r in PG_ROWS], ids=[r[0] for r in PG_ROWS]
)
def test_postgres_errors_are_judged_by_sqlstate(
    pg_url: str, produce: Callable[[str], BaseException], transient: bool
) -> None:
    error = produce(postgres.libpq_url(pg_url))
    assert isinstance(error, psycopg.Error), repr(error)
    assert is_transient(error) is transient, repr(error)
    assert is_transient(_wrapped(error, psycopg.Error)) is transient


# -- MariaDB: by error number ---------------------------------------------------------------


@pytest.fixture
def mariadb() -> Iterator[dict[str, Any]]:
    """Connection arguments for a fresh MariaDB database holding one table."""
    with participants.mariadb_database() as url:
        arguments = {**participants.MARIADB, "database": url.rsplit("/", 1)[1]}
        with (
            pymysql.connect(**arguments, autocommit=True) as connection,
            connection.cursor() as cursor,
        ):
            cursor.execute("CREATE TABLE item (id INT PRIMARY KEY, n INT CHECK (n >= 0))")
            cursor.execute("INSERT INTO item VALUES (1, 0), (2, 0)")
        yield arguments


def _my_refused(arguments: dict[str, Any]) -> BaseException:
    with _closed_port() as port:
        return _raised(lambda: pymysql.connect(**{**arguments, "port": port}))


def _my_killed(arguments: dict[str, Any]) -> BaseException:
    with pymysql.connect(**arguments) as victim, pymysql.connect(**arguments) as admin:
        admin.cursor().execute("KILL %s", (victim.thread_id(),))
        return _raised(lambda: victim.cursor().execute("SELECT 1"))


def _my_deadlock(arguments: dict[str, Any]) -> BaseException:
    errors: list[BaseException] = []
    with pymysql.connect(**arguments) as one, pymysql.connect(**arguments) as two:
        one.cursor().execute("UPDATE item SET n = n + 1 WHERE id = 1")
        two.cursor().execute("UPDATE item SET n = n + 1 WHERE id = 2")

        def cross(connection: pymysql.Connection[Any], row: int) -> None:
            try:
                connection.cursor().execute("UPDATE item SET n = n + 1 WHERE id = %s", (row,))
            except pymysql.Error as error:
                errors.append(error)  # InnoDB rolled the victim back: the other goes on

        threads = [
            threading.Thread(target=cross, args=(one, 2)),
            threading.Thread(target=cross, args=(two, 1)),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    assert len(errors) == 1, errors
    return errors[0]


def _my_nowait(arguments: dict[str, Any]) -> BaseException:
    with pymysql.connect(**arguments) as holder, pymysql.connect(**arguments) as other:
        holder.cursor().execute("SELECT n FROM item WHERE id = 1 FOR UPDATE")
        statement = "SELECT n FROM item WHERE id = 1 FOR UPDATE NOWAIT"
        return _raised(lambda: other.cursor().execute(statement))


def _my_user_limit(arguments: dict[str, Any]) -> BaseException:
    user = f"saga_t_{uuid.uuid4().hex[:12]}"
    with pymysql.connect(**arguments, autocommit=True) as admin, admin.cursor() as cursor:
        cursor.execute(f"CREATE USER '{user}'@'%' WITH MAX_USER_CONNECTIONS 1")
        try:
            as_user = {**participants.MARIADB, "user": user}  # no database: no grant needed
            with pymysql.connect(**as_user):
                return _raised(lambda: pymysql.connect(**as_user))
        finally:
            cursor.execute(f"DROP USER '{user}'@'%'")


def _my_statement(statement: str) -> Callable[[dict[str, Any]], BaseException]:
    def produce(arguments: dict[str, Any]) -> BaseException:
        with pymysql.connect(**arguments) as connection, connection.cursor() as cursor:
            return _raised(lambda: cursor.execute(statement))

    return produce


MYSQL_ROWS = [
    ("2003-refused", _my_refused, True),
    ("2013-killed", _my_killed, True),
    ("1213-deadlock", _my_deadlock, True),
    ("1205-nowait", _my_nowait, True),
    ("1226-user-connections", _my_user_limit, True),
    (
        "1969-statement-timeout",
        _my_statement("SET STATEMENT max_statement_time = 0.01 FOR SELECT SLEEP(5)"),
        True,
    ),
    ("4025-check", _my_statement("UPDATE item SET n = -1 WHERE id = 1"), False),
    ("1054-unknown-column", _my_statement("SELECT nope FROM item"), False),
    ("1644-signal", _my_statement("SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'refused'"), False),
    ("1064-syntax", _my_statement("SELEC 1"), False),
    ("1146-no-table", _my_statement("SELECT * FROM nope"), False),
    ("1062-duplicate", _my_statement("INSERT INTO item VALUES (1, 0)"), False),
    ("1045-access-denied", lambda a: _raised(lambda: pymysql.connect(**a, password="x")), False),
]


@pytest.mark.parametrize(
    ("produce", "transient"), [r[1:] for r in MYSQL_ROWS], ids=[r[0] for r in MYSQL_ROWS]
)
def test_mariadb_errors_are_judged_by_error_number(
    mariadb: dict[str, Any], produce: Callable[[dict[str, Any]], BaseException], transient: bool
) -> None:
    error = produce(mariadb)
    assert isinstance(error, pymysql.Error), repr(error)
    assert is_transient(error) is transient, repr(error)
    assert is_transient(_wrapped(error, pymysql.Error)) is transient


# -- SQLite: by result code ----------------------------------------------------------------


def _sqlite_busy(path: Path) -> BaseException:
    holder = sqlite3.connect(path, isolation_level=None)
    other = sqlite3.connect(path, isolation_level=None, timeout=0)
    try:
        holder.execute("BEGIN IMMEDIATE")  # the single writer's lock
        return _raised(lambda: other.execute("BEGIN IMMEDIATE"))
    finally:
        holder.close()
        other.close()


def _sqlite_read_only(path: Path) -> BaseException:
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return _raised(lambda: connection.execute("INSERT INTO item VALUES (3, 0)"))
    finally:
        connection.close()


def _sqlite_statement(statement: str) -> Callable[[Path], BaseException]:
    def produce(path: Path) -> BaseException:
        connection = sqlite3.connect(path)
        try:
            return _raised(lambda: connection.execute(statement))
        finally:
            connection.close()

    return produce


SQLITE_ROWS = [
    ("5-busy", _sqlite_busy, True),
    ("1-syntax", _sqlite_statement("SELEC 1"), False),
    ("1-no-table", _sqlite_statement("SELECT * FROM nope"), False),
    ("1-unknown-column", _sqlite_statement("SELECT nope FROM item"), False),
    ("19-check", _sqlite_statement("UPDATE item SET n = -1 WHERE id = 1"), False),
    ("8-read-only", _sqlite_read_only, False),
    ("14-cannot-open", lambda p: _raised(lambda: sqlite3.connect(p.parent / "no" / "x.db")), False),
]


@pytest.mark.parametrize(
    ("produce", "transient"), [r[1:] for r in SQLITE_ROWS], ids=[r[0] for r in SQLITE_ROWS]
)
def test_sqlite_errors_are_judged_by_result_code(
    tmp_path: Path, produce: Callable[[Path], BaseException], transient: bool
) -> None:
    path = tmp_path / "participant.db"
    with sqlite3.connect(path) as setup:
        setup.execute("CREATE TABLE item (id INTEGER PRIMARY KEY, n INTEGER CHECK (n >= 0))")
        setup.execute("INSERT INTO item VALUES (1, 0)")
    setup.close()
    error = produce(path)
    assert isinstance(error, sqlite3.Error), repr(error)
    assert is_transient(error) is transient, repr(error)
    assert is_transient(_wrapped(error, sqlite3.Error)) is transient


def test_bad_sql_through_sqlalchemy_on_sqlite_is_not_transient(tmp_path: Path) -> None:
    """The case of the issue: SQLAlchemy's OperationalError around a typo was retried."""
    engine = create_engine(f"sqlite:///{tmp_path}/bad.db")
    with engine.connect() as connection:
        error = _raised(lambda: connection.execute(text("SELECT * FROM no_such_table")))
    engine.dispose()
    assert isinstance(error, exc.OperationalError)
    assert not is_transient(error)


# -- HTTP clients: by exception class (urllib: by the error it wraps) ----------------------


def _httpx_get(url: str, timeout: float = 5, **options: Any) -> BaseException:
    return _raised(lambda: httpx.get(url, timeout=timeout, **options))


def _urllib_get(url: str, timeout: float = 5) -> BaseException:
    return _raised(lambda: urllib.request.urlopen(url, timeout=timeout))


def _httpx_refused() -> BaseException:
    with _closed_port() as port:
        return _httpx_get(f"http://127.0.0.1:{port}/")


def _urllib_refused() -> BaseException:
    with _closed_port() as port:
        return _urllib_get(f"http://127.0.0.1:{port}/")


def _httpx_read_timeout() -> BaseException:
    with _silent_server() as port:
        return _httpx_get(f"http://127.0.0.1:{port}/", timeout=0.2)


def _urllib_read_timeout() -> BaseException:
    with _silent_server() as port:
        return _urllib_get(f"http://127.0.0.1:{port}/", timeout=0.2)


def _httpx_hung_up() -> BaseException:
    with _hanging_up_server() as port:
        return _httpx_get(f"http://127.0.0.1:{port}/")


def _httpx_bad_header() -> BaseException:
    with _silent_server() as port:
        return _httpx_get(f"http://127.0.0.1:{port}/", headers={"x": "a\nb"})


HTTP_ROWS = [
    ("httpx-refused", _httpx_refused, True),
    ("urllib-refused", _urllib_refused, True),
    ("httpx-read-timeout", _httpx_read_timeout, True),
    ("urllib-read-timeout", _urllib_read_timeout, True),
    ("httpx-hung-up", _httpx_hung_up, True),
    ("httpx-no-scheme", lambda: _httpx_get("127.0.0.1/orders"), False),
    ("httpx-unsupported-scheme", lambda: _httpx_get("ftp://127.0.0.1/orders"), False),
    ("httpx-invalid-url", lambda: _httpx_get("http://[::1/orders"), False),
    ("httpx-bad-header", _httpx_bad_header, False),
    ("urllib-unknown-scheme", lambda: _urllib_get("foo://127.0.0.1/"), False),
]


@pytest.mark.parametrize(
    ("produce", "transient"), [r[1:] for r in HTTP_ROWS], ids=[r[0] for r in HTTP_ROWS]
)
def test_http_client_errors_are_judged_by_class(
    produce: Callable[[], BaseException], transient: bool
) -> None:
    error = produce()
    assert isinstance(error, httpx.HTTPError | httpx.InvalidURL | OSError), repr(error)
    assert is_transient(error) is transient, repr(error)


def test_urllib_wraps_the_refused_connection_it_is_judged_by() -> None:
    error = _urllib_refused()
    assert isinstance(error, urllib.error.URLError)
    assert isinstance(error.reason, ConnectionRefusedError)


def test_a_step_whose_statement_breaks_a_mariadb_check_runs_once(
    mariadb: dict[str, Any], tmp_path: Path
) -> None:
    """End to end, through the default policy: the saga unwinds after one attempt."""
    database = mariadb["database"]
    engine = create_engine(f"mysql+pymysql://root@127.0.0.1:3306/{database}")
    saga = Saga("transient-check")

    @saga.step()
    def withdraw(ctx: StepContext) -> None:
        with engine.begin() as connection:
            connection.execute(text("UPDATE item SET n = n - 1 WHERE id = 1"))  # n is 0

    with Coordinator(f"sqlite:///{tmp_path}/saga.db") as coord:
        with pytest.raises(SagaFailed) as failure:
            coord.run(saga)
        view = coord.get(failure.value.saga_id)
    engine.dispose()
    assert view.status is SagaStatus.COMPENSATED
    assert view.step("withdraw").attempt == 1
    assert isinstance(failure.value.__cause__, exc.OperationalError)
