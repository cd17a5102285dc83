"""Transient errors, as real drivers raise them against real servers: a step that meets
one is retried by default; a refused login is not."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pika
import psycopg
import pymysql
import pytest
import redis
import tenacity
from psycopg import sql
from redis.backoff import NoBackoff
from redis.retry import Retry
from sqlalchemy.engine import make_url

from saga import Coordinator, RetryPolicy, Saga, SagaStatus, StepContext
from saga._internal.transient import is_transient, refused_for_good
from tests.participants import MARIADB
from tests.participants import running as _running
from tests.postgres import isolated_database, login_role


def _raised(action: Callable[[], Any]) -> BaseException:
    try:
        action()
    except Exception as error:  # noqa: BLE001 - the error is what the test looks at
        return error
    raise AssertionError("no error was raised")


def _libpq(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def _terminated_postgres_session(pg_url: str) -> BaseException:
    """What a query raises once the server ended its session (pg_terminate_backend)."""
    dsn = _libpq(pg_url)
    with psycopg.connect(dsn, autocommit=True) as victim, psycopg.connect(dsn) as admin:
        pid = victim.info.backend_pid
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        return _raised(lambda: victim.execute("SELECT 1"))


@pytest.mark.postgres
def test_a_step_whose_postgres_session_is_killed_is_retried(pg_url: str, tmp_path: Path) -> None:
    saga = Saga("transient-pg")
    dsn = _libpq(pg_url)

    @saga.step()
    def ledger(ctx: StepContext) -> int:
        with psycopg.connect(dsn, autocommit=True) as connection:
            if ctx.attempt == 1:  # the server ends this session mid-step, as a failover would
                with psycopg.connect(dsn) as admin:
                    admin.execute("SELECT pg_terminate_backend(%s)", (connection.info.backend_pid,))
            row = connection.execute("SELECT 41 + 1").fetchone()
            assert row is not None
            return int(row[0])

    with Coordinator(f"sqlite:///{tmp_path}/saga.db") as coord:
        view = coord.run(saga)
    assert view.status is SagaStatus.COMPLETED
    assert view.results == {"ledger": 42}
    assert view.step("ledger").attempt == 2
    failed = [e for e in coord_history(tmp_path, view.id) if e.kind == "attempt_failed"]
    assert failed[0].detail is not None
    assert failed[0].detail["error"].startswith(("AdminShutdown", "OperationalError"))


def coord_history(tmp_path: Path, saga_id: str) -> list[Any]:
    with Coordinator(f"sqlite:///{tmp_path}/saga.db") as coord:
        return coord.history(saga_id)


@pytest.mark.postgres
def test_postgres_errors_are_told_apart(pg_url: str) -> None:
    assert is_transient(_terminated_postgres_session(pg_url))
    missing = make_url(_libpq(pg_url)).set(database="no_such_database_here")
    refused = _raised(lambda: psycopg.connect(missing.render_as_string(hide_password=False)))
    assert isinstance(refused, psycopg.OperationalError)
    assert not is_transient(refused)  # no retry brings a database into being


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("barred_by", "said"),
    [
        ("ALTER ROLE {role} NOLOGIN", "is not permitted to log in"),
        ("REVOKE CONNECT ON DATABASE {database} FROM PUBLIC, {role}", "permission denied"),
    ],
)
def test_a_login_the_server_bars_is_refused_for_good(
    postgres_server: str, barred_by: str, said: str
) -> None:
    """No sqlstate comes with a failed connection (libpq's message is all there is), so
    the words judge it: a barred role was once taken for an outage and retried forever."""
    with login_role(postgres_server) as role, isolated_database(postgres_server) as where:
        database = make_url(where).database
        names = {"role": sql.Identifier(role), "database": sql.Identifier(str(database))}
        with psycopg.connect(_libpq(postgres_server), autocommit=True) as admin_db:
            admin_db.execute(sql.SQL(barred_by).format(**names))
        url = make_url(_libpq(postgres_server)).set(username=role, database=database)
        barred = _raised(lambda: psycopg.connect(url.render_as_string(hide_password=False)))
    assert isinstance(barred, psycopg.OperationalError)
    assert said in str(barred)
    assert refused_for_good(barred)
    assert not is_transient(barred)


def test_a_mariadb_connection_killed_by_the_server_is_transient() -> None:
    _running("MariaDB", 3306)
    victim = pymysql.connect(**MARIADB)
    try:
        with victim.cursor() as cursor:
            cursor.execute("SELECT CONNECTION_ID()")
            (connection_id,) = cursor.fetchone()  # type: ignore[misc]
        with pymysql.connect(**MARIADB) as admin, admin.cursor() as cursor:
            cursor.execute("KILL %s", (connection_id,))
        lost = _raised(lambda: victim.cursor().execute("SELECT 1"))
    finally:
        victim.close()
    assert isinstance(lost, pymysql.err.OperationalError)
    assert is_transient(lost)
    denied = _raised(lambda: pymysql.connect(**{**MARIADB, "user": "nobody", "password": "x"}))
    assert not is_transient(denied)


def test_a_redis_server_that_stops_answering_is_transient() -> None:
    _running("Redis", 6379)
    client = redis.Redis(host="127.0.0.1", socket_timeout=0.2, retry=Retry(NoBackoff(), 0))
    client.ping()
    redis.Redis(host="127.0.0.1").execute_command("CLIENT", "PAUSE", "1000", "WRITE")
    try:
        late = _raised(lambda: client.set("saga-transient-probe", "1"))
    finally:
        redis.Redis(host="127.0.0.1").execute_command("CLIENT", "UNPAUSE")
    assert isinstance(late, redis.exceptions.TimeoutError)
    assert not isinstance(late, TimeoutError)  # not the builtin: named by class
    assert is_transient(late)


def test_a_rabbitmq_connection_closed_by_the_broker_is_transient() -> None:
    _running("RabbitMQ", 5672)
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1"))
    channel = connection.channel()
    closed = subprocess.run(
        ["rabbitmqctl", "close_all_connections", "saga transient test"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert closed.returncode == 0, closed.stderr

    def publish() -> None:
        for _ in range(50):  # until the client has read the broker's close
            channel.basic_publish("", "saga-transient-probe", b"x")
            connection.process_data_events(0.1)

    lost = _raised(publish)
    assert isinstance(lost, pika.exceptions.AMQPConnectionError)
    assert is_transient(lost)
    wrong = pika.ConnectionParameters("127.0.0.1", credentials=pika.PlainCredentials("guest", "x"))
    assert not is_transient(_raised(lambda: pika.BlockingConnection(wrong)))


def test_a_policy_may_retry_by_predicate_or_by_tenacity_rule(tmp_path: Path) -> None:
    by_text = RetryPolicy(retry_on=lambda error: "busy" in str(error))
    assert by_text.retries(ValueError("server busy"))
    assert not by_text.retries(ValueError("bad input"))
    by_rule = RetryPolicy(retry_on=tenacity.retry_if_exception_type(KeyError))
    assert by_rule.retries(KeyError("k"))
    assert not by_rule.retries(ValueError())
    saga = Saga("transient-predicate")

    @saga.step(retry=RetryPolicy(max_attempts=3, initial_delay=0, retry_on=by_text.retry_on))
    def call(ctx: StepContext) -> int:
        if ctx.attempt < 3:
            raise ValueError("server busy")
        return ctx.attempt

    with Coordinator(f"sqlite:///{tmp_path}/p.db") as coord:
        assert coord.run(saga).results == {"call": 3}
