"""History: every state change writes its event with it; the events replay to the state."""

from __future__ import annotations

from typing import Any

import pytest

from saga import Coordinator, Saga, SagaFailed, SagaStatus, StepContext, StepStatus, admin
from tests.integration import steps
from tests.integration.conftest import MakeCoordinator
from tests.integration.support import assert_history_replays, fast, replay

Snapshot = tuple[SagaStatus | None, dict[str, StepStatus]]


@pytest.fixture
def coord_options() -> dict[str, Any]:
    """Context-manager compensations get the coordinator's policy: two quick attempts."""
    return {"compensation_retry": fast(2, retry_on=(Exception,))}


def _stored(coord: Coordinator, saga_id: str) -> Snapshot:
    view = coord.get(saga_id)
    return view.status, {s.name: s.status for s in view.steps}


def test_events_replay_to_the_stored_state_at_every_step(make_coord: MakeCoordinator) -> None:
    coord, observer = make_coord(), make_coord()
    checks: list[tuple[str, Snapshot, Snapshot]] = []
    saga = Saga("events-every-step")

    def check(ctx: StepContext, where: str) -> None:
        replayed = replay(observer.history(ctx.saga_id))
        checks.append((where, replayed, _stored(observer, ctx.saga_id)))

    @saga.step(retry=fast(2))
    def one(ctx: StepContext) -> int:
        check(ctx, f"one#{ctx.attempt}")
        if ctx.attempt == 1:
            raise ConnectionError("retry me")
        return 1

    @one.compensation
    def undo_one(ctx: StepContext) -> None:
        check(ctx, "undo_one")

    @saga.step()
    def two(ctx: StepContext) -> None:
        check(ctx, "two")
        raise RuntimeError("fail")

    @two.compensation
    def undo_two(ctx: StepContext) -> None:
        check(ctx, "undo_two")

    with pytest.raises(SagaFailed) as raised:
        coord.run(saga)
    assert [where for where, _, _ in checks] == ["one#1", "one#2", "two", "undo_two", "undo_one"]
    for where, replayed, stored in checks:
        assert replayed == stored, where
    assert checks[-1][2] == (
        SagaStatus.COMPENSATING,
        {"one": StepStatus.COMPENSATING, "two": StepStatus.COMPENSATED},
    )
    assert_history_replays(coord, raised.value.saga_id)


def test_history_is_ordered_and_stamped_with_epochs(coord: Coordinator) -> None:
    with coord.saga("events-cm") as s:
        s.step(steps.debit, "alice", 1, compensate=steps.refund)
        s.step(steps.credit, "bob", 1)
    history = coord.history(s.id)
    assert [(e.kind, e.step) for e in history] == [
        ("saga_started", None),
        ("step_started", "debit"),
        ("step_succeeded", "debit"),
        ("step_started", "credit"),
        ("step_succeeded", "credit"),
        ("saga_completed", None),
    ]
    assert [e.id for e in history] == sorted(e.id for e in history)
    assert all(e.epoch == 1 and e.saga_id == s.id for e in history)
    assert [e.at for e in history] == sorted(e.at for e in history)
    assert_history_replays(coord, s.id)


def _undo_events(coord: Coordinator, saga_id: str, step: str) -> list[tuple[str, int | None, str]]:
    return [
        (e.kind, e.attempt, (e.detail or {}).get("error", ""))
        for e in coord.history(saga_id)
        if e.step == step and e.kind.startswith("compensation")
    ]


def test_a_retried_compensation_attempt_records_its_error_with_the_next_start(
    any_coord: Coordinator, db_url: str
) -> None:
    observer = Coordinator(db_url)
    seen: list[list[tuple[str, int | None, str]]] = []
    saga = Saga("events-undo-retry")

    @saga.step()
    def book(ctx: StepContext) -> str:
        return "booking-1"

    @book.compensation(retry=fast(3, retry_on=(ConnectionError,)))
    def cancel_booking(ctx: StepContext) -> None:
        seen.append(_undo_events(observer, ctx.saga_id, "book"))  # what is durable by now
        if ctx.attempt < 3:
            raise ConnectionError(f"hotel API down ({ctx.attempt})")

    @saga.step()
    def pay(ctx: StepContext) -> None:
        raise RuntimeError("no funds")

    try:
        with pytest.raises(SagaFailed) as raised:
            any_coord.run(saga)
        assert raised.value.status is SagaStatus.COMPENSATED
        assert _undo_events(any_coord, raised.value.saga_id, "book") == [
            ("compensation_started", 1, ""),
            ("compensation_attempt_failed", 1, "ConnectionError: hotel API down (1)"),
            ("compensation_started", 2, ""),
            ("compensation_attempt_failed", 2, "ConnectionError: hotel API down (2)"),
            ("compensation_started", 3, ""),
            ("compensation_done", 3, ""),
        ]
        # Attempt 2 already sees attempt 1's failure: it was written with attempt 2's start.
        assert seen[1] == [
            ("compensation_started", 1, ""),
            ("compensation_attempt_failed", 1, "ConnectionError: hotel API down (1)"),
            ("compensation_started", 2, ""),
        ]
        assert_history_replays(observer, raised.value.saga_id)
    finally:
        observer.close()


def test_a_context_manager_compensation_records_each_failed_attempt(
    any_coord: Coordinator,
) -> None:
    with pytest.raises(SagaFailed) as raised, any_coord.saga("events-undo-retry-cm") as s:  # noqa: PT012 - the block is the saga
        s.step(steps.debit, "alice", 10, compensate=steps.locked)
        raise KeyError("the block failed")
    assert raised.value.status is SagaStatus.FAILED
    # The last attempt's error is the compensation_failed event's, not one more attempt_failed.
    assert _undo_events(any_coord, s.id, "debit") == [
        ("compensation_started", 1, ""),
        ("compensation_attempt_failed", 1, "RuntimeError: ledger locked"),
        ("compensation_started", 2, ""),
        ("compensation_failed", 2, "RuntimeError: ledger locked"),
    ]


def test_history_tells_a_failed_compensation_attempt_and_how_long_it_took(
    coord: Coordinator,
) -> None:
    with pytest.raises(SagaFailed), coord.saga("events-undo-history") as s:  # noqa: PT012 - the block is the saga
        s.step(steps.debit, "alice", 10, compensate=steps.locked)
        raise KeyError("the block failed")
    entries = admin.saga_history(coord, s.id).entries
    failed = next(e for e in entries if e.event.kind == "compensation_attempt_failed")
    assert failed.text == "compensation of step debit attempt 1 failed: RuntimeError: ledger locked"
    assert failed.duration is not None  # since that attempt's compensation_started
