"""What the step rows say once a saga is unwound: times of the actions, no step left running."""

from __future__ import annotations

import pytest

from saga import Coordinator, Saga, SagaFailed, StepContext, StepStatus, admin
from tests.integration.support import fast


def _wait_for_the_clock(coord: Coordinator, past: float) -> None:
    """Spin until the database clock is past ``past`` (SQLite keeps milliseconds): a time
    stamped from now on differs from ``past``, whatever the machine's speed."""
    while coord.store.now() <= past:
        pass


def test_a_compensated_step_keeps_the_finish_time_of_its_action(
    any_coord: Coordinator, db_url: str
) -> None:
    observer = Coordinator(db_url)
    finished: list[float | None] = []
    saga = Saga("records-finish-time")

    @saga.step()
    def reserve(ctx: StepContext) -> str:
        return "R-1"

    @reserve.compensation
    def release(ctx: StepContext) -> None:
        recorded = observer.get(ctx.saga_id).step("reserve").finished_at
        assert recorded is not None
        finished.append(recorded)
        _wait_for_the_clock(observer, recorded)

    @saga.step()
    def charge(ctx: StepContext) -> None:
        raise ValueError("card declined")

    try:
        with pytest.raises(SagaFailed) as raised:
            any_coord.run(saga)
        view = any_coord.get(raised.value.saga_id)
        reserve_view = view.step("reserve")
        assert reserve_view.finished_at == finished[0]  # not the end of its compensation
        assert reserve_view.started_at is not None
        assert reserve_view.duration == finished[0] - reserve_view.started_at
        # The compensation's own duration is the history's, from its events.
        entries = admin.saga_history(observer, view.id).entries
        done = next(
            e for e in entries if (e.event.kind, e.event.step) == ("compensation_done", "reserve")
        )
        assert done.duration is not None
    finally:
        observer.close()


def test_a_step_marked_compensated_by_hand_keeps_the_finish_time_of_its_action(
    coord: Coordinator,
) -> None:
    saga = Saga("records-marked")

    @saga.step()
    def transfer(ctx: StepContext) -> str:
        return "T-1"

    @transfer.compensation(retry=fast(1))
    def reverse(ctx: StepContext) -> None:
        raise RuntimeError("ledger locked")

    @saga.step()
    def confirm(ctx: StepContext) -> None:
        raise ValueError("confirmation refused")

    with pytest.raises(SagaFailed) as raised:
        coord.run(saga)
    before = coord.get(raised.value.saga_id).step("transfer").finished_at
    assert before is not None
    _wait_for_the_clock(coord, before)
    view = admin.mark_compensated(coord, raised.value.saga_id, "transfer", "reversed by hand")
    assert view.step("transfer").status is StepStatus.COMPENSATED
    assert view.step("transfer").finished_at == before
