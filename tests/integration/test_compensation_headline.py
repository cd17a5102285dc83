"""A compensation that failed for good is the saga's headline: ``view.error`` is its
error, ``view.forward_error`` the one that started the unwinding, and ``SagaFailed``
carries the participant's own exception in its chain, rebuilt alike on a replay. What
a compensation returned is on its step (``compensation_result``), typed.

Every test runs on SQLite and PostgreSQL, through ``Coordinator`` and through
``AsyncCoordinator`` (``any_coord``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from saga import (
    AsyncCoordinator,
    Coordinator,
    RecordedError,
    Saga,
    SagaFailed,
    SagaStatus,
    StepContext,
)
from tests.cli import headline_steps as trip
from tests.integration.support import expire_lease

FORWARD = "BookingRejected: charge_card rejected: card ending 4242 declined"
UNDO = "FlightCancellationError: airline refused to cancel FL-101: ticket already issued"


def _chain(error: BaseException) -> Iterator[BaseException]:
    """Every exception chained to ``error``: its causes and contexts, each once."""
    seen: list[BaseException] = []
    waiting = [error]
    while waiting:
        current = waiting.pop(0)
        if any(current is known for known in seen):
            continue
        seen.append(current)
        waiting += [e for e in (current.__cause__, current.__context__) if e is not None]
    return iter(seen)


def _type_name(error: BaseException) -> str | None:
    return error.type_name if isinstance(error, RecordedError) else type(error).__name__


def _refused(coord: Coordinator, key: str = "refused") -> SagaFailed:
    with pytest.raises(SagaFailed) as raised:
        coord.run(trip.TRIP, data={"refused": True}, key=key)
    return raised.value


def test_a_compensation_that_failed_for_good_is_the_sagas_error(any_coord: Coordinator) -> None:
    failure = _refused(any_coord)
    view = any_coord.get(failure.saga_id)
    assert view.status is SagaStatus.FAILED
    assert (view.error, view.forward_error) == (UNDO, FORWARD)
    (listed,) = any_coord.list(name=trip.TRIP.name)
    assert (listed.error, listed.forward_error) == (UNDO, FORWARD)


def test_a_compensated_sagas_error_is_its_forward_error(any_coord: Coordinator) -> None:
    with pytest.raises(SagaFailed) as raised:
        any_coord.run(trip.TRIP, data={}, key="compensated")
    view = any_coord.get(raised.value.saga_id)
    assert view.status is SagaStatus.COMPENSATED
    assert view.error == view.forward_error == FORWARD


def test_run_raises_the_compensations_own_exception_in_the_chain(any_coord: Coordinator) -> None:
    failure = _refused(any_coord)
    assert isinstance(failure.__cause__, trip.BookingRejected)  # unchanged: what made it unwind
    undone = [e for e in _chain(failure) if isinstance(e, trip.FlightCancellationError)]
    assert undone == [failure.compensation_error]
    assert str(undone[0]) == UNDO.split(": ", 1)[1]


def test_a_replay_rebuilds_the_same_chain_and_message(any_coord: Coordinator) -> None:
    first = _refused(any_coord, "replayed")
    again = _refused(any_coord, "replayed")
    assert str(again) == str(first)
    assert UNDO in str(again)
    names = [(_type_name(e), str(e)) for e in _chain(first)]
    assert [(_type_name(e), str(e)) for e in _chain(again)] == names
    assert ("FlightCancellationError", UNDO.split(": ", 1)[1]) in names
    assert again.compensation_error in list(_chain(again))


def test_what_a_compensation_returned_is_on_its_step_typed(any_coord: Coordinator) -> None:
    with pytest.raises(SagaFailed) as raised:
        any_coord.run(trip.TRIP, data={}, key="typed")
    view = any_coord.get(raised.value.saga_id)
    flight, hotel = view.step("book_flight"), view.step("book_hotel")
    assert flight.compensation_result == trip.Refund("re_FL-101", 120)  # the annotation
    assert hotel.compensation_result == trip.Refund("re_hotel", 80)  # result_type=
    assert isinstance(hotel.compensation_result, trip.Refund)
    assert view.step("charge_card").compensation_result is None  # nothing to undo
    assert flight.compensation_result_error is hotel.compensation_result_error is None
    (listed,) = any_coord.list(name=trip.TRIP.name)
    assert listed.step("book_flight").compensation_result == trip.Refund("re_FL-101", 120)


def _crashed(coord: Coordinator) -> str:
    """The saga as a crash inside charge_card's first attempt leaves it, lease expired."""
    with pytest.raises(trip.SimulatedCrash):
        coord.run(trip.TRIP, data={"crash": True}, key="crashed")
    record = coord.store.find(trip.TRIP.name, "crashed")
    assert record is not None
    expire_lease(coord, record.id)
    return record.id


@pytest.mark.parametrize("runtime", ["sync", "async"])
def test_a_compensation_result_is_typed_after_recovery_by_another_runtime(
    coord: Coordinator, db_url: str, runtime: str
) -> None:
    saga_id = _crashed(coord)
    if runtime == "sync":
        with Coordinator(db_url) as recoverer:
            recoverer.recover()
    else:

        async def recover() -> None:
            async with AsyncCoordinator(db_url) as recoverer:
                await recoverer.recover()

        asyncio.run(recover())
    with Coordinator(db_url) as reader:
        view = reader.get(saga_id)
    assert view.status is SagaStatus.COMPENSATED
    assert view.step("book_flight").compensation_result == trip.Refund("re_FL-101", 120)
    assert view.step("book_hotel").compensation_result == trip.Refund("re_hotel", 80)


MISMATCHED = Saga("headline-mismatched")


@MISMATCHED.step(retry=trip.ONCE)
def hold(ctx: StepContext) -> str:
    return "H-1"


@hold.compensation(result_type=trip.Refund)
def unhold(ctx):  # type: ignore[no-untyped-def]  # what it returns is no Refund (any longer)
    return {"refund": "re_1"}


@MISMATCHED.step(retry=trip.ONCE)
def confirm(ctx: StepContext) -> None:
    raise RuntimeError("confirmation refused")


def test_a_compensation_result_its_type_cannot_read_is_shown_as_stored(
    any_coord: Coordinator,
) -> None:
    with pytest.raises(SagaFailed) as raised:
        any_coord.run(MISMATCHED, data={})
    step = any_coord.get(raised.value.saga_id).step("hold")  # never fails on it
    assert step.compensation_result == {"refund": "re_1"}
    assert "result of the compensation of step 'hold' does not match its type Refund" in (
        step.compensation_result_error or ""
    )


def debit(account: str, amount: int) -> dict[str, object]:
    return {"account": account, "debited": amount}


def refund_debit(result: dict[str, object] | None, account: str, amount: int) -> trip.Refund:
    return trip.Refund(f"re_{account}", amount)


def test_a_context_manager_compensations_result_is_typed_by_its_annotation(
    any_coord: Coordinator,
) -> None:
    with pytest.raises(SagaFailed) as raised, any_coord.saga("headline-cm", key="cm") as s:  # noqa: PT012 - the block is the saga
        s.step(debit, "alice", 10, compensate=refund_debit)
        raise KeyError("the caller changed its mind")
    step = any_coord.get(raised.value.saga_id).step("debit")
    assert step.compensation_result == trip.Refund("re_alice", 10)
    assert isinstance(step.compensation_result, trip.Refund)
