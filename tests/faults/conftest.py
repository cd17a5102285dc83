"""Fixtures of the fault suite, and the figures it prints (and writes) at the end of a run."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests import postgres
from tests.crash import ledger
from tests.crash.harness import ForkServer
from tests.faults import figures

FreshUrl = Callable[[], str]
SUMMARY_ENV = "SAGA_FAULTS_SUMMARY"


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if "tests/faults/" not in report.nodeid:
        return
    if report.when == "call":
        figures.count("cases")
        if report.failed:
            figures.count("violations")
    elif report.failed:  # an error outside the test body: counted as a failed case
        figures.count("cases")
        figures.count("violations")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not figures.FIGURES["cases"]:
        return
    terminalreporter.write_sep("-", "saga fault suite: figures of this run")
    terminalreporter.write_line(figures.table())
    target = os.environ.get(SUMMARY_ENV)
    if target:
        Path(target).write_text(figures.table() + "\n")
        terminalreporter.write_line(f"(written to {target})")


@pytest.fixture
def book(tmp_path: Path) -> str:
    """A fresh effect ledger (tests.crash.ledger) for the test."""
    path = str(tmp_path / "ledger.db")
    ledger.create(path)
    return path


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def fresh_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[FreshUrl]:
    """Makes a new, empty saga database on the test's backend at each call."""
    with contextlib.ExitStack() as stack:
        made = 0

        def make() -> str:
            nonlocal made
            made += 1
            if backend == "sqlite":
                return f"sqlite:///{tmp_path}/saga-{made}.db"
            server = str(request.getfixturevalue("postgres_server"))
            if backend == "pgbouncer":  # PgBouncer does not pass a search_path on
                bouncer = request.getfixturevalue("bouncer")
                return str(bouncer.url(stack.enter_context(postgres.isolated_database(server))))
            return stack.enter_context(postgres.isolated_schema(server))

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


@pytest.fixture(scope="session")
def fork_server() -> Iterator[ForkServer]:
    """The crash tests' fork server: one real process per crash case, killed by SIGKILL."""
    server = ForkServer()
    try:
        yield server
    finally:
        server.close()
