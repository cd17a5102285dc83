"""Pivot and retriable steps: past the point of no return a saga only goes forward."""

from __future__ import annotations

import threading

import pytest

from saga import (
    Coordinator,
    DefinitionError,
    OperationRefusedError,
    Saga,
    SagaFailed,
    SagaStatus,
    StepContext,
    StepKind,
    StepStatus,
    admin,
)
from tests.integration.conftest import MakeCoordinator
from tests.integration.steps import Crash
from tests.integration.support import assert_history_replays, fast, wait_until_expired


def test_a_compensation_on_a_pivot_is_refused_at_register(coord: Coordinator) -> None:
    saga = Saga("pivot-with-undo")

    @saga.step(pivot=True)
    def ship(ctx: StepContext) -> None:
        return None

    @ship.compensation
    def unship(ctx: StepContext) -> None:
        return None

    with pytest.raises(DefinitionError, match="'ship' is pivot"):
        coord.register(saga)
    with pytest.raises(DefinitionError):
        coord.run(saga)
    assert coord.list() == []


def test_failure_after_the_pivot_compensates_nothing(coord: Coordinator) -> None:
    undone: list[str] = []
    saga = Saga("pivot-then-fail")

    @saga.step()
    def charge(ctx: StepContext) -> str:
        return "charged"

    @charge.compensation
    def refund(ctx: StepContext) -> None:
        undone.append("charge")

    @saga.step(pivot=True)
    def ship(ctx: StepContext) -> str:
        return "shipped"

    @saga.step()
    def invoice(ctx: StepContext) -> None:
        raise RuntimeError("invoice service down")

    @invoice.compensation
    def void_invoice(ctx: StepContext) -> None:
        undone.append("invoice")

    with pytest.raises(SagaFailed) as raised:
        coord.run(saga)
    assert undone == []
    failure = raised.value
    assert failure.status is SagaStatus.FAILED
    assert failure.failed_step == "invoice"
    assert isinstance(failure.__cause__, RuntimeError)
    view = coord.get(failure.saga_id)
    assert view.status is SagaStatus.FAILED
    assert view.step("ship").kind is StepKind.PIVOT
    assert view.step("charge").status is StepStatus.SUCCEEDED
    assert view.step("invoice").status is StepStatus.FAILED
    # An operator cannot unwind it either.
    with pytest.raises(OperationRefusedError, match="pivot"):
        coord.compensate(view.id)
    assert undone == []
    assert_history_replays(coord, view.id)


def test_retriable_steps_after_the_pivot_are_retried_until_they_succeed(
    coord: Coordinator,
) -> None:
    tries: list[int] = []
    saga = Saga("pivot-retriable")

    @saga.step(pivot=True)
    def ship(ctx: StepContext) -> str:
        return "shipped"

    @saga.step(retriable=True, retry=fast(None, retry_on=(Exception,)))
    def email(ctx: StepContext) -> str:
        tries.append(ctx.attempt)
        if ctx.attempt < 6:
            raise RuntimeError("smtp down")
        return "sent"

    view = coord.run(saga)
    assert view.status is SagaStatus.COMPLETED
    assert tries == [1, 2, 3, 4, 5, 6]
    assert view.step("email").kind is StepKind.RETRIABLE
    assert view.step("email").attempt == 6


def test_retriable_and_pivot_steps_are_never_compensated(coord: Coordinator) -> None:
    undone: list[str] = []
    saga = Saga("pivot-never-compensated")

    @saga.step()
    def reserve(ctx: StepContext) -> str:
        return "r"

    @reserve.compensation
    def release(ctx: StepContext) -> None:
        undone.append("reserve")

    @saga.step(pivot=True)
    def ship(ctx: StepContext) -> str:
        return "s"

    @saga.step(retriable=True, retry=fast(2, retry_on=(Exception,)))
    def notify(ctx: StepContext) -> None:
        raise RuntimeError("still down")

    with pytest.raises(SagaFailed) as raised:
        coord.run(saga)
    assert raised.value.status is SagaStatus.FAILED
    assert undone == []
    statuses = {s.name: s.status for s in coord.get(raised.value.saga_id).steps}
    assert statuses == {
        "reserve": StepStatus.SUCCEEDED,
        "ship": StepStatus.SUCCEEDED,
        "notify": StepStatus.FAILED,
    }


def test_cancel_and_compensate_are_refused_past_the_pivot(make_coord: MakeCoordinator) -> None:
    first = make_coord(lease_ttl=0.3)
    saga = Saga("pivot-refused")

    @saga.step(pivot=True)
    def ship(ctx: StepContext) -> str:
        return "s"

    @saga.step()
    def track(ctx: StepContext) -> str:
        if ctx.attempt == 1:
            raise Crash("died after the pivot")
        return "tracked"

    with pytest.raises(Crash):
        first.run(saga)
    saga_id = first.list()[0].id
    second = make_coord(lease_ttl=0.3)
    with pytest.raises(OperationRefusedError, match="pivot"):
        second.cancel(saga_id)
    with pytest.raises(OperationRefusedError, match="pivot"):
        second.compensate(saga_id)
    assert second.get(saga_id).cancel_requested is False
    # Recovery told to compensate still goes forward: past the pivot there is no way back.
    wait_until_expired(second, saga_id)
    report = second.recover(compensate=True)
    assert [o.status for o in report.outcomes] == [SagaStatus.COMPLETED]
    assert second.get(saga_id).results == {"ship": "s", "track": "tracked"}


def test_on_crash_compensate_goes_forward_past_the_pivot(make_coord: MakeCoordinator) -> None:
    first = make_coord(lease_ttl=0.3)
    saga = Saga("pivot-on-crash", on_crash="compensate")
    entered = threading.Event()

    @saga.step(pivot=True)
    def ship(ctx: StepContext) -> str:
        return "s"

    @saga.step()
    def track(ctx: StepContext) -> str:
        if ctx.attempt == 1:
            entered.set()
            raise Crash("died")
        return "t"

    with pytest.raises(Crash):
        first.run(saga)
    assert entered.is_set()
    second = make_coord(lease_ttl=0.3)
    saga_id = second.list()[0].id
    wait_until_expired(second, saga_id)
    assert second.recover().outcomes[0].status is SagaStatus.COMPLETED


def _in_doubt_pivot(name: str, undone: list[str], kills: int, attempts: int = 2) -> Saga:
    """reserve, then a pivot ``ship`` whose process dies (Crash) on its first ``kills`` attempts."""
    saga = Saga(name)

    @saga.step()
    def reserve(ctx: StepContext) -> str:
        return "r"

    @reserve.compensation
    def release(ctx: StepContext) -> None:
        undone.append("reserve")

    @saga.step(pivot=True, retry=fast(attempts))
    def ship(ctx: StepContext) -> str:
        if ctx.attempt <= kills:
            raise Crash("died in the pivot, perhaps after it acted")
        return "s"

    return saga


def test_cancel_is_refused_while_the_pivot_may_have_acted(make_coord: MakeCoordinator) -> None:
    """Found by the SIGKILL soak: the owner died in the pivot; cancelling would undo
    ``reserve`` although the pivot may have acted. Refused; recovery goes forward."""
    undone: list[str] = []
    saga = _in_doubt_pivot("pivot-in-doubt-cancel", undone, kills=1)
    first = make_coord(lease_ttl=0.3)
    with pytest.raises(Crash):
        first.run(saga)
    saga_id = first.list()[0].id
    second = make_coord(lease_ttl=0.3)
    wait_until_expired(second, saga_id)
    with pytest.raises(OperationRefusedError, match="pivot"):
        second.cancel(saga_id)
    assert second.get(saga_id).cancel_requested is False
    assert second.recover().outcomes[0].status is SagaStatus.COMPLETED
    assert undone == []


def test_a_pivot_that_never_returns_leaves_the_saga_failed_with_nothing_undone(
    make_coord: MakeCoordinator,
) -> None:
    """Found by the SIGKILL soak: a pivot whose attempts all ended with its process
    dying may have acted, so running out of attempts must not unwind what came before."""
    undone: list[str] = []
    saga = _in_doubt_pivot("pivot-never-returns", undone, kills=2)
    first = make_coord(lease_ttl=0.3)
    with pytest.raises(Crash):
        first.run(saga)
    saga_id = first.list()[0].id
    second = make_coord(lease_ttl=0.3)
    wait_until_expired(second, saga_id)
    with pytest.raises(Crash):
        second.recover()  # attempt 2 dies too
    third = make_coord(lease_ttl=0.3)
    wait_until_expired(third, saga_id)
    assert [o.status for o in third.recover().outcomes] == [SagaStatus.FAILED]
    view = third.get(saga_id)
    assert view.status is SagaStatus.FAILED
    assert view.step("reserve").status is StepStatus.SUCCEEDED
    assert "gave up after 2 attempts" in (view.step("ship").error or "")
    assert undone == []
    assert_history_replays(third, saga_id)


def _given_up_pivot(make_coord: MakeCoordinator, name: str, undone: list[str]) -> tuple[str, Saga]:
    """A saga whose pivot's only attempt died with its process, given up by recovery."""
    saga = _in_doubt_pivot(name, undone, kills=1, attempts=1)
    first = make_coord(lease_ttl=0.3)
    with pytest.raises(Crash):
        first.run(saga)
    saga_id = first.list()[0].id
    second = make_coord(lease_ttl=0.3)
    wait_until_expired(second, saga_id)
    assert [o.status for o in second.recover().outcomes] == [SagaStatus.FAILED]
    return saga_id, saga


def test_a_pivot_given_up_is_recorded_in_doubt_not_failed(make_coord: MakeCoordinator) -> None:
    undone: list[str] = []
    saga_id, _ = _given_up_pivot(make_coord, "pivot-given-up-in-doubt", undone)
    coord = make_coord()
    view = coord.get(saga_id)
    assert view.step("ship").status is StepStatus.IN_DOUBT
    assert view.step("reserve").status is StepStatus.SUCCEEDED
    kinds = [(e.kind, e.step) for e in coord.history(saga_id)]
    assert ("step_in_doubt", "ship") in kinds
    assert ("step_failed", "ship") not in kinds
    assert_history_replays(coord, saga_id)


def test_every_unwinding_verb_is_refused_while_a_pivot_is_in_doubt(
    make_coord: MakeCoordinator,
) -> None:
    """The documented way out of ``failed`` must not undo what came before a pivot that
    may have acted; nothing is written by the refusals."""
    undone: list[str] = []
    saga_id, saga = _given_up_pivot(make_coord, "pivot-in-doubt-refusals", undone)
    coord = make_coord()
    coord.register(saga)
    before = coord.history(saga_id)
    with pytest.raises(OperationRefusedError, match="mark-step"):
        coord.compensate(saga_id)
    with pytest.raises(OperationRefusedError, match="mark-step"):
        admin.retry_compensation(coord, saga_id)
    with pytest.raises(OperationRefusedError):
        admin.mark_compensated(coord, saga_id, "reserve", "undid it by hand")
    assert coord.history(saga_id) == before
    assert undone == []


def test_marking_an_in_doubt_pivot_as_not_done_lets_the_saga_unwind(
    make_coord: MakeCoordinator,
) -> None:
    undone: list[str] = []
    saga_id, saga = _given_up_pivot(make_coord, "pivot-in-doubt-marked", undone)
    coord = make_coord()
    coord.register(saga)
    with pytest.raises(OperationRefusedError, match="not in doubt"):
        admin.mark_step(coord, saga_id, "reserve", "checked the warehouse")
    marked = admin.mark_step(coord, saga_id, "ship", "the carrier has no such parcel")
    assert marked.status is SagaStatus.FAILED
    assert marked.step("ship").status is StepStatus.FAILED
    assert undone == []  # marking undoes nothing by itself
    operator = [e for e in coord.history(saga_id) if e.kind == "operator_action"][-1]
    assert operator.detail is not None
    assert operator.detail["reason"] == "the carrier has no such parcel"
    view = admin.retry_compensation(coord, saga_id)
    assert view.status is SagaStatus.COMPENSATED
    assert undone == ["reserve"]
    assert_history_replays(coord, saga_id)
