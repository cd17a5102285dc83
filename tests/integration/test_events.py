"""History: every state change writes its event with it; the events replay to the state."""

from __future__ import annotations

import pytest

from saga import Coordinator, Saga, SagaFailed, SagaStatus, StepContext, StepStatus
from tests.integration import steps
from tests.integration.conftest import MakeCoordinator
from tests.integration.support import assert_history_replays, fast, replay

Snapshot = tuple[SagaStatus | None, dict[str, StepStatus]]


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
