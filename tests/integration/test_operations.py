"""Operator actions (compensate, resume, cancel) and listing sagas."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from saga import (
    Coordinator,
    OperationRefusedError,
    Saga,
    SagaBusyError,
    SagaFailed,
    SagaStatus,
    StepContext,
    StepStatus,
)
from tests.integration import steps
from tests.integration.conftest import MakeCoordinator
from tests.integration.steps import Crash
from tests.integration.support import (
    assert_history_replays,
    expire_lease,
    kinds,
    wait_for_the_clock,
    wait_until_expired,
)

LOG: list[tuple[str, Any]] = []


@pytest.fixture(autouse=True)
def _clear_log() -> None:
    LOG.clear()


def _stuck_saga(name: str) -> Saga:
    """one -> two (dies on attempt 1) -> three."""
    saga = Saga(name)

    @saga.step()
    def one(ctx: StepContext) -> str:
        LOG.append(("one", ctx.attempt))
        return "1"

    @one.compensation
    def undo_one(ctx: StepContext) -> None:
        LOG.append(("undo_one", ctx.result))

    @saga.step()
    def two(ctx: StepContext) -> str:
        LOG.append(("two", ctx.attempt))
        if ctx.attempt == 1:
            raise Crash("dies")
        return "2"

    @two.compensation
    def undo_two(ctx: StepContext) -> None:
        LOG.append(("undo_two", ctx.result))

    @saga.step()
    def three(ctx: StepContext) -> str:
        LOG.append(("three", ctx.attempt))
        return "3"

    return saga


def _stuck(make_coord: MakeCoordinator, saga: Saga) -> tuple[Coordinator, str]:
    # A lease far longer than the test, expired on purpose where a test wants it expired:
    # "still live" must not depend on the machine's speed.
    dead = make_coord(lease_ttl=600)
    with pytest.raises(Crash):
        dead.run(saga)
    operator = make_coord(lease_ttl=0.3)
    saga_id = operator.list(limit=1)[0].id
    return operator, saga_id


def test_compensate_unwinds_a_stuck_saga_now(make_coord: MakeCoordinator) -> None:
    operator, saga_id = _stuck(make_coord, _stuck_saga("ops-compensate"))
    with pytest.raises(SagaBusyError):  # its process may still be alive
        operator.compensate(saga_id)
    expire_lease(operator, saga_id)
    view = operator.compensate(saga_id)
    assert view.status is SagaStatus.COMPENSATED
    assert LOG == [("one", 1), ("two", 1), ("undo_two", None), ("undo_one", "1")]
    assert "operator_action" in kinds(operator, saga_id)
    assert_history_replays(operator, saga_id)
    with pytest.raises(OperationRefusedError, match="already compensated"):
        operator.compensate(saga_id)


def test_resume_carries_a_stuck_saga_forward_now(make_coord: MakeCoordinator) -> None:
    operator, saga_id = _stuck(make_coord, _stuck_saga("ops-resume"))
    expire_lease(operator, saga_id)
    view = operator.resume(saga_id)
    assert view.status is SagaStatus.COMPLETED
    assert LOG == [("one", 1), ("two", 1), ("two", 2), ("three", 1)]
    assert view.epoch == 2
    with pytest.raises(OperationRefusedError, match="completed"):
        operator.resume(saga_id)
    assert_history_replays(operator, saga_id)


def test_resume_refuses_context_manager_sagas(make_coord: MakeCoordinator) -> None:
    dead = make_coord(lease_ttl=0.3)
    with pytest.raises(Crash), dead.saga("ops-resume-cm") as s:  # noqa: PT012 - the block is the saga
        s.step(steps.debit, "alice", 1, compensate=steps.refund)
        raise Crash("dies")
    operator = make_coord(lease_ttl=0.3)
    with pytest.raises(OperationRefusedError, match="context-manager"):
        operator.resume(s.id)
    wait_until_expired(operator, s.id)
    assert operator.compensate(s.id).status is SagaStatus.COMPENSATED
    assert steps.CALLS[-1][0] == "refund"


def test_cancel_of_a_stuck_saga_unwinds_it(make_coord: MakeCoordinator) -> None:
    operator, saga_id = _stuck(make_coord, _stuck_saga("ops-cancel-stuck"))
    expire_lease(operator, saga_id)
    view = operator.cancel(saga_id)
    assert view.status is SagaStatus.CANCELLED
    assert view.cancel_requested
    assert LOG == [("one", 1), ("two", 1), ("undo_two", None), ("undo_one", "1")]
    assert_history_replays(operator, saga_id)
    with pytest.raises(OperationRefusedError):
        operator.cancel(saga_id)


def _blocking_saga(name: str, started: threading.Event, go_on: threading.Event) -> Saga:
    saga = Saga(name)

    @saga.step()
    def hold(ctx: StepContext) -> str:
        LOG.append(("hold", ctx.saga_id))
        started.set()
        assert go_on.wait(30)
        return "held"

    @hold.compensation
    def release(ctx: StepContext) -> None:
        LOG.append(("release", ctx.result))

    @saga.step()
    def capture(ctx: StepContext) -> str:
        LOG.append(("capture", ctx.attempt))
        return "captured"

    @capture.compensation
    def uncapture(ctx: StepContext) -> None:
        LOG.append(("uncapture", ctx.result))

    return saga


@pytest.mark.parametrize("same_coordinator", [True, False], ids=["same", "other"])
def test_cancel_stops_a_running_saga_at_its_next_step_boundary(
    make_coord: MakeCoordinator, same_coordinator: bool
) -> None:
    runner = make_coord(lease_ttl=5.0)
    operator = runner if same_coordinator else make_coord(lease_ttl=5.0)
    started, go_on = threading.Event(), threading.Event()
    saga = _blocking_saga(f"ops-cancel-live-{same_coordinator}", started, go_on)
    outcome: list[BaseException | object] = []

    def run() -> None:
        try:
            outcome.append(runner.run(saga))
        except BaseException as error:
            outcome.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        assert started.wait(30)
        saga_id = str(LOG[0][1])
        view = operator.cancel(saga_id)
        # The live owner is not disturbed mid-step: the request is only recorded.
        assert view.status is SagaStatus.RUNNING
        assert view.cancel_requested
        assert view.epoch == 1
    finally:
        go_on.set()
        thread.join(30)
    failure = outcome[0]
    assert isinstance(failure, SagaFailed), failure
    assert failure.status is SagaStatus.CANCELLED
    assert ("capture", 1) not in LOG  # stopped at the boundary
    assert ("release", "held") in LOG
    final = operator.get(saga_id)
    assert final.status is SagaStatus.CANCELLED
    assert final.step("hold").status is StepStatus.COMPENSATED
    assert final.epoch == 1
    assert "operator_action" in kinds(operator, saga_id)
    assert_history_replays(operator, saga_id)


def _quick(name: str) -> Saga:
    saga = Saga(name)

    @saga.step()
    def only(ctx: StepContext) -> Any:
        if ctx.data == "fail":
            raise RuntimeError("asked to fail")
        return ctx.data

    return saga


def test_list_filters_by_status_and_name_newest_first(coord: Coordinator) -> None:
    alpha, beta = _quick("ops-list-alpha"), _quick("ops-list-beta")
    made: list[tuple[str, str, SagaStatus]] = []
    for i, (saga, data) in enumerate(
        [(alpha, "a"), (beta, "fail"), (alpha, "fail"), (beta, "b"), (alpha, "c")]
    ):
        try:
            view = coord.run(saga, data=data, key=str(i))
            made.append((view.id, saga.name, view.status))
        except SagaFailed as failure:
            made.append((failure.saga_id, saga.name, failure.status))
        # Two sagas begun in one tick of the clock (SQLite's is in milliseconds) tie, and
        # a tie lists by id: the next saga begins on a later tick.
        begun = coord.get(made[-1][0]).created_at
        assert begun is not None
        wait_for_the_clock(coord, begun)
    newest_first = [m[0] for m in reversed(made)]
    assert [v.id for v in coord.list()] == newest_first
    assert [v.id for v in coord.list(limit=2)] == newest_first[:2]
    completed = [m[0] for m in reversed(made) if m[2] is SagaStatus.COMPLETED]
    assert [v.id for v in coord.list(status=SagaStatus.COMPLETED)] == completed
    assert [v.id for v in coord.list(status="compensated", name="ops-list-beta")] == [made[1][0]]
    alphas = [m[0] for m in reversed(made) if m[1] == "ops-list-alpha"]
    assert [v.id for v in coord.list(name="ops-list-alpha")] == alphas
    assert coord.list(name="nobody") == []
    both = coord.list(status=[SagaStatus.COMPLETED, SagaStatus.COMPENSATED])
    assert len(both) == 5


def test_list_is_bounded_by_default(coord: Coordinator) -> None:
    empty = Saga("ops-list-many")
    for _ in range(101):
        coord.run(empty)
    assert len(coord.list()) == 100
    assert len(coord.list(limit=101)) == 101
    assert len(coord.list(limit=7)) == 7


def test_cancel_stops_a_running_context_manager_saga_at_its_next_step(
    make_coord: MakeCoordinator,
) -> None:
    runner, operator = make_coord(lease_ttl=5.0), make_coord(lease_ttl=5.0)
    between, go_on = threading.Event(), threading.Event()
    outcome: list[BaseException] = []
    ids: list[str] = []

    def run() -> None:
        try:
            with runner.saga("ops-cancel-cm") as s:
                ids.append(s.id)
                s.step(steps.debit, "alice", 4, compensate=steps.refund)
                between.set()
                assert go_on.wait(30)
                s.step(steps.credit, "bob", 4, compensate=steps.uncredit)
        except BaseException as error:  # the test inspects it
            outcome.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        assert between.wait(30)
        assert operator.cancel(ids[0]).status is SagaStatus.RUNNING
    finally:
        go_on.set()
        thread.join(30)
    failure = outcome[0]
    assert isinstance(failure, SagaFailed), failure
    assert failure.status is SagaStatus.CANCELLED
    assert ("credit", "bob", 4) not in steps.CALLS
    assert steps.CALLS[-1][0] == "refund"
    view = operator.get(ids[0])
    assert view.status is SagaStatus.CANCELLED
    assert view.step("debit").status is StepStatus.COMPENSATED
    assert_history_replays(operator, ids[0])
