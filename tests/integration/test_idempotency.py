"""Idempotent start: the same key returns the recorded outcome and runs nothing twice."""

from __future__ import annotations

import pytest

from saga import (
    Coordinator,
    InputMismatchError,
    OperationRefusedError,
    Saga,
    SagaFailed,
    SagaStatus,
    StepContext,
    StepStatus,
)
from tests.integration import steps
from tests.integration.conftest import MakeCoordinator
from tests.integration.steps import Crash
from tests.integration.support import assert_history_replays, wait_until_expired

RAN: list[str] = []


def _counted(name: str, fail: bool = False) -> Saga:
    saga = Saga(name)

    @saga.step()
    def reserve(ctx: StepContext) -> dict[str, str]:
        RAN.append("reserve")
        return {"sku": ctx.data["sku"]}

    @reserve.compensation
    def release(ctx: StepContext) -> None:
        RAN.append("release")

    @saga.step()
    def charge(ctx: StepContext) -> int:
        RAN.append("charge")
        if fail:
            raise RuntimeError("declined")
        return 42

    return saga


@pytest.fixture(autouse=True)
def _clear_ran() -> None:
    RAN.clear()


def test_same_key_returns_the_recorded_outcome_and_runs_nothing(coord: Coordinator) -> None:
    saga = _counted("idem-completed")
    first = coord.run(saga, data={"sku": "A1"}, key="order-42")
    again = coord.run(saga, data={"sku": "A1"}, key="order-42")
    assert RAN == ["reserve", "charge"]
    assert again.id == first.id
    assert again.status is SagaStatus.COMPLETED
    assert again.results == first.results == {"reserve": {"sku": "A1"}, "charge": 42}
    # By name too.
    assert coord.run("idem-completed", data={"sku": "A1"}, key="order-42").id == first.id
    assert RAN == ["reserve", "charge"]
    assert len(coord.list()) == 1


def test_same_key_from_another_coordinator_runs_nothing(make_coord: MakeCoordinator) -> None:
    saga = _counted("idem-other-process")
    first = make_coord().run(saga, data={"sku": "B"}, key="k")
    again = make_coord().run(saga, data={"sku": "B"}, key="k")
    assert again.id == first.id
    assert RAN == ["reserve", "charge"]


def test_same_key_after_compensation_raises_saga_failed_again(coord: Coordinator) -> None:
    saga = _counted("idem-compensated", fail=True)
    with pytest.raises(SagaFailed) as first:
        coord.run(saga, data={"sku": "C"}, key="k")
    assert RAN == ["reserve", "charge", "release"]
    with pytest.raises(SagaFailed) as again:
        coord.run(saga, data={"sku": "C"}, key="k")
    assert again.value.saga_id == first.value.saga_id
    assert again.value.status is SagaStatus.COMPENSATED
    assert again.value.failed_step == "charge"
    assert RAN == ["reserve", "charge", "release"]


def test_same_key_with_other_input_is_refused(coord: Coordinator) -> None:
    saga = _counted("idem-other-input")
    first = coord.run(saga, data={"sku": "D"}, key="k")
    with pytest.raises(InputMismatchError, match="other input") as refused:
        coord.run(saga, data={"sku": "E"}, key="k")
    assert isinstance(refused.value, OperationRefusedError)  # as it was before it had a name
    assert refused.value.saga_id == first.id
    assert RAN == ["reserve", "charge"]
    assert coord.get(first.id).input == {"sku": "D"}
    assert len(coord.list()) == 1


def test_same_key_on_an_interrupted_saga_finishes_it(make_coord: MakeCoordinator) -> None:
    saga = Saga("idem-interrupted")
    ran: list[tuple[str, int]] = []

    @saga.step()
    def one(ctx: StepContext) -> int:
        ran.append(("one", ctx.attempt))
        return 1

    @saga.step()
    def two(ctx: StepContext) -> int:
        ran.append(("two", ctx.attempt))
        if ctx.attempt == 1:
            raise Crash("died")
        return 2

    first = make_coord(lease_ttl=0.3)
    with pytest.raises(Crash):
        first.run(saga, key="k")
    second = make_coord(lease_ttl=0.3)
    saga_id = second.list()[0].id
    wait_until_expired(second, saga_id)
    view = second.run(saga, key="k")
    assert view.id == saga_id
    assert view.status is SagaStatus.COMPLETED
    assert ran == [("one", 1), ("two", 1), ("two", 2)]
    assert_history_replays(second, saga_id)


def test_context_manager_same_key_continues_the_same_saga(make_coord: MakeCoordinator) -> None:
    first = make_coord(lease_ttl=0.3)
    with pytest.raises(Crash), first.saga("idem-cm", key="t-7") as s:  # noqa: PT012 - the block is the saga
        hold = s.step(steps.debit, "alice", 10, compensate=steps.refund)
        raise Crash("the process dies between steps")
    assert first.get(s.id).status is SagaStatus.RUNNING

    second = make_coord(lease_ttl=0.3)
    wait_until_expired(second, s.id)
    with second.saga("idem-cm", key="t-7") as again:
        assert again.id == s.id
        # Done steps return their recorded results without running again.
        assert again.step(steps.debit, "alice", 10, compensate=steps.refund) == hold
        assert again.step(steps.credit, "bob", 10, compensate=steps.uncredit) == 10
    assert [c[0] for c in steps.CALLS] == ["debit", "credit"]
    view = second.get(s.id)
    assert view.status is SagaStatus.COMPLETED
    assert view.epoch == 2
    assert {st.name: st.status for st in view.steps} == {
        "debit": StepStatus.SUCCEEDED,
        "credit": StepStatus.SUCCEEDED,
    }

    # A completed saga re-entered with its key replays every step without running one.
    with second.saga("idem-cm", key="t-7") as done:
        assert done.step(steps.debit, "alice", 10, compensate=steps.refund) == hold
        assert done.step(steps.credit, "bob", 10, compensate=steps.uncredit) == 10
    assert [c[0] for c in steps.CALLS] == ["debit", "credit"]
    assert_history_replays(second, s.id)


def test_context_manager_same_key_after_compensation_raises(coord: Coordinator) -> None:
    with pytest.raises(SagaFailed), coord.saga("idem-cm-failed", key="k") as s:  # noqa: PT012 - the block is the saga
        s.step(steps.debit, "alice", 1, compensate=steps.refund)
        raise RuntimeError("block failed")
    calls = len(steps.CALLS)
    with pytest.raises(SagaFailed) as again, coord.saga("idem-cm-failed", key="k") as s2:
        s2.step(steps.debit, "alice", 1, compensate=steps.refund)
    assert again.value.status is SagaStatus.COMPENSATED
    assert again.value.saga_id == s.id
    assert len(steps.CALLS) == calls


@pytest.mark.parametrize("other", ["arguments", "a call more"])
def test_context_manager_completed_saga_re_entered_with_other_calls_is_refused(
    coord: Coordinator, other: str
) -> None:
    with coord.saga("idem-cm-other", key="k") as s:
        s.step(steps.debit, "alice", 10, compensate=steps.refund)
    calls = len(steps.CALLS)
    with (  # noqa: PT012 - the block is the saga
        pytest.raises(InputMismatchError, match="use a new key") as refused,
        coord.saga("idem-cm-other", key="k") as again,
    ):
        if other == "arguments":
            again.step(steps.debit, "alice", 99, compensate=steps.refund)
        else:
            again.step(steps.debit, "alice", 10, compensate=steps.refund)
            again.step(steps.credit, "bob", 10, compensate=steps.uncredit)
    assert refused.value.saga_id == s.id
    # Code written when this raised the saga's SagaFailed (status completed) still catches it.
    assert isinstance(refused.value, SagaFailed)
    assert refused.value.status is SagaStatus.COMPLETED
    assert len(steps.CALLS) == calls
    view = coord.get(s.id)
    assert view.status is SagaStatus.COMPLETED
    assert [(st.name, st.args) for st in view.steps] == [
        ("debit", {"args": ["alice", 10], "kwargs": {}})
    ]
