"""Unwinding: what is compensated, in which order, with what, and when it fails for good."""

from __future__ import annotations

from typing import Any

import pytest

from saga import (
    Coordinator,
    OperationRefusedError,
    Saga,
    SagaFailed,
    SagaStatus,
    StepContext,
    StepStatus,
)
from tests.integration import steps
from tests.integration.support import assert_history_replays, fast, kinds


def _order_saga(name: str, undone: list[tuple[str, Any]], fail_at: str) -> Saga:
    saga = Saga(name)

    @saga.step()
    def reserve(ctx: StepContext) -> dict[str, str]:
        return {"reservation": "r-1"}

    @reserve.compensation
    def release(ctx: StepContext) -> None:
        undone.append(("reserve", ctx.result))

    @saga.step()
    def notify(ctx: StepContext) -> str:  # nothing to undo: no compensation
        return "sent"

    @saga.step()
    def charge(ctx: StepContext) -> dict[str, int]:
        if fail_at == "charge":
            raise RuntimeError("card declined")
        return {"charge": 7}

    @charge.compensation
    def refund(ctx: StepContext) -> None:
        assert ctx.compensating
        undone.append(("charge", ctx.result))

    return saga


def test_failure_compensates_every_started_step_newest_first(coord: Coordinator) -> None:
    undone: list[tuple[str, Any]] = []
    with pytest.raises(SagaFailed) as raised:
        coord.run(_order_saga("unwind-order", undone, fail_at="charge"))
    # The failing step itself is compensated (with no result), then the older ones.
    assert undone == [("charge", None), ("reserve", {"reservation": "r-1"})]
    failure = raised.value
    assert failure.status is SagaStatus.COMPENSATED
    assert failure.failed_step == "charge"
    assert isinstance(failure.__cause__, RuntimeError)
    assert str(failure.__cause__) == "card declined"
    view = coord.get(failure.saga_id)
    assert view.status is SagaStatus.COMPENSATED
    statuses = {s.name: s.status for s in view.steps}
    assert statuses == {
        "reserve": StepStatus.COMPENSATED,
        "notify": StepStatus.SUCCEEDED,  # skipped: there is nothing to undo
        "charge": StepStatus.COMPENSATED,
    }
    assert view.step("charge").error == "RuntimeError: card declined"
    undo_events = [(e.kind, e.step) for e in coord.history(view.id) if "compensation" in e.kind]
    assert undo_events == [
        ("compensation_started", "charge"),
        ("compensation_done", "charge"),
        ("compensation_started", "reserve"),
        ("compensation_done", "reserve"),
    ]
    assert_history_replays(coord, view.id)


def test_compensation_has_its_own_retry_policy(coord: Coordinator) -> None:
    tries: list[int] = []
    saga = Saga("unwind-undo-retry")

    @saga.step()
    def book(ctx: StepContext) -> str:
        return "booking-1"

    @book.compensation(retry=fast(4, retry_on=(ConnectionError,)))
    def cancel_booking(ctx: StepContext) -> None:
        tries.append(ctx.attempt)
        if len(tries) < 3:
            raise ConnectionError("hotel API down")

    @saga.step()
    def pay(ctx: StepContext) -> None:
        raise RuntimeError("no funds")

    with pytest.raises(SagaFailed) as raised:
        coord.run(saga)
    assert raised.value.status is SagaStatus.COMPENSATED
    assert tries == [1, 2, 3]
    view = coord.get(raised.value.saga_id)
    assert view.step("book").compensation_attempt == 3
    assert view.step("book").status is StepStatus.COMPENSATED
    assert_history_replays(coord, view.id)


def _doomed(name: str, undo_calls: list[int], fixed: list[bool]) -> Saga:
    saga = Saga(name)

    @saga.step()
    def transfer(ctx: StepContext) -> dict[str, int]:
        return {"amount": 10}

    @transfer.compensation(retry=fast(2, retry_on=(Exception,)))
    def reverse(ctx: StepContext) -> None:
        undo_calls.append(ctx.attempt)
        if not fixed:
            raise RuntimeError("ledger locked")

    @saga.step()
    def confirm(ctx: StepContext) -> None:
        raise ValueError("confirmation refused")

    return saga


def test_compensation_failing_for_good_leaves_the_saga_failed(coord: Coordinator) -> None:
    undo_calls: list[int] = []
    fixed: list[bool] = []
    saga = _doomed("unwind-failed", undo_calls, fixed)
    with pytest.raises(SagaFailed) as raised:
        coord.run(saga, key="doomed")
    failure = raised.value
    assert failure.status is SagaStatus.FAILED
    assert failure.failed_step == "confirm"
    assert isinstance(failure.__cause__, ValueError)  # the original error, not the undo's
    assert undo_calls == [1, 2]
    view = coord.get(failure.saga_id)
    assert view.status is SagaStatus.FAILED
    assert view.owner is None  # terminal: nobody holds it, recovery leaves it alone
    assert view.step("transfer").status is StepStatus.COMPENSATING
    assert view.step("transfer").error == "RuntimeError: ledger locked"
    assert "compensation_failed" in kinds(coord, view.id)
    assert_history_replays(coord, view.id)

    # It stays failed: recovery does not touch it, a rerun with its key runs nothing.
    assert coord.recover().outcomes == []
    with pytest.raises(SagaFailed) as again:
        coord.run(saga, key="doomed")
    assert again.value.status is SagaStatus.FAILED
    assert undo_calls == [1, 2]
    assert coord.list(status=SagaStatus.FAILED)[0].id == view.id
    with pytest.raises(OperationRefusedError):
        coord.resume(view.id)
    with pytest.raises(OperationRefusedError):
        coord.cancel(view.id)
    assert coord.get(view.id).status is SagaStatus.FAILED

    # An operator retries: the policy's attempts start afresh (the count goes on).
    with pytest.raises(SagaFailed) as operator_failed:
        coord.compensate(view.id)
    assert operator_failed.value.status is SagaStatus.FAILED
    assert undo_calls == [1, 2, 3, 4]
    assert coord.get(view.id).status is SagaStatus.FAILED
    # Once the cause is fixed, the operator's compensation goes through.
    fixed.append(True)
    done = coord.compensate(view.id)
    assert done.status is SagaStatus.COMPENSATED
    assert undo_calls == [1, 2, 3, 4, 5]
    assert done.step("transfer").status is StepStatus.COMPENSATED
    assert "operator_action" in kinds(coord, view.id)
    assert_history_replays(coord, view.id)
    with pytest.raises(OperationRefusedError):
        coord.compensate(view.id)


def test_context_manager_block_failure_compensates_newest_first(coord: Coordinator) -> None:
    with pytest.raises(SagaFailed) as raised, coord.saga("unwind-cm", key="t-1") as s:  # noqa: PT012 - the block is the saga
        hold = s.step(steps.debit, "alice", 10, compensate=steps.refund)
        s.step(steps.credit, "bob", 10, compensate=steps.uncredit)
        s.step(steps.probe)  # no compensation: skipped
        raise KeyError("the block itself failed")
    assert steps.CALLS[-2:] == [
        ("uncredit", 10, "bob", 10),
        ("refund", hold, "alice", 10),
    ]
    failure = raised.value
    assert failure.status is SagaStatus.COMPENSATED
    assert failure.saga_id == s.id
    assert isinstance(failure.__cause__, KeyError)
    view = coord.get(s.id)
    assert view.status is SagaStatus.COMPENSATED
    assert view.step("probe").status is StepStatus.SUCCEEDED
    assert_history_replays(coord, s.id)


def test_context_manager_failing_step_is_compensated_with_no_result(coord: Coordinator) -> None:
    with pytest.raises(SagaFailed) as raised, coord.saga("unwind-cm-step") as s:  # noqa: PT012 - the block is the saga
        s.step(steps.debit, "alice", 3, compensate=steps.refund)
        s.step(steps.boom, "kaput", compensate=steps.unboom)
    failure = raised.value
    assert failure.failed_step == "boom"
    assert isinstance(failure.__cause__, RuntimeError)
    assert steps.CALLS[-2:] == [
        ("unboom", None, "kaput"),
        ("refund", {"hold": "alice-3", "key": f"{s.id}:debit"}, "alice", 3),
    ]
    view = coord.get(s.id)
    assert view.step("boom").status is StepStatus.COMPENSATED
    assert view.step("boom").error == "RuntimeError: kaput"
    assert_history_replays(coord, s.id)
