"""Fixtures for the crash tests: the fork server, the effect ledger, a backend's URL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.crash import ledger
from tests.crash.harness import ForkServer


@pytest.fixture(scope="session")
def fork_server() -> Iterator[ForkServer]:
    server = ForkServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def ledger_path(tmp_path: Path) -> str:
    path = str(tmp_path / "ledger.db")
    ledger.create(path)
    return path


@pytest.fixture
def backend_url(request: pytest.FixtureRequest) -> str:
    """The URL of a fresh store on the backend the test is parametrised with."""
    fixture = {"sqlite": "sqlite_url", "postgres": "pg_url", "pgbouncer": "bouncer_url"}
    return str(request.getfixturevalue(fixture[request.param]))
