"""Behind PgBouncer in transaction pooling mode: what breaks, and the URL option that fixes it.

Transaction pooling hands each transaction whichever server connection is
free, so a statement psycopg prepared on one client connection may live on a
server connection another client gets next. With one server connection in
the pool (``pool_size=1``) two coordinators share it for certain: their
prepared statements clash, unless the URL says ``prepare_threshold=none``.
The rest of the integration suite runs through PgBouncer too (the
``pgbouncer`` case of ``db_url``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from saga.adapters.sql.postgres import connect_options

from saga import AsyncCoordinator, ConfigurationError, Coordinator, Saga, SagaStatus, StepContext
from tests import pgbouncer, postgres

RUNS = 8
"""Sagas per coordinator: more than psycopg's default of 5 executions before preparing."""


def two_steps() -> Saga:
    saga = Saga("bouncer-two-steps")

    @saga.step()
    def reserve(ctx: StepContext) -> str:
        return str(ctx.data["sku"])

    @saga.step()
    def charge(ctx: StepContext) -> int:
        return len(ctx.results["reserve"])

    return saga


@pytest.fixture(scope="module")
def one_connection(postgres_server: str, bouncer: pgbouncer.Bouncer) -> Iterator[pgbouncer.Bouncer]:
    """A second PgBouncer whose pool has a single server connection per database."""
    del bouncer  # requested for its skip (or failure) when pgbouncer is missing
    with pgbouncer.running(postgres_server, pool_size=1) as running:
        yield running


@pytest.fixture
def database(postgres_server: str) -> Iterator[str]:
    with postgres.isolated_database(postgres_server) as url:
        yield url


def run_in_turn(url: str) -> list[SagaStatus]:
    """``RUNS`` sagas on one coordinator, then ``RUNS`` on another: their statuses."""
    saga = two_steps()
    statuses = []
    for name in ("first", "second"):
        coordinator = Coordinator(url)
        try:
            coordinator.register(saga)
            for number in range(RUNS):
                result = coordinator.run(saga, data={"sku": "A1"}, key=f"{name}-{number}")
                statuses.append(result.status)
        finally:
            coordinator.close()
    return statuses


@pytest.mark.postgres
@pytest.mark.pgbouncer
def test_prepared_statements_clash_behind_transaction_pooling_by_default(
    one_connection: pgbouncer.Bouncer, database: str
) -> None:
    """The control: this PgBouncer really multiplexes, and saga really prepares by default."""
    url = one_connection.url(database, prepare=True)
    with pytest.raises(Exception, match=r'prepared statement "_pg3_\d+" already exists'):
        run_in_turn(url)


@pytest.mark.postgres
@pytest.mark.pgbouncer
def test_prepare_threshold_none_runs_sagas_on_a_shared_server_connection(
    one_connection: pgbouncer.Bouncer, database: str
) -> None:
    url = one_connection.url(database)
    assert "prepare_threshold=none" in url
    assert run_in_turn(url) == [SagaStatus.COMPLETED] * (2 * RUNS)
    coordinator = Coordinator(url)
    try:
        assert len(coordinator.list(limit=100)) == 2 * RUNS
    finally:
        coordinator.close()


@pytest.mark.postgres
@pytest.mark.pgbouncer
def test_the_async_hot_path_honours_prepare_threshold_none(
    one_connection: pgbouncer.Bouncer, database: str
) -> None:
    url = one_connection.url(database)
    saga = two_steps()

    async def main() -> list[SagaStatus]:
        statuses = []
        for name in ("first", "second"):
            async with AsyncCoordinator(url) as coordinator:
                coordinator.register(saga)
                for number in range(RUNS):
                    result = await coordinator.run(saga, data={"sku": "B2"}, key=f"{name}-{number}")
                    statuses.append(result.status)
        return statuses

    assert asyncio.run(main()) == [SagaStatus.COMPLETED] * (2 * RUNS)


@pytest.mark.parametrize(
    ("value", "expected"), [("none", None), ("None", None), ("0", 0), ("12", 12)]
)
def test_prepare_threshold_is_read_from_the_url_and_removed_from_it(
    value: str, expected: int | None
) -> None:
    url, args = connect_options(f"postgresql+psycopg://app@db:6432/app?prepare_threshold={value}")
    assert url == "postgresql+psycopg://app@db:6432/app"
    assert args == {"connect_timeout": 5, "prepare_threshold": expected}


@pytest.mark.postgres
def test_a_bad_prepare_threshold_is_one_clear_error(database: str) -> None:
    url = postgres.with_query(database, prepare_threshold="sometimes")
    with pytest.raises(ConfigurationError) as raised:
        Coordinator(url)
    message = str(raised.value)
    assert "prepare_threshold='sometimes'" in message
    assert "'none'" in message
    assert "\n" not in message
