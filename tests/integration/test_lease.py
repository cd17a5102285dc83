"""Leases: owner, epoch and expiry on the database clock, the heartbeat, and fencing."""

from __future__ import annotations

import contextlib
import time
from typing import Any

import pytest

from saga import (
    LeaseLostError,
    RecoveryReport,
    Saga,
    SagaStatus,
    SagaView,
    StepContext,
    StepStatus,
)
from saga._internal.ports import Event
from tests.integration import steps
from tests.integration.conftest import MakeCoordinator
from tests.integration.support import expire_lease, kinds

NO_RENEWAL = 600.0
"""The lease of a holder whose saga a test takes over: its heartbeat (every third of it)
must not renew the lease between the test's expiry and the rival's claim."""


def test_a_running_saga_shows_its_owner_epoch_and_lease(make_coord: MakeCoordinator) -> None:
    coord, observer = make_coord(lease_ttl=5.0), make_coord()
    seen: list[tuple[SagaView, float]] = []
    saga = Saga("lease-visible")

    @saga.step()
    def look(ctx: StepContext) -> None:
        seen.append((observer.get(ctx.saga_id), observer.store.now()))

    view = coord.run(saga)
    running, db_now = seen[0]
    assert running.status is SagaStatus.RUNNING
    assert running.owner == coord.owner
    assert running.epoch == 1
    assert running.lease_expires_at is not None
    # Set from the database clock: ahead of its "now", by at most the lease's length.
    assert db_now < running.lease_expires_at <= db_now + 5.0
    assert view.owner is None  # a finished saga holds no lease
    assert coord.get(view.id).owner is None


def test_the_heartbeat_keeps_a_long_step_leased(make_coord: MakeCoordinator) -> None:
    # The lease is long enough that a busy machine's scheduling pauses do not starve the
    # heartbeat (renewed every second); the step outlives the lease it started with.
    coord = make_coord(lease_ttl=3.0)
    rival = make_coord(lease_ttl=3.0)
    reports: list[RecoveryReport] = []
    saga = Saga("lease-heartbeat")

    @saga.step()
    def long_step(ctx: StepContext) -> str:
        if ctx.attempt == 1:
            first_expiry = rival.get(ctx.saga_id).lease_expires_at
            assert first_expiry is not None
            while rival.store.now() <= first_expiry + 0.5:  # past the lease it began with
                time.sleep(0.05)
            reports.append(rival.recover())
        return "done"

    @saga.step()
    def after(ctx: StepContext) -> str:
        return "after"

    view = coord.run(saga)
    assert reports[0].outcomes == []  # the rival found nothing to claim
    assert view.status is SagaStatus.COMPLETED
    assert view.epoch == 1
    assert view.step("long_step").attempt == 1
    assert "lease_claimed" not in kinds(coord, view.id)


def test_after_a_takeover_the_old_executor_writes_nothing(make_coord: MakeCoordinator) -> None:
    old = make_coord(lease_ttl=NO_RENEWAL)  # its heartbeat must not undo the expiry
    new = make_coord(lease_ttl=30.0)
    ran: list[str] = []
    ids: list[str] = []
    saga = Saga("lease-fenced")

    @saga.step()
    def slow(ctx: StepContext) -> str:
        ids.append(ctx.saga_id)
        # This process stalls past its lease; another one takes the saga over.
        expire_lease(new, ctx.saga_id)
        new.store.claim(ctx.saga_id, new.owner, 30.0, Event("lease_claimed"))
        ran.append("slow")
        return "late result"

    @slow.compensation
    def undo_slow(ctx: StepContext) -> None:
        ran.append("undo_slow")

    @saga.step()
    def next_step(ctx: StepContext) -> None:
        ran.append("next_step")

    with pytest.raises(LeaseLostError) as raised:
        old.run(saga)
    assert raised.value.epoch == 1
    assert ran == ["slow"]  # nothing ran after the fenced write failed
    view = new.get(ids[0])
    assert view.epoch == 2
    assert view.owner == new.owner
    assert view.status is SagaStatus.RUNNING
    assert [(s.name, s.status, s.result) for s in view.steps] == [
        ("slow", StepStatus.RUNNING, None)  # the late result was not recorded
    ]
    history = new.history(ids[0])
    assert history[-1].kind == "lease_claimed"
    assert history[-1].epoch == 2
    assert all(event.epoch == 1 for event in history[:-1])


def test_a_context_manager_saga_stops_after_a_takeover(make_coord: MakeCoordinator) -> None:
    old = make_coord(lease_ttl=NO_RENEWAL)  # its heartbeat must not undo the expiry
    new = make_coord(lease_ttl=30.0)
    with pytest.raises(LeaseLostError), old.saga("lease-fenced-cm") as s:  # noqa: PT012 - the block is the saga
        s.step(steps.debit, "alice", 5, compensate=steps.refund)
        expire_lease(new, s.id)
        new.store.claim(s.id, new.owner, 30.0, Event("lease_claimed"))
        s.step(steps.credit, "bob", 5, compensate=steps.uncredit)
    assert [c[0] for c in steps.CALLS] == ["debit"]  # not credited, not refunded
    view = new.get(s.id)
    assert view.status is SagaStatus.RUNNING
    assert [(st.name, st.status) for st in view.steps] == [("debit", StepStatus.SUCCEEDED)]
    assert view.epoch == 2


def test_a_live_lease_cannot_be_claimed_even_by_its_own_coordinator(
    make_coord: MakeCoordinator,
) -> None:
    """Two threads of one coordinator must never execute the same saga at once."""
    coord = make_coord(lease_ttl=30.0)
    outcomes: list[Any] = []
    saga = Saga("lease-own")

    @saga.step()
    def one(ctx: StepContext) -> int:
        # A second call for the same key arrives (same coordinator) while this step runs.
        try:
            outcomes.append(coord.run(saga, key="k"))
        except Exception as error:
            outcomes.append(error)
        return 1

    @saga.step()
    def two(ctx: StepContext) -> int:
        return 2

    view = coord.run(saga, key="k")
    assert view.status is SagaStatus.COMPLETED
    assert view.epoch == 1
    assert len(outcomes) == 1
    assert type(outcomes[0]).__name__ == "SagaBusyError"


def test_one_renewal_extends_every_held_lease_and_reports_lost_and_stopped(
    make_coord: MakeCoordinator,
) -> None:
    # More sagas than one statement renews (500), as a busy process holds them.
    coord, rival = make_coord(lease_ttl=30.0), make_coord(lease_ttl=30.0)
    with contextlib.ExitStack() as stack:
        scopes = [stack.enter_context(coord.saga("held", key=f"h-{n}")) for n in range(520)]
        for scope in scopes:
            scope.step(steps.credit, "acct", 1)
        ids = [scope.id for scope in scopes]
        # Under test is this renewal, not the coordinator's own heartbeat: left running, it
        # renews every held lease once ttl / 3 has passed, later than the clock read below
        # on a slow machine. Stopped here, it is not started again: no saga is entered anew.
        coord.heartbeat.stop()
        taken, cancelled = ids[7], ids[511]
        expire_lease(rival, taken)
        rival.store.claim(taken, rival.owner, 30.0, Event("lease_claimed"))
        rival.store.request_cancel(cancelled, Event("cancel_requested"))
        for saga_id in ids:
            expire_lease(rival, saga_id)  # so that only a renewal can make them live again

        renewal = coord.store.renew_many({saga_id: 1 for saga_id in ids}, 30.0)

        assert renewal.lost == {taken}
        assert renewal.stop == {cancelled}
        now = coord.store.now()
        leases = {saga_id: coord.get(saga_id).lease_expires_at or 0.0 for saga_id in ids}
        assert all(now < leases[i] <= now + 30.0 for i in ids if i != taken)
        assert rival.get(taken).epoch == 2
        with pytest.raises(LeaseLostError):  # the taken saga's old owner is fenced out
            stack.close()


def test_an_event_fenced_by_a_superseded_epoch_is_not_written(make_coord: MakeCoordinator) -> None:
    old, new = make_coord(lease_ttl=NO_RENEWAL), make_coord(lease_ttl=30.0)
    written: list[bool] = []
    with pytest.raises(LeaseLostError), old.saga("lease-fenced-event") as s:  # noqa: PT012 - the block is the saga
        s.step(steps.debit, "alice", 5, compensate=steps.refund)
        expire_lease(new, s.id)
        new.store.claim(s.id, new.owner, 30.0, Event("lease_claimed"))
        written.append(old.store.record_fenced_event(s.id, 1, Event("recovery_refused")))
        written.append(new.store.record_fenced_event(s.id, 2, Event("recovery_refused")))
        s.step(steps.credit, "bob", 5, compensate=steps.uncredit)
    assert written == [False, True]
    history = new.history(s.id)
    assert [(e.kind, e.epoch) for e in history if e.kind != "step_started"][-2:] == [
        ("lease_claimed", 2),
        ("recovery_refused", 2),
    ]
    assert [e.epoch for e in history if e.kind == "recovery_refused"] == [2]
    unknown = "00000000-0000-0000-0000-000000000000"
    assert new.store.record_fenced_event(unknown, 1, Event("recovery_refused")) is False
    assert new.store.events(unknown) == []
