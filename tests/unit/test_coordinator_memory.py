"""Coordinator behaviour on ``memory://`` that no test on a real store covers.

The behaviour every store shares (running, idempotency, unwinding, retries,
pivots, recovery, operator verbs, listing, deadlines, timeouts, parallel
steps) is tested once, on SQLite, PostgreSQL and PgBouncer, by
tests/integration and tests/aio; this module keeps what is only checked
here: the in-memory store under both drivers, the number of commits a
context-manager saga asks for, the references a block records, and three
refusals (re-entering a block with other calls, or while its lease is live;
an operator's compensation of a forged reference, before it claims the saga).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from saga.adapters.memory import InMemorySagaStore

from saga import (
    AsyncCoordinator,
    Coordinator,
    DefinitionError,
    RetryPolicy,
    Saga,
    SagaBusyError,
    SagaFailed,
    SagaStatus,
    StepContext,
    StepStatus,
    UnsafeReferenceError,
)
from saga._internal.ports import Commit, SagaRecord, StepRecord, StepWrite

NO_WAIT = {"initial_delay": 0.0, "jitter": 0.0}
calls: list[tuple[Any, ...]] = []


class PowerCut(BaseException):
    """Not an ``Exception``: saga records nothing more, as if the process died here."""


class Clock:
    """``time.time()`` plus however far the test has moved it on."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds


@pytest.fixture(autouse=True)
def _clear_calls() -> None:
    calls.clear()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> InMemorySagaStore:
    memory = InMemorySagaStore()
    monkeypatch.setattr(memory, "now", clock)
    return memory


@pytest.fixture
def coord(store: InMemorySagaStore) -> Iterator[Coordinator]:
    coordinator = Coordinator(store=store, lease_ttl=5.0)
    yield coordinator
    coordinator.close()


def order_saga(fail_at: str | None = None, pivot: bool = False, **options: Any) -> Saga:
    """reserve -> charge -> ship, each recording its calls; ``fail_at`` raises ValueError."""
    saga = Saga(f"order-{uuid.uuid4().hex[:8]}", **options)

    def act(ctx: StepContext) -> dict[str, Any]:
        calls.append(("do", ctx.step, ctx.attempt))
        if ctx.step == fail_at:
            raise ValueError(f"{ctx.step} broke")
        return {"done": ctx.step}

    def undo(ctx: StepContext) -> None:
        calls.append(("undo", ctx.step, ctx.result))

    for name in ("reserve", "charge", "ship"):
        step = saga.step(name=name, pivot=pivot and name == "ship", retry=RetryPolicy(**NO_WAIT))(
            act
        )
        if not (pivot and name == "ship"):
            step.compensation(undo)
    return saga


# Context-manager sagas need module-level functions.


def debit(account: str, amount: int) -> dict[str, Any]:
    calls.append(("debit", account, amount))
    return {"hold": f"{account}-{amount}"}


def refund(hold: dict[str, Any] | None, account: str, amount: int) -> None:
    calls.append(("refund", hold, account, amount))


def credit(account: str, amount: int) -> str:
    calls.append(("credit", account, amount))
    if account == "nobody":
        raise LookupError("no such account")
    return account


def uncredit(result: str | None, account: str, amount: int) -> None:
    calls.append(("uncredit", result, account, amount))


def always_crash() -> None:
    calls.append(("always_crash",))
    raise PowerCut


def count_commits(store: InMemorySagaStore, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    for method in ("create", "commit"):
        original = getattr(store, method)

        def counted(*args: Any, _original: Any = original, _name: str = method) -> Any:
            seen.append(_name)
            return _original(*args)

        monkeypatch.setattr(store, method, counted)
    return seen


def test_a_context_manager_saga_costs_two_commits_per_step_plus_one(
    coord: Coordinator, store: InMemorySagaStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    commits = count_commits(store, monkeypatch)
    with coord.saga("transfer") as s:
        s.step(debit, "alice", 10, compensate=refund)
        s.step(credit, "bob", 10, compensate=uncredit)
    assert len(commits) == 2 * 2 + 1


def test_context_manager_saga_completes(coord: Coordinator) -> None:
    with coord.saga("transfer", key="t-1") as s:
        hold = s.step(debit, "alice", 10, compensate=refund)
        s.step(credit, "bob", 10, compensate=uncredit)
    assert hold == {"hold": "alice-10"}
    view = coord.get(s.id)
    assert view.status is SagaStatus.COMPLETED
    assert view.step("debit").action == f"{__name__}:debit"
    assert view.step("debit").compensation == f"{__name__}:refund"


def test_reentering_with_other_calls_is_refused(coord: Coordinator, clock: Clock) -> None:
    with pytest.raises(PowerCut), coord.saga("transfer", key="t-1") as s:  # noqa: PT012
        s.step(debit, "alice", 10, compensate=refund)
        s.step(always_crash)
    clock.advance(6)  # the crashed run's lease runs out
    with pytest.raises(SagaFailed) as caught, coord.saga("transfer", key="t-1") as s:
        s.step(debit, "alice", 99, compensate=refund)
    assert isinstance(caught.value.__cause__, DefinitionError)
    assert "same calls in the same order" in str(caught.value.__cause__)
    assert calls.count(("debit", "alice", 99)) == 0


def test_reentering_while_the_lease_is_live_is_refused(coord: Coordinator) -> None:
    with pytest.raises(PowerCut), coord.saga("transfer", key="t-1") as s:  # noqa: PT012
        s.step(debit, "alice", 10, compensate=refund)
        raise PowerCut
    with pytest.raises(SagaBusyError), coord.saga("transfer", key="t-1"):
        pass
    assert calls == [("debit", "alice", 10)]


def test_the_async_twin_runs_on_the_memory_store(store: InMemorySagaStore) -> None:
    saga = order_saga(fail_at="ship")

    async def scenario() -> SagaFailed:
        async with AsyncCoordinator(store=store, lease_ttl=5.0) as coord:
            with pytest.raises(SagaFailed) as caught:
                await coord.run(saga, key="o-1")
            return caught.value

    failure = asyncio.run(scenario())
    assert (failure.status, failure.failed_step) == (SagaStatus.COMPENSATED, "ship")
    assert [c[1] for c in calls if c[0] == "undo"] == ["ship", "charge", "reserve"]


def test_a_transactional_step_gets_no_session_in_memory(coord: Coordinator) -> None:
    saga = Saga(f"tx-{uuid.uuid4().hex[:8]}")

    @saga.step(transactional=True)
    def write(ctx: StepContext) -> bool:
        return ctx.session is None

    result = coord.run(saga)
    assert result.results == {"write": True}
    assert result.step("write").transactional


def forged_saga(store: InMemorySagaStore) -> str:
    """A stuck context-manager saga whose row names ``os:system`` as a compensation."""
    saga = SagaRecord(
        id=str(uuid.uuid4()),
        name="forged",
        key=None,
        kind="imperative",
        status=SagaStatus.RUNNING,
        input=None,
        version=None,
        owner="elsewhere",
        epoch=1,
    )
    step = StepRecord(
        "debit",
        1,
        StepStatus.SUCCEEDED,
        1,
        action_ref=f"{__name__}:debit",
        compensation_ref="os:system",
        args='{"args":["rm -rf /"],"kwargs":{}}',
        result='"x"',
    )
    store.create(saga, Commit(saga.id, 1, steps=(StepWrite(step, new=True),)), 5.0)
    return saga.id


def test_operator_compensate_refuses_a_forged_compensation_before_claiming(
    coord: Coordinator, store: InMemorySagaStore, clock: Clock
) -> None:
    saga_id = forged_saga(store)
    clock.advance(6)
    with pytest.raises(UnsafeReferenceError, match="os:system"):
        coord.compensate(saga_id)
    view = coord.get(saga_id)
    assert (view.status, view.epoch, view.owner) == (SagaStatus.RUNNING, 1, "elsewhere")
