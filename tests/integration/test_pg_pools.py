"""A coordinator's PostgreSQL pools keep the connections its threads use at once: a
worker finishing stuck sagas eight at a time opens at most eight connections in each
pool and reuses them. SQLAlchemy's default pool keeps five and closes every overflow
connection on its return, so the same worker opened a server connection (a forked
process on the server) every few sagas: 25 and 35 for these 200, before the change."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from saga.adapters.sql import tables
from sqlalchemy import event, update

from saga import Coordinator, Saga, StepContext, admin
from tests.integration import steps
from tests.integration.support import sql_store

pytestmark = pytest.mark.postgres

THREADS = 8
STUCK = 200

saga = Saga("pools-three-steps")


@saga.step()
def one(ctx: StepContext) -> int:
    return 1


@saga.step()
def two(ctx: StepContext) -> int:
    steps.crash("two")  # dies (BaseException) while FAILURES["two"] > 0
    return 2


@saga.step()
def three(ctx: StepContext) -> int:
    return 3


Opened = Callable[[], dict[str, int]]


def _counting(coord: Coordinator) -> Opened:
    """From now on, how many connections each pool of ``coord`` opens."""
    store = sql_store(coord)
    store.engine.dispose()
    marks: list[int] = []
    event.listen(store.engine, "connect", lambda *_: marks.append(1))
    hot: Any = store.hot
    before = hot.connections.opened
    return lambda: {"store": len(marks), "hot path": hot.connections.opened - before}


def test_a_worker_at_concurrency_eight_reuses_its_connections(pg_url: str) -> None:
    with Coordinator(pg_url) as dead:
        steps.FAILURES["two"] = STUCK
        for n in range(STUCK):
            with pytest.raises(steps.Crash):
                dead.run(saga, key=f"stuck-{n}")
    with Coordinator(pg_url) as worker:
        worker.register(saga)
        with sql_store(worker).engine.begin() as connection:
            connection.execute(update(tables.instances).values(lease_expires_at=0.0))
        counted = _counting(worker)
        stop = threading.Event()
        stats = admin.WorkerStats()

        def log(_line: str) -> None:
            if stats.recovered + stats.errors >= STUCK:
                stop.set()

        admin.run_worker(worker, stop, interval=0.05, concurrency=THREADS, log=log, stats=stats)
        assert (stats.recovered, stats.errors) == (STUCK, 0)
    opened = counted()
    assert all(n <= THREADS for n in opened.values()), opened
