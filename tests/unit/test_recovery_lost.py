"""A recoverer that loses its claim writes nothing more for that saga, and says it lost it.

On ``memory://``, with a clock the test moves: recoverer A claims a crashed
saga and, while it is inside the interrupted step, stalls past its lease;
recoverer B claims the saga meanwhile. Whatever A's path (``recover()``,
``AsyncCoordinator.recover()``, ``saga recover``'s, ``saga worker``'s), it
writes no event and no release, and reports the saga lost to another process.
The real-process version (SIGSTOP) is in tests/faults/test_zombies.py.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from saga.adapters.memory import InMemorySagaStore

from saga import AsyncCoordinator, Coordinator, RetryPolicy, Saga, StepContext, admin
from saga._internal.ports import EventRecord, Runnable
from saga._internal.recovery import LOST

TTL = 5.0


class PowerCut(BaseException):
    """Not an ``Exception``: saga records nothing more, as if the process died here."""


class Clock:
    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> InMemorySagaStore:
    memory = InMemorySagaStore()
    monkeypatch.setattr(memory, "now", Clock())
    return memory


@pytest.fixture
def rival(store: InMemorySagaStore) -> Iterator[Coordinator]:
    coordinator = Coordinator(store=store, lease_ttl=TTL)
    yield coordinator
    coordinator.close()


def _stall(store: InMemorySagaStore) -> None:
    """This process stalls past its lease: only the clock moves."""
    clock = store.now
    assert isinstance(clock, Clock)
    clock.offset += TTL + 1


def _crashed(store: InMemorySagaStore, takeover: Callable[[str], None]) -> tuple[Saga, str]:
    """A saga whose owner died in ``charge``; re-run by a recoverer, ``charge`` calls
    ``takeover(saga_id)`` before it returns."""
    saga = Saga(f"lost-{uuid.uuid4().hex[:8]}")

    @saga.step(retry=RetryPolicy(initial_delay=0.0, jitter=0.0))
    def charge(ctx: StepContext) -> str:
        if ctx.attempt == 1:
            raise PowerCut
        takeover(ctx.saga_id)
        return "charged"

    @saga.step()
    def ship(ctx: StepContext) -> str:
        return "shipped"

    with Coordinator(store=store, lease_ttl=TTL) as owner, pytest.raises(PowerCut):
        owner.run(saga)
    (saga_id,) = [view.id for view in owner.list()]
    _stall(store)
    return saga, saga_id


def _taken_by(store: InMemorySagaStore, rival: Coordinator) -> Callable[[str], None]:
    def takeover(saga_id: str) -> None:
        if rival.owner not in {e.detail.get("owner") for e in store.events(saga_id) if e.detail}:
            _stall(store)
            assert store.claim_expired(rival.owner, TTL, 1) == [saga_id]

    return takeover


def _after_takeover(
    store: InMemorySagaStore, saga_id: str, rival: Coordinator
) -> list[EventRecord]:
    events = store.events(saga_id)
    claim = max(n for n, e in enumerate(events) if (e.detail or {}).get("owner") == rival.owner)
    return events[claim + 1 :]


def test_recover_reports_a_saga_lost_mid_step_and_writes_nothing(
    store: InMemorySagaStore, rival: Coordinator
) -> None:
    _, saga_id = _crashed(store, _taken_by(store, rival))
    with Coordinator(store=store, lease_ttl=TTL) as recoverer:
        report = recoverer.recover()
    assert _after_takeover(store, saga_id, rival) == []  # no refusal, no release
    [outcome] = report.outcomes
    assert (outcome.saga_id, outcome.lost, outcome.status, outcome.error) == (
        saga_id,
        True,
        None,
        None,
    )
    assert report.lost == [outcome]
    assert report.ok
    assert report.errors == []
    assert rival.get(saga_id).owner == rival.owner


def test_the_async_recoverer_reports_it_lost_too(
    store: InMemorySagaStore, rival: Coordinator
) -> None:
    _, saga_id = _crashed(store, _taken_by(store, rival))

    async def recover() -> Any:
        async with AsyncCoordinator(store=store, lease_ttl=TTL) as recoverer:
            return await recoverer.recover()

    [outcome] = asyncio.run(recover()).outcomes
    assert _after_takeover(store, saga_id, rival) == []
    assert (outcome.saga_id, outcome.lost, outcome.error) == (saga_id, True, None)


def test_a_saga_claimed_by_another_before_it_was_read_is_lost_untouched(
    store: InMemorySagaStore, rival: Coordinator, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[str] = []
    _, saga_id = _crashed(store, ran.append)
    recoverer = Coordinator(store=store, lease_ttl=TTL)
    claim_expired = store.claim_expired

    def claim_then_stall(
        owner: str, lease_ttl: float, limit: int, runnable: Runnable | None = None
    ) -> list[str]:
        claimed = claim_expired(owner, lease_ttl, limit, runnable)
        if claimed and owner == recoverer.owner:  # stalls before reading what it claimed
            _stall(store)
            claim_expired(rival.owner, TTL, 1)
        return claimed

    monkeypatch.setattr(store, "claim_expired", claim_then_stall)
    with recoverer:
        [outcome] = recoverer.recover().outcomes
    assert ran == []  # the step never ran under a claim that was already gone
    assert _after_takeover(store, saga_id, rival) == []
    assert (outcome.saga_id, outcome.lost) == (saga_id, True)


def test_saga_recover_says_lost_and_counts_it_apart(
    store: InMemorySagaStore, rival: Coordinator
) -> None:
    _, saga_id = _crashed(store, _taken_by(store, rival))
    with Coordinator(store=store, lease_ttl=TTL) as recoverer:
        summary = admin.recover(recoverer)
    [item] = summary.items
    assert (item.saga_id, item.result, item.status) == (saga_id, admin.Result.LOST, None)
    assert item.reason is not None
    assert item.reason.startswith(f"{LOST}: ")
    assert summary.ok
    assert summary.as_json()["summary"]["lost"] == 1
    assert _after_takeover(store, saga_id, rival) == []


def test_saga_worker_logs_it_lost_and_counts_it_apart(
    store: InMemorySagaStore, rival: Coordinator
) -> None:
    _, saga_id = _crashed(store, _taken_by(store, rival))
    stop, lines = threading.Event(), []

    def log(line: str) -> None:
        lines.append(line)
        if saga_id in line:  # the saga in hand was handled, however: stop after it
            stop.set()

    with Coordinator(store=store, lease_ttl=TTL) as recoverer:
        stats = admin.run_worker(recoverer, stop, interval=1.0, log=log)  # stopped by log
    assert (stats.lost, stats.recovered, stats.errors) == (1, 0, 0)
    [said] = [line for line in lines if saga_id in line]
    assert said.startswith(f"saga {saga_id} (")
    assert f"): {LOST}: " in said
    assert _after_takeover(store, saga_id, rival) == []


def test_a_refusal_is_recorded_only_under_the_refusing_claim(
    store: InMemorySagaStore, rival: Coordinator, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, saga_id = _crashed(store, lambda _saga_id: None)
    recoverer = Coordinator(store=store, lease_ttl=TTL)

    def refuse_late(record: Any, compensate: bool) -> Iterator[Any]:  # a flow that refuses
        _stall(store)  # stalls, is taken over, then refuses
        assert store.claim_expired(rival.owner, TTL, 1) == [record.id]
        raise ValueError("cannot finish this one here")
        yield  # unreachable: makes this a generator, as flows are

    monkeypatch.setattr(recoverer.engine, "finish", refuse_late)
    with recoverer:
        [outcome] = recoverer.recover().outcomes
    assert _after_takeover(store, saga_id, rival) == []  # neither the refusal nor a release
    assert rival.get(saga_id).owner == rival.owner
    assert (outcome.saga_id, outcome.error, outcome.lost) == (
        saga_id,
        "cannot finish this one here",
        False,
    )
