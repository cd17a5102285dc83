"""``saga worker`` claims many stuck sagas in one transaction and starts them as its
slots free (``admin.run_worker``, in this process): the sagas beyond its free slots are
its own while they wait, and a worker told to stop gives back every one it has not
started, untouched, so that nothing stays claimed by a worker that is gone."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import tenacity
from saga.adapters.sql import tables
from sqlalchemy import update

from saga import Coordinator, Saga, SagaStatus, StepContext, admin
from tests.integration.conftest import MakeCoordinator
from tests.integration.support import sql_store


class Crash(BaseException):
    """Escapes every ``except Exception``: the saga is left as a killed process leaves it."""


GATE = threading.Event()
"""Closed while the test holds the saga that starts after "quick" inside its step."""
INSIDE: list[str] = []
"""The names of the sagas that reached the gate (one, while the test holds it)."""
ENTERED = threading.Event()


def _saga() -> Saga:
    saga = Saga("claims-ahead")

    @saga.step()
    def first(ctx: StepContext) -> str:
        if ctx.attempt == 1:
            raise Crash("the first owner dies here")
        if ctx.data["name"] != "quick":  # the first of them stays inside its step
            INSIDE.append(ctx.data["name"])
            ENTERED.set()
            assert GATE.wait(timeout=120), "the test never let the step go"
        return "one"

    @first.compensation
    def undo_first(ctx: StepContext) -> None:
        return None

    @saga.step()
    def second(ctx: StepContext) -> str:
        return "two"

    return saga


@pytest.fixture
def gate() -> Iterator[None]:
    GATE.clear()
    ENTERED.clear()
    INSIDE.clear()
    yield
    GATE.set()  # a failed test must not leave a worker thread waiting


def _stuck(coord: Coordinator, saga: Saga, name: str, lease: float) -> str:
    """A saga whose first owner died in its first step, its lease run out at ``lease``
    (seconds since the epoch: the oldest is claimed first)."""
    with pytest.raises(Crash):
        coord.run(saga, data={"name": name}, key=name)
    record = coord.store.find(saga.name, name)
    assert record is not None
    with sql_store(coord).engine.begin() as connection:
        connection.execute(
            update(tables.instances)
            .where(tables.instances.c.id == record.id)
            .values(lease_expires_at=lease)
        )
    return record.id


def _until(condition: object, what: str) -> None:
    tenacity.Retrying(
        retry=tenacity.retry_if_result(lambda met: not met),
        wait=tenacity.wait_fixed(0.02),
        stop=tenacity.stop_after_delay(60),
        retry_error_callback=lambda _state: pytest.fail(f"never: {what}"),
    )(condition)  # type: ignore[call-overload]


def _owner(coord: Coordinator, saga_id: str) -> str | None:
    record = coord.store.load(saga_id)
    assert record is not None
    return record.owner


def _worker(
    coord: Coordinator, stop: threading.Event, stats: admin.WorkerStats
) -> threading.Thread:
    """``saga worker --concurrency 1 --batch 4`` on ``coord``, in a thread."""
    options = {
        "interval": 0.05,
        "concurrency": 1,
        "batch": 4,
        "log": lambda _line: None,
        "stats": stats,
    }
    return threading.Thread(target=admin.run_worker, args=(coord, stop), kwargs=options)


@pytest.mark.usefixtures("gate")
def test_sagas_claimed_ahead_wait_as_the_workers_and_are_given_back_on_stop(
    make_coord: MakeCoordinator,
) -> None:
    saga = _saga()
    names = (("quick", 1.0), ("later-1", 2.0), ("later-2", 3.0), ("later-3", 4.0))
    ids = {name: _stuck(make_coord(), saga, name, lease) for name, lease in names}
    worker = make_coord(lease_ttl=60)
    worker.register(saga)
    stop, stats = threading.Event(), admin.WorkerStats()
    loop = _worker(worker, stop, stats)
    loop.start()
    try:
        # "quick" alone first (the oldest lease; nothing has finished yet, so one per
        # free slot); then, its time known, one claim takes the three left: the first
        # to start stays in its step and the other two wait for the only slot.
        assert ENTERED.wait(timeout=120)
        assert worker.get(ids["quick"]).status is SagaStatus.COMPLETED
        (held,) = INSIDE
        waiting = [ids[name] for name in ids if name not in ("quick", held)]
        for saga_id in waiting:
            assert _owner(worker, saga_id) == worker.owner  # claimed, by this worker
            record = worker.store.load(saga_id)
            assert record is not None
            step = record.step("first")
            assert step is not None
            assert step.attempt == 1  # not started again
        stop.set()
        # Given back while the held saga is still in its step, not after it.
        _until(
            lambda: all(_owner(worker, saga_id) is None for saga_id in waiting),
            "the unstarted sagas given back",
        )
        assert _owner(worker, ids[held]) == worker.owner
        assert [held] == INSIDE
    finally:
        GATE.set()
        loop.join(timeout=120)
    assert not loop.is_alive()
    assert worker.get(ids[held]).status is SagaStatus.COMPLETED
    for saga_id in waiting:  # untouched, and any process takes them at once
        assert worker.get(saga_id).status is SagaStatus.RUNNING
    assert (stats.recovered, stats.handed_back) == (2, 2)
    other = make_coord()
    other.register(saga)
    finished = {outcome.saga_id: outcome.status for outcome in other.recover().outcomes}
    assert finished == {saga_id: SagaStatus.COMPLETED for saga_id in waiting}
