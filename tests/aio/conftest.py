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
from tests.crash.conftest import backend_url, ledger_path
from tests.integration.conftest import calls

# Imported fixtures: ``calls`` (autouse) clears tests.integration.steps' call log around
# each test; the crash tests reuse tests/crash's ``backend_url`` and ``ledger_path``.
__all__ = ["backend_url", "calls", "ledger_path"]

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
