"""What the step rows say once a saga is unwound: times of the actions, no step left running."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from saga import Coordinator, Saga, SagaFailed, SagaStatus, StepContext, StepStatus, admin
from saga.cli import app
from tests.integration import steps
from tests.integration.steps import Crash
from tests.integration.support import (
    assert_history_replays,
    expire_lease,
    fast,
    wait_for_the_clock,
)


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
        wait_for_the_clock(observer, recorded)

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
    wait_for_the_clock(coord, before)
    view = admin.mark_compensated(coord, raised.value.saga_id, "transfer", "reversed by hand")
    assert view.step("transfer").status is StepStatus.COMPENSATED
    assert view.step("transfer").finished_at == before


# -- no step of an unwound saga is left running ---------------------------------------------


def _crashed_in_a_step(coord: Coordinator, name: str, undo: object) -> str:
    """A context-manager saga whose process died while its second step ran."""
    steps.FAILURES["c"] = 1
    with pytest.raises(Crash), coord.saga(name) as s:  # noqa: PT012 - the block is the saga
        s.step(steps.debit, "alice", 10, compensate=steps.refund)
        s.step(steps.crash, "c", compensate=undo)
    expire_lease(coord, s.id)
    return s.id


def test_recovery_leaves_no_step_running_when_the_one_in_flight_had_no_compensation(
    any_coord: Coordinator, db_url: str
) -> None:
    saga_id = _crashed_in_a_step(any_coord, "records-in-flight", None)
    assert any_coord.get(saga_id).step("crash").status is StepStatus.RUNNING
    report = any_coord.recover()
    assert [o.status for o in report.outcomes] == [SagaStatus.COMPENSATED]
    view = any_coord.get(saga_id)
    assert [(s.name, s.status) for s in view.steps] == [
        ("debit", StepStatus.COMPENSATED),
        ("crash", StepStatus.COMPENSATED),  # nothing to undo: it has no compensation
    ]
    assert view.step("crash").compensation_attempt == 0  # no compensation ran
    assert view.step("crash").finished_at is None  # its action never reported back
    done = [e for e in any_coord.history(saga_id) if e.kind == "compensation_done"]
    assert [(e.step, (e.detail or {}).get("reason")) for e in done] == [
        ("debit", None),
        ("crash", "nothing to undo: no compensation"),
    ]
    assert_history_replays(any_coord, saga_id)
    shown = CliRunner().invoke(app, ["--db", db_url, "show", saga_id])
    assert shown.exit_code == 0, shown.output
    row = next(line for line in shown.stdout.splitlines() if line.split()[1:2] == ["crash"])
    assert "compensated" in row
    assert "nothing to undo: no compensation" in row
    assert "IN DOUBT" not in shown.stdout


def test_recovery_compensates_the_step_in_flight_that_has_a_compensation(
    any_coord: Coordinator,
) -> None:
    saga_id = _crashed_in_a_step(any_coord, "records-in-flight-undo", steps.unboom)
    any_coord.recover()
    view = any_coord.get(saga_id)
    assert [s.status for s in view.steps] == [StepStatus.COMPENSATED, StepStatus.COMPENSATED]
    assert view.step("crash").compensation_attempt == 1
    assert view.step("crash").finished_at is None  # never returned: no duration to show
    assert ("unboom", None, "c") in steps.CALLS  # ctx.result None: it never returned


def test_a_declarative_saga_compensated_after_a_crash_leaves_no_step_running(
    any_coord: Coordinator,
) -> None:
    saga = Saga("records-in-flight-declared", on_crash="compensate")

    @saga.step()
    def reserve(ctx: StepContext) -> str:
        return "R-1"

    @reserve.compensation
    def release(ctx: StepContext) -> None:
        pass

    @saga.step()
    def notify(ctx: StepContext) -> None:  # nothing to undo: no compensation
        raise Crash("the process dies while notifying")

    with pytest.raises(Crash):
        any_coord.run(saga, key="k")
    saga_id = any_coord.list(name=saga.name)[0].id
    expire_lease(any_coord, saga_id)
    assert [o.status for o in any_coord.recover().outcomes] == [SagaStatus.COMPENSATED]
    statuses = {s.name: s.status for s in any_coord.get(saga_id).steps}
    assert statuses == {"reserve": StepStatus.COMPENSATED, "notify": StepStatus.COMPENSATED}
    assert_history_replays(any_coord, saga_id)
