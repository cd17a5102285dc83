"""Fixtures for the behavioural integration tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from saga import Coordinator
from tests.conftest import store_url
from tests.integration import steps

MakeCoordinator = Callable[..., Coordinator]


@pytest.fixture(autouse=True)
def calls() -> Iterator[list[tuple[Any, ...]]]:
    """The step-call log of tests.integration.steps, empty at the start of each test."""
    steps.CALLS.clear()
    steps.FAILURES.clear()
    yield steps.CALLS
    steps.CALLS.clear()
    steps.FAILURES.clear()


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("pgbouncer", marks=[pytest.mark.postgres, pytest.mark.pgbouncer]),
    ]
)
def db_url(request: pytest.FixtureRequest) -> str:
    """Each integration test runs on SQLite, on PostgreSQL, and on PostgreSQL through
    PgBouncer in transaction pooling mode."""
    return store_url(request, request.param)


@pytest.fixture
def make_coord(db_url: str) -> Iterator[MakeCoordinator]:
    """Coordinators on the test's database (another "process" each), closed afterwards."""
    made: list[Coordinator] = []

    def make(**options: Any) -> Coordinator:
        coordinator = Coordinator(db_url, **options)
        made.append(coordinator)
        return coordinator

    yield make
    for coordinator in made:
        coordinator.close()
