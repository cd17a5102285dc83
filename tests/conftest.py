"""Shared fixtures: one SQLite file or one PostgreSQL schema per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from saga import Coordinator
from tests import postgres


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """The base URL of the test PostgreSQL server (skips, or fails in CI, without one)."""
    with postgres.server_url() as url:
        if url is None:
            reason = (
                f"no PostgreSQL: set {postgres.ENV_URL} or make Docker available (testcontainers)"
            )
            if postgres.required():
                pytest.fail(f"{reason}; {postgres.ENV_REQUIRED}=1 requires it")
            pytest.skip(reason)
        yield url


@pytest.fixture
def pg_url(postgres_server: str) -> Iterator[str]:
    """A saga URL on a fresh, private PostgreSQL schema."""
    with postgres.isolated_schema(postgres_server) as url:
        yield url


@pytest.fixture
def sqlite_url(tmp_path: object) -> str:
    return f"sqlite:///{tmp_path}/saga.db"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest) -> str:
    """Each test using this runs once on SQLite and once on PostgreSQL."""
    fixture = "sqlite_url" if request.param == "sqlite" else "pg_url"
    return str(request.getfixturevalue(fixture))


@pytest.fixture
def coord(db_url: str) -> Iterator[Coordinator]:
    """A coordinator on a fresh database, closed afterwards."""
    coordinator = Coordinator(db_url, lease_ttl=5.0)
    try:
        yield coordinator
    finally:
        coordinator.close()


@pytest.fixture(params=["sync", "async"])
def any_coord(request: pytest.FixtureRequest, db_url: str) -> Iterator[Coordinator]:
    """A ``Coordinator``, then the same test again with an ``AsyncCoordinator`` behind a
    blocking facade (tests/aio/facade.py): one behavioural test, both APIs."""
    if request.param == "sync":
        coordinator = Coordinator(db_url, lease_ttl=5.0)
    else:
        from tests.aio.facade import AsyncFacade

        coordinator = AsyncFacade(db_url, lease_ttl=5.0)  # type: ignore[assignment]
    try:
        yield coordinator
    finally:
        coordinator.close()
