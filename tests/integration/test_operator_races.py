"""Operator verbs racing the saga's owner between their read and their claim.

An operator's verb reads the saga, decides (no pivot has acted, the status
fits), then claims it. The owner may move on in between: pass its pivot and
fail (the saga is ``failed`` and claimable), or pass its pivot and die. Each
test here pauses the operator exactly there, by running the owner's next moves
from inside the operator's claim call, before the claim's statement is sent,
and checks that the claim itself refuses: the guard is checked in the write
that raises the epoch, never on the earlier read.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from saga import (
    Coordinator,
    OperationRefusedError,
    RetryPolicy,
    Saga,
    SagaFailed,
    SagaStatus,
    StepContext,
    StepStatus,
)
from saga._internal import definition
from saga._internal.ports import Event
from tests.aio.facade import AsyncFacade
from tests.integration.steps import Crash
from tests.integration.support import wait_until_expired

ONCE = RetryPolicy(max_attempts=1)


class Gates:
    """Where the owner's steps wait, and what they did."""

    def __init__(self) -> None:
        self.reserve_may_end = threading.Event()
        self.in_reserve = threading.Event()
        self.in_notify = threading.Event()
        self.notify_may_end = threading.Event()
        self.undone: list[str] = []
        self.die_in_reserve = False  # the owner's process dies when reserve is let go


def shop(name: str, gates: Gates, notify_fails: bool) -> Saga:
    """reserve (undone by release), the pivot ship, then notify (after the pivot)."""
    saga = Saga(name)

    @saga.step()
    def reserve(ctx: StepContext) -> str:
        gates.in_reserve.set()
        assert gates.reserve_may_end.wait(60)
        if gates.die_in_reserve and ctx.attempt == 1:
            raise Crash("the owner's process died in reserve")
        return "r"

    @reserve.compensation
    def release(ctx: StepContext) -> None:
        gates.undone.append("reserve")

    @saga.step(pivot=True)
    def ship(ctx: StepContext) -> str:
        return "s"

    @saga.step(retry=ONCE if notify_fails else RetryPolicy(max_attempts=3))
    def notify(ctx: StepContext) -> str:
        gates.in_notify.set()
        assert gates.notify_may_end.wait(60)
        if notify_fails:
            raise RuntimeError("mail server said no")
        return "n"

    return saga


@pytest.fixture(params=["sync", "async"])
def operator(request: pytest.FixtureRequest, db_url: str) -> Iterator[Coordinator]:
    """The operator's own coordinator (another process), sync or async."""
    if request.param == "sync":
        made = Coordinator(db_url, lease_ttl=5.0)
    else:
        made = AsyncFacade(db_url, lease_ttl=5.0)  # type: ignore[assignment]
    try:
        yield made
    finally:
        made.close()


def before(coord: Coordinator, method: str, meanwhile: Callable[[], None]) -> None:
    """Run ``meanwhile`` once, just before ``coord``'s next call of the store's ``method``
    (its first write after the read the verb decided on)."""
    store = coord.store
    real = getattr(store, method)

    def paused(*args: Any, **kwargs: Any) -> Any:
        setattr(store, method, real)
        meanwhile()
        return real(*args, **kwargs)

    setattr(store, method, paused)


def before_claim(coord: Coordinator, meanwhile: Callable[[], None]) -> None:
    before(coord, "claim", meanwhile)


@dataclasses.dataclass
class Owner:
    """The saga's owner, running it in a thread of its own: another process, in effect."""

    coord: Coordinator
    thread: threading.Thread
    errors: list[BaseException]


@contextlib.contextmanager
def owner_in_reserve(db_url: str, saga: Saga, gates: Gates, lease_ttl: float) -> Iterator[Owner]:
    """An owner started on ``saga``, held inside its first step until the test lets go."""
    coord = Coordinator(db_url, lease_ttl=lease_ttl)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            coord.run(saga, key="order-1")
        except BaseException as error:  # noqa: BLE001 - reported to the test
            errors.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        assert gates.in_reserve.wait(60)
        yield Owner(coord, thread, errors)
    finally:
        gates.reserve_may_end.set()
        gates.notify_may_end.set()
        thread.join(60)
        coord.close()


def only_saga(coord: Coordinator) -> str:
    views = coord.list()
    assert len(views) == 1
    return views[0].id


def test_compensate_racing_the_owner_past_its_pivot_into_failed_is_refused(
    db_url: str, operator: Coordinator
) -> None:
    gates = Gates()
    saga = shop("race-compensate", gates, notify_fails=True)
    with owner_in_reserve(db_url, saga, gates, lease_ttl=5.0) as owner:
        saga_id = only_saga(operator)
        operator.register(saga)

        def owner_passes_pivot_and_fails() -> None:
            gates.reserve_may_end.set()
            gates.notify_may_end.set()
            owner.thread.join(60)

        before_claim(operator, owner_passes_pivot_and_fails)
        with pytest.raises(OperationRefusedError, match="passed its pivot"):
            operator.compensate(saga_id)
        assert isinstance(owner.errors[0], SagaFailed)
        view = operator.get(saga_id)
        assert view.status is SagaStatus.FAILED
        assert view.step("reserve").status is StepStatus.SUCCEEDED
        assert gates.undone == []
        kinds = [event.kind for event in operator.history(saga_id)]
        assert "operator_action" not in kinds  # the refused claim wrote nothing


def test_cancel_racing_an_owner_that_dies_just_after_its_pivot_is_refused(
    db_url: str, operator: Coordinator
) -> None:
    gates = Gates()
    saga = shop("race-cancel", gates, notify_fails=False)
    with owner_in_reserve(db_url, saga, gates, lease_ttl=0.5) as owner:
        saga_id = only_saga(operator)
        operator.register(saga)

        def owner_passes_pivot_and_dies() -> None:
            gates.reserve_may_end.set()
            assert gates.in_notify.wait(60)  # ship's success is durable by now
            owner.coord.heartbeat.stop()  # frozen, as a dead process: its lease runs out
            wait_until_expired(operator, saga_id)

        before(operator, "request_cancel", owner_passes_pivot_and_dies)
        with pytest.raises(OperationRefusedError, match="passed its pivot"):
            operator.cancel(saga_id)
        assert gates.undone == []
        view = operator.get(saga_id)
        assert view.status is SagaStatus.RUNNING
        assert view.step("ship").status is StepStatus.SUCCEEDED
        gates.notify_may_end.set()  # the frozen owner wakes, or recovery finishes it
        owner.thread.join(60)
        operator.recover()
        assert operator.get(saga_id).status is SagaStatus.COMPLETED
        assert gates.undone == []


def test_resume_of_a_saga_claimed_by_another_since_it_was_read_is_refused(
    db_url: str, operator: Coordinator
) -> None:
    """``resume`` decided on epoch n; a recoverer took the saga meanwhile (epoch n+1) and
    died too: the operator's claim refuses instead of acting on a stale decision."""
    gates = Gates()
    saga = shop("race-resume", gates, notify_fails=False)
    with (
        owner_in_reserve(db_url, saga, gates, lease_ttl=0.5) as owner,
        Coordinator(db_url, lease_ttl=0.5) as recoverer,
    ):
        owner.coord.heartbeat.stop()
        saga_id = only_saga(operator)
        operator.register(saga)
        wait_until_expired(operator, saga_id)

        def another_claims_it() -> None:
            claim = Event("lease_claimed", detail={"why": "test"})
            recoverer.store.claim(saga_id, recoverer.owner, 0.5, claim)
            wait_until_expired(operator, saga_id)

        before_claim(operator, another_claims_it)
        with pytest.raises(OperationRefusedError, match="claimed it"):
            operator.resume(saga_id)


def test_cancel_of_a_stuck_saga_without_its_definition_keeps_the_request(
    db_url: str, operator: Coordinator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """This process cannot unwind it (no definition), but the request is recorded, and a
    recoverer that has the definition unwinds the saga instead of finishing it."""
    gates = Gates()
    gates.die_in_reserve = True
    saga = shop("cancel-without-app", gates, notify_fails=False)
    # As in an operator's shell without --app: no module defined this saga here.
    monkeypatch.delitem(definition._catalog, (saga.name, saga.version))
    with owner_in_reserve(db_url, saga, gates, lease_ttl=0.5) as owner:
        gates.reserve_may_end.set()
        owner.thread.join(60)  # died in reserve
        saga_id = only_saga(operator)
        wait_until_expired(operator, saga_id)
        view = operator.cancel(saga_id)  # no definition registered in the operator
        assert view.cancel_requested is True
        assert view.status is SagaStatus.RUNNING
    with Coordinator(db_url, lease_ttl=5.0) as recoverer:
        recoverer.register(saga)
        assert recoverer.recover().outcomes[0].status is SagaStatus.CANCELLED


def test_a_rerun_whose_saga_failed_past_its_pivot_since_it_was_read_raises_its_failure(
    db_url: str, operator: Coordinator
) -> None:
    """A caller re-running the key reads the saga ``running``; before its claim the owner
    passes the pivot and fails. The claim must not take the ``failed`` saga and drive it
    (it used to, and tried the failed step again); the rerun raises the recorded failure."""
    gates = Gates()
    saga = shop("race-rerun", gates, notify_fails=True)
    with owner_in_reserve(db_url, saga, gates, lease_ttl=5.0) as owner:
        operator.register(saga)

        def owner_passes_pivot_and_fails() -> None:
            gates.reserve_may_end.set()
            gates.notify_may_end.set()
            owner.thread.join(60)
            wait_until_expired(operator, only_saga(operator))

        before_claim(operator, owner_passes_pivot_and_fails)
        with pytest.raises(SagaFailed) as failure:
            operator.run(saga, key="order-1")  # the owner's input: None, as in owner_in_reserve
        assert failure.value.status is SagaStatus.FAILED
        view = operator.get(only_saga(operator))
        assert view.status is SagaStatus.FAILED
        assert [e.kind for e in operator.history(view.id)].count("lease_claimed") == 0
        assert gates.undone == []
