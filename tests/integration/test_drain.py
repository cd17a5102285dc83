"""``coord.drain()``: a stopping process hands its sagas back at the next step boundary,
and another process takes them at once, without waiting for a lease to run out."""

from __future__ import annotations

import asyncio
import threading

import pytest

from saga import (
    AsyncCoordinator,
    Coordinator,
    RetryPolicy,
    Saga,
    SagaEvent,
    SagaHandedBack,
    SagaStatus,
    StepContext,
    StepStatus,
)
from tests.integration.conftest import MakeCoordinator
from tests.integration.support import expire_lease, kinds

WAIT = 60.0  # a bound on waiting for another thread, never a timing assertion
LONG_LEASE = 3600.0  # nobody could take these sagas by waiting for the lease
IN_PLACE = {"compensation_wait_in_place": 2 * LONG_LEASE}
"""A compensation's hour-long retry wait is spent in place (not handed back at once), so
that the drain is what ends it."""


class Crash(BaseException):
    """Escapes every ``except Exception``: the saga is left as a crash leaves it."""


class Gate:
    """Holds a step until the test lets it go, and says when the step is inside."""

    def __init__(self) -> None:
        self.inside = threading.Event()
        self.open = threading.Event()

    def hold(self) -> None:
        self.inside.set()
        assert self.open.wait(WAIT)


def in_thread(call: object) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            call()  # type: ignore[operator]
        except BaseException as error:  # noqa: BLE001 - handed to the test
            errors.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, errors


def drained(owner: Coordinator, call: object, *gates: Gate) -> list[BaseException]:
    """Run ``call`` in a thread; once every gate's step is inside, drain ``owner`` and let
    the steps go: what ``call`` raised."""
    thread, errors = in_thread(call)
    for gate in gates:
        assert gate.inside.wait(WAIT)
    owner.drain()
    for gate in gates:
        gate.open.set()
    thread.join(WAIT)
    return errors


def three_steps(name: str, gate: Gate, ran: list[str]) -> Saga:
    saga = Saga(name)

    @saga.step()
    def first(ctx: StepContext) -> str:
        ran.append("first")
        gate.hold()
        return "one"

    @saga.step()
    def second(ctx: StepContext) -> str:
        ran.append("second")
        return "two"

    @saga.step()
    def third(ctx: StepContext) -> str:
        ran.append("third")
        return "three"

    return saga


def test_a_draining_process_hands_back_before_the_next_step_and_another_takes_it_at_once(
    make_coord: MakeCoordinator,
) -> None:
    gate, ran = Gate(), []
    saga = three_steps("drain-forward", gate, ran)
    owner = make_coord(lease_ttl=LONG_LEASE)
    (handed,) = drained(owner, lambda: owner.run(saga, key="d-1"), gate)
    assert isinstance(handed, SagaHandedBack)
    assert handed.status is SagaStatus.RUNNING
    view = owner.get(handed.saga_id)
    assert view.status is SagaStatus.RUNNING
    assert view.owner is None  # free now, though its lease had an hour to run
    assert view.step("first").status is StepStatus.SUCCEEDED  # its success was kept
    assert [step.name for step in view.steps] == ["first"]  # the next never started
    assert kinds(owner, view.id)[-1] == "lease_released"
    taker = make_coord(lease_ttl=LONG_LEASE)
    taker.register(saga)
    (outcome,) = taker.recover().outcomes
    assert outcome.status is SagaStatus.COMPLETED
    assert ran == ["first", "second", "third"]  # nothing ran twice
    assert taker.get(view.id).results == {"first": "one", "second": "two", "third": "three"}


def test_a_saga_whose_last_step_ends_while_draining_is_finished_not_handed_back(
    make_coord: MakeCoordinator,
) -> None:
    gate = Gate()
    saga = Saga("drain-last")

    @saga.step()
    def only(ctx: StepContext) -> str:
        gate.hold()
        return "done"

    owner = make_coord(lease_ttl=LONG_LEASE)
    assert drained(owner, lambda: owner.run(saga, key="d-2"), gate) == []
    assert owner.get(key="d-2").status is SagaStatus.COMPLETED


def test_parallel_steps_in_flight_end_and_are_recorded_before_the_hand_back(
    make_coord: MakeCoordinator,
) -> None:
    left, right, ran = Gate(), Gate(), []
    saga = Saga("drain-parallel", max_concurrency=2)

    @saga.step(after=())
    def a(ctx: StepContext) -> str:
        ran.append("a")
        left.hold()
        return "a"

    @saga.step(after=())
    def b(ctx: StepContext) -> str:
        ran.append("b")
        right.hold()
        return "b"

    @saga.step(after=("a", "b"))
    def c(ctx: StepContext) -> str:
        ran.append("c")
        return "c"

    owner = make_coord(lease_ttl=LONG_LEASE)
    errors = drained(owner, lambda: owner.run(saga, key="d-3"), left, right)
    assert [type(error) for error in errors] == [SagaHandedBack]
    view = owner.get(key="d-3")
    assert (view.step("a").status, view.step("b").status) == (StepStatus.SUCCEEDED,) * 2
    assert sorted(step.name for step in view.steps) == ["a", "b"]
    taker = make_coord()
    taker.register(saga)
    assert taker.recover().outcomes[0].status is SagaStatus.COMPLETED
    assert sorted(ran) == ["a", "b", "c"]


def test_an_unwinding_saga_is_handed_back_between_compensations(
    make_coord: MakeCoordinator,
) -> None:
    gate, undone = Gate(), []
    saga = Saga("drain-unwind")

    @saga.step()
    def book(ctx: StepContext) -> str:
        return "booked"

    @book.compensation
    def unbook(ctx: StepContext) -> None:
        undone.append("unbook")

    @saga.step()
    def charge(ctx: StepContext) -> str:
        return "charged"

    @charge.compensation
    def refund(ctx: StepContext) -> None:
        undone.append("refund")
        gate.hold()

    @saga.step(retry=RetryPolicy(max_attempts=1))
    def ship(ctx: StepContext) -> None:
        raise RuntimeError("no courier")

    owner = make_coord(lease_ttl=LONG_LEASE)
    (handed,) = drained(owner, lambda: owner.run(saga, key="d-4"), gate)
    assert isinstance(handed, SagaHandedBack)
    view = owner.get(handed.saga_id)
    assert (view.status, view.owner) == (SagaStatus.COMPENSATING, None)
    assert view.step("charge").status is StepStatus.COMPENSATED
    assert view.step("book").status is StepStatus.SUCCEEDED  # its turn comes next owner
    taker = make_coord()
    taker.register(saga)
    assert taker.recover().outcomes[0].status is SagaStatus.COMPENSATED
    assert undone == ["refund", "unbook"]


def test_a_compensations_retry_wait_ends_when_the_process_drains(
    make_coord: MakeCoordinator,
) -> None:
    saga = Saga("drain-backoff")
    scheduled = threading.Event()
    tries: list[int] = []

    @saga.step()
    def charge(ctx: StepContext) -> str:
        return "charged"

    @charge.compensation(retry=RetryPolicy(max_attempts=10, initial_delay=LONG_LEASE, jitter=0))
    def refund(ctx: StepContext) -> None:
        tries.append(ctx.attempt)
        if len(tries) == 1:
            raise ConnectionError("bank unreachable")

    @saga.step(retry=RetryPolicy(max_attempts=1))
    def ship(ctx: StepContext) -> None:
        raise RuntimeError("no courier")

    owner = make_coord(lease_ttl=LONG_LEASE, **IN_PLACE)

    def watch(event: SagaEvent) -> None:
        if event.kind == "retry_scheduled":
            scheduled.set()

    owner.add_listener(watch, inline=True)
    thread, errors = in_thread(lambda: owner.run(saga, key="d-5"))
    assert scheduled.wait(WAIT)  # the compensation failed once; its wait is an hour
    owner.drain()
    thread.join(WAIT)
    assert not thread.is_alive(), "the retry wait did not end on drain"
    assert [type(error) for error in errors] == [SagaHandedBack]
    saga_id = owner.get(key="d-5").id
    assert kinds(owner, saga_id)[-2:] == ["compensation_attempt_failed", "lease_released"]
    taker = make_coord()
    taker.register(saga)
    assert taker.recover().outcomes[0].status is SagaStatus.COMPENSATED
    assert len(tries) == 2


def test_a_draining_recoverer_claims_nothing(make_coord: MakeCoordinator) -> None:
    saga = Saga("drain-no-claims")

    @saga.step()
    def only(ctx: StepContext) -> str:
        if ctx.attempt == 1:
            raise Crash("the process dies here")
        return "done"

    dead = make_coord()
    with pytest.raises(Crash):
        dead.run(saga, key="d-7")
    saga_id = dead.get(key="d-7").id
    expire_lease(dead, saga_id)
    recoverer = make_coord()
    recoverer.register(saga)
    recoverer.drain()
    assert recoverer.recover().outcomes == []
    assert dead.get(saga_id).owner == dead.owner  # left for a process that is not stopping


def test_an_async_coordinator_drains_the_same_way(db_url: str) -> None:
    gate, ran = Gate(), []
    saga = three_steps("drain-async", gate, ran)

    async def main() -> SagaHandedBack:
        async with AsyncCoordinator(db_url, lease_ttl=LONG_LEASE) as coord:
            running = asyncio.create_task(coord.run(saga, key="d-6"))
            assert await asyncio.to_thread(gate.inside.wait, WAIT)
            coord.drain()
            gate.open.set()
            with pytest.raises(SagaHandedBack) as handed:
                await running
            return handed.value

    handed = asyncio.run(main())
    with Coordinator(db_url) as taker:
        assert taker.get(handed.saga_id).owner is None
        taker.register(saga)
        assert taker.recover().outcomes[0].status is SagaStatus.COMPLETED
    assert ran == ["first", "second", "third"]


def test_an_async_compensations_backoff_ends_on_drain(
    db_url: str,
) -> None:
    saga = Saga("drain-async-backoff")
    tries: list[int] = []

    @saga.step()
    async def charge(ctx: StepContext) -> str:
        return "charged"

    @charge.compensation(retry=RetryPolicy(max_attempts=10, initial_delay=LONG_LEASE, jitter=0))
    async def refund(ctx: StepContext) -> None:
        tries.append(ctx.attempt)
        if len(tries) == 1:
            raise ConnectionError("bank unreachable")

    @saga.step(retry=RetryPolicy(max_attempts=1))
    async def ship(ctx: StepContext) -> None:
        raise RuntimeError("no courier")

    async def main() -> str:
        async with AsyncCoordinator(db_url, lease_ttl=LONG_LEASE, **IN_PLACE) as coord:
            scheduled = asyncio.Event()
            coord.add_listener(
                lambda event: scheduled.set() if event.kind == "retry_scheduled" else None,
                inline=True,
            )
            running = asyncio.create_task(coord.run(saga, key="d-8"))
            await asyncio.wait_for(scheduled.wait(), WAIT)  # its wait is an hour
            coord.drain()
            with pytest.raises(SagaHandedBack) as handed:
                await asyncio.wait_for(running, WAIT)
            return handed.value.saga_id

    saga_id = asyncio.run(main())
    with Coordinator(db_url) as taker:
        assert taker.get(saga_id).owner is None
        taker.register(saga)
        assert taker.recover().outcomes[0].status.value == "compensated"
    assert len(tries) == 2
