"""A deadlock inside a transactional step on PostgreSQL: rolled back whole and retried."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, text

from saga import Coordinator, Saga, SagaStatus, StepContext

pytestmark = pytest.mark.postgres

WAIT = 30.0  # the longest any one wait may take before the test gives up


class Rival(threading.Thread):
    """Another application transaction: locks row 2, then (on ``go``) waits for row 1.

    Its deadlock_timeout is long, so PostgreSQL picks the step's transaction
    (which checks after 50 ms) as the deadlock's victim.
    """

    def __init__(self, engine: Engine) -> None:
        super().__init__(daemon=True)
        self.engine = engine
        self.holding = threading.Event()
        self.go = threading.Event()
        self.pid: int | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with self.engine.begin() as connection:
                connection.execute(text("SET LOCAL deadlock_timeout = '20s'"))
                self.pid = connection.execute(text("SELECT pg_backend_pid()")).scalar_one()
                connection.execute(text("UPDATE accounts SET balance = balance + 1 WHERE id = 2"))
                self.holding.set()
                self.go.wait(WAIT)
                connection.execute(text("UPDATE accounts SET balance = balance + 1 WHERE id = 1"))
        except BaseException as error:  # reported by the test
            self.error = error

    def wait_until_blocked(self) -> None:
        query = text("SELECT count(*) FROM pg_locks WHERE pid = :pid AND NOT granted")
        deadline = time.monotonic() + WAIT
        with self.engine.connect() as connection:
            while connection.execute(query, {"pid": self.pid}).scalar_one() == 0:
                connection.rollback()
                if time.monotonic() > deadline:
                    raise TimeoutError("the rival transaction never blocked")
                time.sleep(0.01)


rivals: list[Rival] = []
tries: list[int] = []
pair = Saga("tx-deadlock")


@pair.step(transactional=True)
def move(ctx: StepContext) -> dict[str, Any]:
    """Update row 1, then row 2; on the first try the rival holds 2 and waits for 1."""
    tries.append(ctx.attempt)
    if len(tries) == 2:
        # The rival commits before the retry touches a row. PostgreSQL wakes the waiters
        # of a released row lock in no set order: on a busy machine a retry could take
        # row 1 before the rival did, and deadlock with it once more (a third try).
        rivals[0].join(WAIT)
    session = ctx.session
    session.execute(text("SET LOCAL deadlock_timeout = '50ms'"))
    session.execute(text("UPDATE accounts SET balance = balance - 10 WHERE id = 1"))
    if len(tries) == 1:
        rivals[0].go.set()
        rivals[0].wait_until_blocked()
    session.execute(text("UPDATE accounts SET balance = balance + 10 WHERE id = 2"))
    return {"try": len(tries)}


@pytest.fixture
def engine(pg_url: str) -> Iterator[Engine]:
    engine = create_engine(pg_url)
    with engine.begin() as connection:
        connection.execute(text("CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL)"))
        connection.execute(text("INSERT INTO accounts VALUES (1, 1000), (2, 1000)"))
    yield engine
    engine.dispose()


def test_deadlocked_step_is_rolled_back_and_retried_until_it_commits(
    pg_url: str, engine: Engine
) -> None:
    tries.clear()
    rivals[:] = [Rival(engine)]
    rivals[0].start()
    assert rivals[0].holding.wait(WAIT), f"the rival never took its lock: {rivals[0].error}"

    with Coordinator(pg_url, lease_ttl=30.0) as coord:
        view = coord.run(pair)
        events = [e.kind for e in coord.history(view.id)]
    rivals[0].join(WAIT)

    assert rivals[0].error is None, "the rival, not the step, was chosen as the victim"
    assert view.status is SagaStatus.COMPLETED
    assert tries == [1, 1], "the step ran twice within one attempt: the store retried it"
    assert view.steps[0].result == {"try": 2}
    assert events.count("step_succeeded") == 1
    with engine.connect() as connection:
        rows = connection.execute(text("SELECT id, balance FROM accounts ORDER BY id")).all()
    # The rival's +1 on each row and the step's move, each applied exactly once.
    assert [tuple(r) for r in rows] == [(1, 991), (2, 1011)]
