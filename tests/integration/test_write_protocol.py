"""The write protocol: a step's start is durable before it runs, its result after; n+1 commits."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest
from sqlalchemy import event

from saga import Coordinator, Saga, StepContext, StepStatus
from tests import postgres
from tests.integration import steps
from tests.integration.conftest import MakeCoordinator
from tests.integration.support import fast, sql_store


def test_step_start_and_attempt_are_durable_before_the_action_runs(
    make_coord: MakeCoordinator,
) -> None:
    coord, observer = make_coord(), make_coord()
    seen: list[tuple[str, dict[str, tuple[StepStatus, int, Any]]]] = []
    saga = Saga("protocol-durable")

    def look(ctx: StepContext) -> None:
        view = observer.get(ctx.saga_id)  # a second coordinator reads the database
        seen.append((ctx.step, {s.name: (s.status, s.attempt, s.result) for s in view.steps}))

    @saga.step(retry=fast(3))
    def one(ctx: StepContext) -> dict[str, int]:
        look(ctx)
        if ctx.attempt < 2:
            raise ConnectionError("flaky")
        return {"one": ctx.attempt}

    @saga.step()
    def two(ctx: StepContext) -> str:
        look(ctx)
        return "two"

    view = coord.run(saga)
    assert seen == [
        ("one", {"one": (StepStatus.RUNNING, 1, None)}),
        ("one", {"one": (StepStatus.RUNNING, 2, None)}),
        (
            "two",
            {"one": (StepStatus.SUCCEEDED, 2, {"one": 2}), "two": (StepStatus.RUNNING, 1, None)},
        ),
    ]
    stored = observer.get(view.id)
    assert stored.step("two").status is StepStatus.SUCCEEDED
    assert stored.results == {"one": {"one": 2}, "two": "two"}


def test_context_manager_step_start_is_durable_before_it_runs(
    make_coord: MakeCoordinator,
) -> None:
    coord, observer = make_coord(), make_coord()
    with coord.saga("protocol-durable-cm") as s:
        s.step(steps.debit, "alice", 5, compensate=steps.refund)
        # Between steps: the first step's result is already durable.
        between = observer.get(s.id)
        s.step(steps.credit, "bob", 5)
    debit = between.step("debit")
    assert (debit.status, debit.attempt) == (StepStatus.SUCCEEDED, 1)
    assert debit.result == {"hold": "alice-5", "key": f"{s.id}:debit"}
    assert observer.get(s.id).step("credit").result == 5


def _three_steps(name: str) -> Saga:
    saga = Saga(name)

    @saga.step()
    def a(ctx: StepContext) -> int:
        return 1

    @saga.step()
    def b(ctx: StepContext) -> int:
        return 2

    @saga.step()
    def c(ctx: StepContext) -> int:
        return 3

    return saga


class _Counted:
    """A hot path counting its calls: each is one ``BEGIN IMMEDIATE ... COMMIT``."""

    def __init__(self, hot: Any, commits: list[int]) -> None:
        self.hot, self.commits = hot, commits

    def create(self, *args: Any) -> Any:
        self.commits.append(1)
        return self.hot.create(*args)

    def commit(self, *args: Any) -> Any:
        self.commits.append(1)
        return self.hot.commit(*args)

    def close(self) -> None:
        self.hot.close()


def test_an_n_step_saga_costs_n_plus_one_commits_on_sqlite(sqlite_url: str) -> None:
    """Counted on both of the store's ways to the database: each call of its hot
    path (constant SQL on raw sqlite3 connections, one transaction each) and every
    COMMIT its SQLAlchemy engine issues (a listener)."""
    saga = _three_steps("protocol-commits")
    commits: list[int] = []
    with Coordinator(sqlite_url, lease_ttl=300) as coord:
        coord.run(saga)  # warm-up: schema creation happens once, on first use
        store = sql_store(coord)
        event.listen(store.engine, "commit", lambda _connection: commits.append(1))
        store.hot = _Counted(store.hot, commits)
        for _ in range(5):
            coord.run(saga)
    assert len(commits) == 5 * (3 + 1)


def _settled_commits(server_url: str, database_url: str) -> int:
    """xact_commit of the database once every backend on it has exited (and flushed its stats)."""
    name = database_url.partition("?")[0].rsplit("/", 1)[1]
    give_up = time.monotonic() + 30
    with psycopg.connect(postgres.libpq_url(server_url), autocommit=True) as connection:
        while True:
            row = connection.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (name,)
            ).fetchone()
            assert row is not None
            if row[0] == 0:
                break
            assert time.monotonic() < give_up, "backends of the test database never exited"
            time.sleep(0.05)
        # A backend flushes its statistics before it leaves pg_stat_activity.
        connection.execute("SELECT pg_stat_clear_snapshot()")
        row = connection.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (name,)
        ).fetchone()
    assert row is not None
    return int(row[0])


def _commits_running(postgres_server: str, saga: Saga, runs: int) -> int:
    """The database's commits while one coordinator runs ``saga`` ``runs`` times."""
    with postgres.isolated_database(postgres_server) as url:
        coord = Coordinator(url, lease_ttl=300)
        coord.run(saga)  # warm-up: creates the schema
        coord.store.close()  # its backends exit and flush their statistics
        before = _settled_commits(postgres_server, url)
        for _ in range(runs):
            coord.run(saga)
        coord.close()
        return _settled_commits(postgres_server, url) - before


def _least_commits_running(postgres_server: str, saga: Saga, runs: int) -> int:
    """The least of three measurements: whatever else touches a database (an autovacuum
    worker's visit, run by the server on its own clock) only adds to its counter."""
    return min(_commits_running(postgres_server, saga, runs) for _ in range(3))


@pytest.mark.postgres
def test_postgres_counts_n_plus_one_commits_per_saga(postgres_server: str) -> None:
    """Counted by the server (pg_stat_database), as the difference between a coordinator
    running 2k sagas and one running k: what a coordinator does once, whatever it runs
    (recording its owner for instant takeover, its connections' set-up), is in both.
    k is past the driver's prepare threshold (psycopg prepares a statement on its fifth
    execution, in a transaction of its own that the server counts), so both runs
    include every statement's preparation."""
    sagas, n = 6, 3
    saga = _three_steps("protocol-commits-pg")
    extra = _least_commits_running(postgres_server, saga, 2 * sagas)
    extra -= _least_commits_running(postgres_server, saga, sagas)
    assert extra == sagas * (n + 1)
