"""The pytest plugin (entry point ``pytest11: saga``): fixtures for testing sagas.

* ``saga_database_url``: a fresh saga store per test: a SQLite file under
  ``tmp_path``, or a private schema on the PostgreSQL server named by
  ``--saga-database-url`` or ``$SAGA_TEST_DATABASE_URL``;
* ``saga_coordinator``: a ``Coordinator`` on it, closed afterwards;
* ``saga_ledger``: a :class:`~saga.testing.Ledger` file for the test, also
  set as ``$SAGA_TEST_LEDGER`` so that ``Ledger()`` finds it in any process;
* ``crash_matrix``: the crash matrix (:class:`~saga.testing.matrix.CrashMatrix`).

The names are prefixed (``saga_``) so that they clash with no project's own
fixtures, except ``crash_matrix``, which is the feature's name.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from saga._internal.coordinator import Coordinator
from saga.testing.databases import ENV_URL, fresh_store
from saga.testing.forkserver import ForkPool
from saga.testing.ledger import ENV as LEDGER_ENV
from saga.testing.ledger import Ledger
from saga.testing.matrix import CrashMatrix


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--saga-database-url``: run saga's fixtures on that PostgreSQL server."""
    parser.addoption(
        "--saga-database-url",
        default=None,
        help=f"PostgreSQL server for saga's test fixtures (default: ${ENV_URL}; else SQLite)",
    )
    parser.addoption(
        "--saga-crash-workers",
        default=3,
        type=int,
        help="crash_matrix cases run at once (default 3; each has its own fork server)",
    )


def _server(config: pytest.Config) -> str | None:
    return config.getoption("--saga-database-url") or os.environ.get(ENV_URL) or None


@pytest.fixture
def saga_database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh saga store for this test (SQLite file, or a PostgreSQL schema)."""
    with fresh_store(_server(request.config), tmp_path) as url:
        yield url


@pytest.fixture
def saga_coordinator(saga_database_url: str) -> Iterator[Coordinator]:
    """A ``Coordinator`` on this test's fresh store."""
    with Coordinator(saga_database_url, lease_ttl=5.0) as coordinator:
        yield coordinator


@pytest.fixture
def saga_ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Ledger:
    """This test's participant double; ``Ledger()`` anywhere (any process) finds it."""
    path = tmp_path / "ledger.db"
    monkeypatch.setenv(LEDGER_ENV, str(path))
    return Ledger(path).create()


@pytest.fixture(scope="session")
def saga_fork_server(pytestconfig: pytest.Config) -> Iterator[ForkPool]:
    """Fork servers for the session (per xdist worker): children start in milliseconds."""
    pool = ForkPool(int(pytestconfig.getoption("--saga-crash-workers")))
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture
def crash_matrix(
    request: pytest.FixtureRequest,
    saga_fork_server: ForkPool,
    saga_ledger: Ledger,
    tmp_path: Path,
) -> CrashMatrix:
    """``crash_matrix(saga, data, check=...)``: see :class:`saga.testing.matrix.CrashMatrix`."""
    workdir = tmp_path / "crash-matrix"
    workdir.mkdir()
    return CrashMatrix(saga_fork_server, workdir, _server(request.config), saga_ledger.path)
