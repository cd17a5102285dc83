"""Listeners: told every lifecycle event after its record, never changing an outcome."""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from saga import (
    Coordinator,
    RetryPolicy,
    Saga,
    SagaEvent,
    SagaFailed,
    SagaStatus,
    StepContext,
)
from saga._internal.ports import Event
from tests.integration import steps
from tests.integration.conftest import MakeCoordinator
from tests.integration.steps import Crash
from tests.integration.support import expire_lease, sql_store

FAST_RETRY = RetryPolicy(max_attempts=2, initial_delay=0.01, jitter=0)


class Recorder:
    """Keeps what it is told; ``inline`` so that it is called in the saga's thread."""

    inline = True

    def __init__(self) -> None:
        self.events: list[SagaEvent] = []

    def __call__(self, event: SagaEvent) -> None:
        self.events.append(event)

    def kinds(self, saga_id: str | None = None) -> list[tuple[str, str | None, int | None]]:
        return [
            (e.kind, e.step, e.attempt)
            for e in self.events
            if saga_id is None or e.saga_id == saga_id
        ]


def _order_saga(name: str, fail_ship: bool = True) -> Saga:
    """reserve -> charge (fails once, then succeeds) -> ship (always fails, if asked)."""
    saga = Saga(name)
    charged: list[int] = []

    @saga.step(retry=FAST_RETRY)
    def reserve(ctx: StepContext) -> str:
        return "r"

    @reserve.compensation
    def release(ctx: StepContext) -> None:
        pass

    @saga.step(retry=FAST_RETRY)
    def charge(ctx: StepContext) -> str:
        charged.append(ctx.attempt)
        if ctx.attempt == 1:
            raise ConnectionError("card network reset")
        return "c"

    @charge.compensation
    def refund(ctx: StepContext) -> None:
        pass

    @saga.step(retry=RetryPolicy(max_attempts=1))
    def ship(ctx: StepContext) -> str:
        if fail_ship:
            raise ValueError("no courier")
        return "s"

    return saga


def test_a_failing_saga_tells_its_whole_story_in_order(make_coord: MakeCoordinator) -> None:
    told = Recorder()
    coord = make_coord(listeners=[told])
    with pytest.raises(SagaFailed) as failed:
        coord.run(_order_saga("listen-story"), key="o-1")
    saga_id = failed.value.saga_id
    assert told.kinds() == [
        ("saga_started", None, None),
        ("step_started", "reserve", 1),
        ("step_succeeded", "reserve", 1),
        ("step_started", "charge", 1),
        ("retry_scheduled", "charge", 1),
        ("attempt_failed", "charge", 1),
        ("step_started", "charge", 2),
        ("step_succeeded", "charge", 2),
        ("step_started", "ship", 1),
        ("step_failed", "ship", 1),
        ("saga_compensating", None, None),
        ("compensation_started", "charge", 1),
        ("compensation_done", "charge", 1),
        ("compensation_started", "reserve", 1),
        ("compensation_done", "reserve", 1),
        ("saga_compensated", None, None),
    ]
    every = told.events
    assert {(e.saga_id, e.saga_name, e.key) for e in every} == {(saga_id, "listen-story", "o-1")}
    assert all(e.short_id == saga_id[:8] and e.epoch == 1 for e in every)
    # Durable events are exactly the history, in its order; the retry is a decision.
    durable = [(e.kind, e.step, e.attempt) for e in every if e.durable]
    history = [(e.kind, e.step, e.attempt) for e in coord.history(saga_id)]
    assert durable == history
    by_kind = {(e.kind, e.step): e for e in every}
    retry = by_kind[("retry_scheduled", "charge")]
    assert not retry.durable
    assert retry.delay == pytest.approx(0.01)
    assert (retry.error_type, retry.error_message) == ("ConnectionError", "card network reset")
    shipped = by_kind[("step_failed", "ship")]
    assert (shipped.error_type, shipped.error_message) == ("ValueError", "no courier")
    assert shipped.status is SagaStatus.COMPENSATING  # recorded in the commit that turns it
    # Durations, measured by this process, for what it saw begin.
    for kind, step in [("step_succeeded", "reserve"), ("compensation_done", "charge")]:
        duration = by_kind[(kind, step)].duration
        assert duration is not None
        assert duration >= 0
    assert by_kind[("saga_compensated", None)].status is SagaStatus.COMPENSATED
    total = by_kind[("saga_compensated", None)].duration
    reserved = by_kind[("step_succeeded", "reserve")].duration
    assert total is not None
    assert reserved is not None
    assert total >= reserved


def test_an_inline_listener_is_told_only_once_the_record_is_committed(
    make_coord: MakeCoordinator,
) -> None:
    coord = make_coord()
    reader = make_coord()  # another connection: sees only what was committed
    missing: list[tuple[str, str | None]] = []

    def check(event: SagaEvent) -> None:
        if not event.durable:
            return
        stored = [(e.kind, e.step, e.attempt) for e in reader.history(event.saga_id)]
        if (event.kind, event.step, event.attempt) not in stored:
            missing.append((event.kind, event.step))

    coord.add_listener(check, inline=True)
    with pytest.raises(SagaFailed):
        coord.run(_order_saga("listen-committed"))
    coord.run(_order_saga("listen-committed-ok", fail_ship=False))
    assert missing == []


def test_a_step_whose_record_was_lost_is_never_told_succeeded(
    make_coord: MakeCoordinator,
) -> None:
    told = Recorder()
    owner = make_coord(listeners=[told], lease_ttl=600)  # no renewal during the test
    rival = make_coord()
    saga = Saga("listen-lost")

    @saga.step()
    def reserve(ctx: StepContext) -> str:
        # Another process takes the saga while this step runs: our success is refused.
        expire_lease(rival, ctx.saga_id)
        sql_store(rival).claim(ctx.saga_id, "rival", 600, Event("lease_claimed"))
        return "r"

    with pytest.raises(Exception, match="lease"):
        owner.run(saga)
    kinds = [kind for kind, _, _ in told.kinds()]
    assert kinds == ["saga_started", "step_started", "lease_lost"]
    assert told.events[-1].durable is False


def test_a_raising_listener_is_logged_once_and_counted(
    make_coord: MakeCoordinator, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(event: SagaEvent) -> None:
        raise RuntimeError("listener bug")

    coord = make_coord()
    coord.add_listener(broken, inline=True)
    with caplog.at_level(logging.ERROR, logger="saga.listeners"):
        view = coord.run(_order_saga("listen-raising", fail_ship=False))
    assert view.status is SagaStatus.COMPLETED
    assert coord.listeners.errors == len(coord.history(view.id)) + 1  # + the retry
    assert [r.message for r in caplog.records].count(
        f"listener {broken!r}: event raised (later errors of its event are only counted)"
    ) == 1


def test_a_hanging_listener_never_holds_a_saga_and_drops_past_its_queue(
    make_coord: MakeCoordinator,
) -> None:
    release = threading.Event()
    heard: list[str] = []

    def hanging(event: SagaEvent) -> None:
        heard.append(event.kind)
        release.wait()  # stuck, as a listener calling a dead server would be

    coord = make_coord()
    coord.add_listener(hanging, queue_size=3)  # on its own thread, three events queued at most
    view = coord.run(_order_saga("listen-hanging", fail_ship=False))
    assert view.status is SagaStatus.COMPLETED  # the saga never waited for it
    total = len(coord.history(view.id)) + 1
    assert coord.listeners.dropped == total - 1 - 3  # one being delivered, three queued
    release.set()
    assert coord.listeners.flush(timeout=30)
    assert len(heard) == 4


def test_claims_and_operator_actions_are_told(make_coord: MakeCoordinator) -> None:
    saga = Saga("listen-claims")

    @saga.step()
    def one(ctx: StepContext) -> str:
        return "1"

    @one.compensation
    def undo_one(ctx: StepContext) -> None:
        pass

    @saga.step()
    def two(ctx: StepContext) -> str:
        raise Crash("the process dies inside 'two'")

    dead = make_coord(lease_ttl=600)
    with pytest.raises(Crash):
        dead.run(saga)
    saga_id = dead.list(limit=1)[0].id
    told = Recorder()
    operator = make_coord(listeners=[told])
    expire_lease(operator, saga_id)
    operator.compensate(saga_id)
    kinds = told.kinds(saga_id)
    assert kinds[0] == ("operator_action", None, None)
    assert kinds[-1] == ("saga_compensated", None, None)
    assert told.events[0].epoch == 2  # told with the epoch of the claim
    durable = [(e.kind, e.step, e.attempt) for e in told.events]
    history = [(e.kind, e.step, e.attempt) for e in operator.history(saga_id)]
    assert history[-len(durable) :] == durable


def test_recovery_tells_its_claim(make_coord: MakeCoordinator) -> None:
    saga = Saga("listen-recover")
    crashed: list[int] = []

    @saga.step()
    def only(ctx: StepContext) -> str:
        if not crashed:
            crashed.append(1)
            raise Crash("dies")
        return "ok"

    dead = make_coord(lease_ttl=600)
    with pytest.raises(Crash):
        dead.run(saga)
    saga_id = dead.list(limit=1)[0].id
    told = Recorder()
    recoverer = make_coord(listeners=[told])
    expire_lease(recoverer, saga_id)
    assert [o.status for o in recoverer.recover().outcomes] == [SagaStatus.COMPLETED]
    assert told.kinds(saga_id) == [
        ("lease_claimed", None, None),
        ("step_started", "only", 2),
        ("step_succeeded", "only", 2),
        ("saga_completed", None, None),
    ]
    claim = told.events[0]
    assert claim.detail is not None
    assert claim.detail["owner"] == recoverer.owner
    # When its dead owner last wrote (its last commit, not a lease renewal): ~ its death.
    # Its last commit's time: no later than that commit's events (SQLite stamps each
    # statement, PostgreSQL each transaction), and before the claim. Order, not speed.
    history = recoverer.history(saga_id)
    claimed_at = next(n for n, e in enumerate(history) if e.kind == "lease_claimed")
    assert 0 < claim.detail["last_written_at"] <= history[claimed_at - 1].at
    assert claim.detail["last_written_at"] < history[claimed_at].at
    assert told.events[-1].duration is not None  # from the claim, in this process


TRACE: contextvars.ContextVar[str | None] = contextvars.ContextVar("trace", default=None)


class Scoping:
    """A listener whose ``step_scope`` makes a value current while a step runs."""

    inline = True

    def __call__(self, event: SagaEvent) -> None:
        pass

    @contextlib.contextmanager
    def step_scope(self, context: StepContext) -> Iterator[None]:
        token = TRACE.set(f"{context.step}#{context.attempt}")
        try:
            yield
        finally:
            TRACE.reset(token)


def test_step_scope_is_current_inside_every_step_and_compensation(
    make_coord: MakeCoordinator,
) -> None:
    seen: list[Any] = []
    saga = Saga("listen-scope")

    @saga.step()
    def plain(ctx: StepContext) -> None:
        seen.append(TRACE.get())

    @saga.step(timeout=30)  # runs in a thread of its own
    def timed(ctx: StepContext) -> None:
        seen.append(TRACE.get())

    @timed.compensation
    def untimed(ctx: StepContext) -> None:
        seen.append(TRACE.get())

    @saga.step()
    def fails(ctx: StepContext) -> None:
        raise ValueError("stop")

    coord: Coordinator = make_coord(listeners=[Scoping()])
    with pytest.raises(SagaFailed):
        coord.run(saga)
    assert seen == ["plain#1", "timed#1", "timed#1"]
    assert TRACE.get() is None


def test_a_context_manager_saga_tells_its_story_and_its_reentry(
    make_coord: MakeCoordinator,
) -> None:
    told = Recorder()
    first = make_coord(listeners=[told], lease_ttl=600)
    with pytest.raises(Crash), first.saga("listen-cm", key="t-1") as s:  # noqa: PT012
        s.step(steps.debit, "alice", 10, compensate=steps.refund)
        raise Crash("the process dies between steps")
    assert told.kinds(s.id) == [
        ("saga_started", None, None),
        ("step_started", "debit", 1),
        ("step_succeeded", "debit", 1),
    ]
    again = Recorder()
    second = make_coord(listeners=[again])
    expire_lease(second, s.id)
    with second.saga("listen-cm", key="t-1") as resumed:
        resumed.step(steps.debit, "alice", 10, compensate=steps.refund)  # replayed
        resumed.step(steps.credit, "bob", 10, compensate=steps.uncredit)
    kinds = again.kinds(s.id)
    assert kinds[0] == ("lease_claimed", None, None)
    assert again.events[0].detail == {"why": "re-entered"}
    assert kinds[1:] == [
        ("step_started", "credit", 1),
        ("step_succeeded", "credit", 1),
        ("saga_completed", None, None),
    ]
