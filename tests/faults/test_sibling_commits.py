"""A lost commit acknowledgement in a parallel saga, while a sibling commits.

In each test one write's acknowledgement is lost (the write commits, its
caller sees the connection drop), and another commit of the same saga lands
before the caller's retry: a sibling step's, as parallel steps do. The retry
must still recognise its own write: every transactional step's row is in its
table once, every step attempt and every event is recorded once, and the saga
ends as it would have without the fault. PostgreSQL loses the acknowledgement
on the wire (tests/faults/ackproxy.py); SQLite in the store (tests/faults/lossy.py).

The order is made by events, not by timing: a sibling whose commit must land
in between waits for the loss (gate ``lost``, set when the write committed
and its caller has no answer), and the caller hears of the drop only after
another commit of the saga (bounded waits, reported when they run out).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from saga.adapters.sql.store import SqlSagaStore

from saga import AsyncCoordinator, Coordinator, SagaFailed, SagaStatus, SagaView, StorageError
from saga._internal.ports import Commit, Event, EventRecord
from tests.faults import siblings
from tests.faults.ackproxy import proxy_for
from tests.faults.losses import A_COMMIT, A_UNDO, STEP_START, Losses, ProxyLosses, StoreLosses

pytestmark = pytest.mark.faults
TTL = 30.0
"""Long enough that no lease renewal happens during a test (they would not matter anyway)."""


@pytest.fixture
def losses(backend: str, url: str) -> Iterator[Losses]:
    """Lost acknowledgements on the test's backend, around a fresh saga database."""
    siblings.create_tables(url)
    if backend == "sqlite":
        yield StoreLosses(url)
        return
    with proxy_for(url) as proxy:
        yield ProxyLosses(proxy, url)


@pytest.fixture
def pg_losses(pg_url: str) -> Iterator[ProxyLosses]:
    siblings.create_tables(pg_url)
    with proxy_for(pg_url) as proxy:
        yield ProxyLosses(proxy, pg_url)


def _coordinator(store: SqlSagaStore) -> Coordinator:
    coord = Coordinator(store=store, lease_ttl=TTL, trusted_modules=[siblings.__name__])
    coord.register(*siblings.SAGAS)
    return coord


def _the_saga(coord: Coordinator) -> SagaView:
    (view,) = coord.list(limit=2)
    return view


def _no_event_twice(history: list[EventRecord]) -> None:
    seen = Counter((e.kind, e.step, e.attempt) for e in history)
    twice = sorted((k for k, n in seen.items() if n > 1), key=str)
    assert not twice, f"recorded more than once: {twice}"


def _check(
    losses: Losses,
    coord: Coordinator,
    status: SagaStatus,
    attempts: dict[str, int],
    rows: dict[str, int],
) -> None:
    """The loss happened, and the saga ended as it would have without it."""
    losses.check()
    view = _the_saga(coord)
    assert siblings.rows(losses.direct, view.id) == rows, "a step's work applied twice"
    _no_event_twice(coord.history(view.id))
    assert view.status is status, view.error
    assert {step.name: step.attempt for step in view.steps} == attempts


@contextlib.contextmanager
def _no_storage_error() -> Iterator[None]:
    """A commit applied again clashes with its own rows: say so rather than just raise."""
    try:
        yield
    except StorageError as error:
        pytest.fail(f"the retry after the lost acknowledgement wrote its commit again: {error}")


DONE = {"ack_done": 1}
UNWOUND = {"ack_done": 1, "ack_undone": 1}
ONCE = {"a": 1, "b": 1, "c": 1}


# -- declarative sagas, thread driver ------------------------------------------------------------


def test_sequential_transactional_step_lost_ack_is_recognised(losses: Losses) -> None:
    store = losses.store(A_COMMIT, sibling_first=False)  # no sibling: nothing commits between
    with _coordinator(store) as coord:
        coord.run(siblings.SEQUENTIAL, data={}, key="k")
        _check(losses, coord, SagaStatus.COMPLETED, ONCE, DONE)


def test_parallel_transactional_step_lost_ack_while_plain_sibling_commits_is_recognised(
    losses: Losses,
) -> None:
    store = losses.store(A_COMMIT)
    with _coordinator(store) as coord, siblings.gates(lost=losses.caught):
        coord.run(siblings.PARALLEL, data={"wait": {"b": "lost"}}, key="k")
        _check(losses, coord, SagaStatus.COMPLETED, ONCE, DONE)


@pytest.mark.postgres
def test_parallel_transactional_step_lost_ack_while_transactional_sibling_commits_is_recognised(
    pg_losses: ProxyLosses,
) -> None:
    """PostgreSQL only: on SQLite a transactional step's action runs inside a transaction
    that holds the single writer lock, so the sibling cannot wait for the loss in there."""
    store = pg_losses.store(A_COMMIT)
    with _coordinator(store) as coord, siblings.gates(lost=pg_losses.caught):
        coord.run(siblings.PARALLEL_TX, data={"wait": {"b": "lost"}}, key="k")
        _check(pg_losses, coord, SagaStatus.COMPLETED, ONCE, {**DONE, "ack_sibling": 1})


@pytest.mark.postgres
def test_parallel_transactional_step_lost_ack_with_reconnect_held_until_sibling_commits(
    pg_losses: ProxyLosses,
) -> None:
    """The connection drops at once; the retry's new connection waits for the sibling."""
    store = pg_losses.store(A_COMMIT, hold=True)
    with _coordinator(store) as coord, siblings.gates(lost=pg_losses.caught):
        coord.run(siblings.PARALLEL, data={"wait": {"b": "lost"}}, key="k")
        assert pg_losses.proxy.held >= 1, "no reconnection was held"
        _check(pg_losses, coord, SagaStatus.COMPLETED, ONCE, DONE)


@pytest.mark.postgres
def test_parallel_transactional_step_lost_ack_after_sibling_committed_is_recognised(
    pg_losses: ProxyLosses,
) -> None:
    """The control: the sibling's commit lands before the lost one, none between.
    PostgreSQL only, as a's action waits inside its transaction (see above)."""
    store = pg_losses.store(A_COMMIT, sibling_first=False)
    sibling_done = pg_losses.watch(STEP_START)  # b's success, with c's start
    with _coordinator(store) as coord, siblings.gates(sibling=sibling_done):
        coord.run(siblings.PARALLEL, data={"wait": {"a": "sibling"}}, key="k")
        _check(pg_losses, coord, SagaStatus.COMPLETED, ONCE, DONE)


def test_parallel_transactional_step_lost_ack_while_sibling_fails_is_recognised(
    losses: Losses,
) -> None:
    """The sibling's failure turns the saga compensating in between; a is undone once."""
    store = losses.store(A_COMMIT)
    with _coordinator(store) as coord, siblings.gates(lost=losses.caught):
        with pytest.raises(SagaFailed) as failed:
            coord.run(siblings.PARALLEL, data={"wait": {"b": "lost"}, "fail": "b"}, key="k")
        assert failed.value.status is SagaStatus.COMPENSATED
        _check(losses, coord, SagaStatus.COMPENSATED, {"a": 1, "b": 1}, UNWOUND)


def test_step_start_commit_lost_ack_while_sibling_retries_is_recognised(
    losses: Losses,
) -> None:
    """b's success and c's start (new step rows) lose their acknowledgement while a's
    retry commits its start: re-applied, c's row would clash on the primary key."""
    store = losses.store(STEP_START)
    with _coordinator(store) as coord, siblings.gates(lost=losses.caught):
        with _no_storage_error():
            coord.run(siblings.PLAIN_ROOTS, data={"wait": {"a": "lost"}, "flaky": "a"}, key="k")
        _check(losses, coord, SagaStatus.COMPLETED, {**ONCE, "a": 2}, {})


def _commit_a_note_when_caught(losses: Losses, store: SqlSagaStore, name: str) -> threading.Thread:
    """Once the loss happened, commit an event to the saga, as a sibling branch would."""

    def note() -> None:
        if not losses.caught.wait(siblings.GATE_LIMIT):
            return  # the test's check of the loss reports it
        saga = store.find(name, "k")
        assert saga is not None
        store.commit(Commit(saga.id, saga.epoch, events=(Event("sibling_note"),)))

    thread = threading.Thread(target=note, daemon=True, name="sibling-note")
    thread.start()
    return thread


def test_transactional_compensation_lost_ack_while_another_commit_of_the_saga_lands_is_recognised(
    losses: Losses,
) -> None:
    """The drivers compensate one step at a time, so the commit in between is made
    through the store directly, as a sibling branch's commit during unwinding would be."""
    store = losses.store(A_UNDO)
    with _coordinator(store) as coord:
        noting = _commit_a_note_when_caught(losses, store, siblings.PARALLEL.name)
        with pytest.raises(SagaFailed) as failed:
            coord.run(siblings.PARALLEL, data={"fail": "b"}, key="k")
        noting.join(siblings.GATE_LIMIT)
        assert failed.value.status is SagaStatus.COMPENSATED
        _check(losses, coord, SagaStatus.COMPENSATED, {"a": 1, "b": 1}, UNWOUND)


# -- a context-manager saga's s.parallel(...) --------------------------------------------------


def test_context_manager_parallel_transactional_call_lost_ack_while_sibling_commits_is_recognised(
    losses: Losses,
) -> None:
    store = losses.store(A_COMMIT)
    with _coordinator(store) as coord, siblings.gates(lost=losses.caught):
        status = siblings.run_block(coord, "k", {"wait": {"b": "lost"}})
        assert status is SagaStatus.COMPLETED
        _check(losses, coord, SagaStatus.COMPLETED, ONCE, DONE)


# -- the asyncio driver --------------------------------------------------------------------------


async def _run_async(store: SqlSagaStore, saga: Any, data: dict[str, Any]) -> None:
    async with AsyncCoordinator(store=store, lease_ttl=TTL) as coord:
        coord.register(*siblings.SAGAS)
        await coord.run(saga, data=data, key="k")


def _after_async(losses: Losses) -> Coordinator:
    """A coordinator for reading what the async run left (the store was closed with it)."""
    return Coordinator(losses.direct, lease_ttl=TTL)


def test_async_parallel_transactional_step_lost_ack_while_sibling_commits_is_recognised(
    losses: Losses,
) -> None:
    store = losses.store(A_COMMIT)
    with siblings.gates(lost=losses.caught):
        asyncio.run(_run_async(store, siblings.PARALLEL, {"wait": {"b": "lost"}}))
    with _after_async(losses) as coord:
        _check(losses, coord, SagaStatus.COMPLETED, ONCE, DONE)


def test_async_step_start_commit_lost_ack_while_sibling_retries_is_recognised(
    losses: Losses,
) -> None:
    store = losses.store(STEP_START)
    with siblings.gates(lost=losses.caught), _no_storage_error():
        data = {"wait": {"a": "lost"}, "flaky": "a"}
        asyncio.run(_run_async(store, siblings.PLAIN_ROOTS, data))
    with _after_async(losses) as coord:
        _check(losses, coord, SagaStatus.COMPLETED, {**ONCE, "a": 2}, {})
