"""Fixtures for the async tests: here ``coord`` and ``make_coord`` are async.

The modules ``test_twin_*.py`` import behavioural tests from
tests/integration; collected here, those tests get these fixtures, so they
run again against ``AsyncCoordinator`` (behind the blocking facade of
``facade.py``) without being copied.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.aio import steps
from tests.aio.facade import AsyncFacade
from tests.integration.conftest import calls

# An imported fixture: ``calls`` (autouse) clears tests.integration.steps' call log around
# each test.
__all__ = ["calls"]

MakeFacade = Callable[..., AsyncFacade]


@pytest.fixture
def coord(db_url: str) -> Iterator[AsyncFacade]:
    """An ``AsyncCoordinator`` (blocking facade) on a fresh database."""
    facade = AsyncFacade(db_url, lease_ttl=5.0)
    try:
        yield facade
    finally:
        facade.close()


@pytest.fixture
def make_coord(db_url: str) -> Iterator[MakeFacade]:
    """``AsyncCoordinator`` facades on the test's database (another "process" each)."""
    made: list[AsyncFacade] = []

    def make(**options: Any) -> AsyncFacade:
        facade = AsyncFacade(db_url, **options)
        made.append(facade)
        return facade

    yield make
    for facade in made:
        facade.close()


@pytest.fixture(autouse=True)
def step_log() -> Iterator[list[tuple[Any, ...]]]:
    """tests.aio.steps' call log and shared state, fresh for each test; steps still
    waiting (a timed-out thread cannot be killed) are released at the end."""
    steps.LOG.clear()
    steps.STORE.clear()
    steps.BARRIERS.clear()
    steps.CRASHES.clear()
    steps.RELEASE.clear()
    yield steps.LOG
    steps.RELEASE.set()
