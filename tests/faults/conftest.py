"""Fixtures of the fault suite: its backends and the fresh stores it makes on them.

The fork server, the effect ledger (``ledger_path``) and the figures hooks are
shared with the other suites (tests/conftest.py, tests/faults/figures.py).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator

import pytest

from tests import postgres
from tests.conftest import another_store

FreshUrl = Callable[[], str]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def fresh_url(backend: str, request: pytest.FixtureRequest) -> Iterator[FreshUrl]:
    """Makes a new, empty saga database on the test's backend at each call."""
    with contextlib.ExitStack() as stack:
        made = 0

        def make() -> str:
            nonlocal made
            made += 1
            return another_store(request, backend, stack, f"saga-{made}")

        yield make


@pytest.fixture
def url(fresh_url: FreshUrl) -> str:
    """One fresh saga database on the test's backend."""
    return fresh_url()


@pytest.fixture
def pg_database(postgres_server: str) -> Iterator[str]:
    """A private PostgreSQL database: its backends can be terminated without hurting others."""
    with postgres.isolated_database(postgres_server) as database_url:
        yield database_url


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The failover measurements of minutes run only when asked for (SAGA_FAILOVER_LONG=1,
    docs/reliability.md): deselected otherwise, so no skip stands among the results."""
    if os.environ.get("SAGA_FAILOVER_LONG") == "1":
        return
    long = [item for item in items if item.get_closest_marker("failover_long")]
    if long:
        config.hook.pytest_deselected(items=long)
        items[:] = [item for item in items if item not in long]
