"""Coordinator behaviour on ``memory://``: the whole engine, no database."""

from __future__ import annotations

import asyncio
import threading
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
    OperationRefusedError,
    RetryPolicy,
    Saga,
    SagaBusyError,
    SagaFailed,
    SagaStatus,
    StepContext,
    StepStatus,
    StepTimeoutError,
    UnsafeReferenceError,
    current_step,
)
from saga.ports import Commit, SagaRecord, StepRecord, StepWrite

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


def another(store: InMemorySagaStore, **options: Any) -> Coordinator:
    """A second coordinator on the same store: another process, as far as saga can tell."""
    return Coordinator(store=store, lease_ttl=5.0, **options)


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


def crash_once() -> str:
    calls.append(("crash_once",))
    if calls.count(("crash_once",)) == 1:
        raise PowerCut
    return "second time lucky"


def always_crash() -> None:
    calls.append(("always_crash",))
    raise PowerCut


def whoami() -> dict[str, Any]:
    step = current_step()
    return {"saga": step.saga_id, "key": step.idempotency_key, "attempt": step.attempt}


# -- declarative sagas -----------------------------------------------------------------


def test_declarative_saga_completes_with_results(coord: Coordinator) -> None:
    saga = order_saga()
    result = coord.run(saga, data={"sku": "A1"}, key="o-1")
    assert result.status is SagaStatus.COMPLETED
    assert result.results == {n: {"done": n} for n in ("reserve", "charge", "ship")}
    stored = coord.get(result.id)
    assert (stored.status, stored.results, stored.input) == (
        SagaStatus.COMPLETED,
        result.results,
        {"sku": "A1"},
    )


def test_same_key_returns_the_recorded_outcome_without_running_again(coord: Coordinator) -> None:
    saga = order_saga()
    first = coord.run(saga, data={"sku": "A1"}, key="o-1")
    calls.clear()
    again = coord.run(saga, data={"sku": "A1"}, key="o-1")
    assert again.id == first.id
    assert calls == []


def test_same_key_with_other_input_is_refused(coord: Coordinator) -> None:
    saga = order_saga()
    coord.run(saga, data={"sku": "A1"}, key="o-1")
    with pytest.raises(OperationRefusedError, match="other input"):
        coord.run(saga, data={"sku": "B2"}, key="o-1")


def test_failure_compensates_newest_first_including_the_failed_step(coord: Coordinator) -> None:
    with pytest.raises(SagaFailed) as caught:
        coord.run(order_saga(fail_at="charge"), key="o-1")
    failure = caught.value
    assert (failure.status, failure.failed_step) == (SagaStatus.COMPENSATED, "charge")
    assert isinstance(failure.__cause__, ValueError)
    undone = [c for c in calls if c[0] == "undo"]
    assert undone == [("undo", "charge", None), ("undo", "reserve", {"done": "reserve"})]
    saga = coord.get(failure.saga_id)
    assert saga.status is SagaStatus.COMPENSATED
    assert [s.status for s in saga.steps] == [StepStatus.COMPENSATED, StepStatus.COMPENSATED]


def test_a_failed_saga_with_a_key_raises_again_on_rerun(coord: Coordinator) -> None:
    saga = order_saga(fail_at="charge")
    with pytest.raises(SagaFailed):
        coord.run(saga, key="o-1")
    calls.clear()
    with pytest.raises(SagaFailed) as caught:
        coord.run(saga, key="o-1")
    assert (caught.value.status, caught.value.failed_step) == (SagaStatus.COMPENSATED, "charge")
    assert calls == []


def test_retried_attempts_are_recorded(coord: Coordinator) -> None:
    saga = Saga(f"flaky-{uuid.uuid4().hex[:8]}")

    @saga.step(retry=RetryPolicy(max_attempts=3, retry_on=(ConnectionError,), **NO_WAIT))
    def call_api(ctx: StepContext) -> int:
        if ctx.attempt < 3:
            raise ConnectionError("reset")
        return ctx.attempt

    result = coord.run(saga)
    assert result.step("call_api").attempt == 3
    kinds = [e.kind for e in coord.history(result.id)]
    assert kinds.count("attempt_failed") == 2


def test_a_step_timeout_counts_as_a_failure(coord: Coordinator) -> None:
    saga = Saga(f"slow-{uuid.uuid4().hex[:8]}")

    @saga.step(timeout=0.01, retry=RetryPolicy(max_attempts=1))
    def slow(ctx: StepContext) -> None:
        time.sleep(0.2)

    with pytest.raises(SagaFailed) as caught:
        coord.run(saga)
    assert isinstance(caught.value.__cause__, StepTimeoutError)


def test_a_compensation_that_fails_for_good_leaves_the_saga_failed(coord: Coordinator) -> None:
    saga = Saga(f"stuck-undo-{uuid.uuid4().hex[:8]}")
    broken = {"undo": True}

    @saga.step()
    def reserve(ctx: StepContext) -> str:
        return "R1"

    @reserve.compensation(retry=RetryPolicy(max_attempts=2, retry_on=(Exception,), **NO_WAIT))
    def release(ctx: StepContext) -> None:
        if broken["undo"]:
            raise RuntimeError("inventory down")

    @saga.step()
    def charge(ctx: StepContext) -> None:
        raise ValueError("card declined")

    with pytest.raises(SagaFailed) as caught:
        coord.run(saga)
    assert caught.value.status is SagaStatus.FAILED
    view = coord.get(caught.value.saga_id)
    assert view.status is SagaStatus.FAILED
    assert view.step("reserve").compensation_attempt == 2
    broken["undo"] = False
    assert coord.compensate(view.id).status is SagaStatus.COMPENSATED


def test_failure_after_the_pivot_does_not_compensate(coord: Coordinator) -> None:
    saga = Saga(f"pivot-{uuid.uuid4().hex[:8]}")

    @saga.step()
    def charge(ctx: StepContext) -> None:
        return None

    @charge.compensation
    def refund_charge(ctx: StepContext) -> None:
        calls.append(("refund",))

    @saga.step(pivot=True)
    def ship(ctx: StepContext) -> None:
        return None

    @saga.step()
    def email(ctx: StepContext) -> None:
        raise ValueError("smtp down")

    with pytest.raises(SagaFailed) as caught:
        coord.run(saga)
    assert caught.value.status is SagaStatus.FAILED
    assert calls == []
    with pytest.raises(OperationRefusedError, match="pivot"):
        coord.compensate(caught.value.saga_id)


def test_register_validates_the_definition(coord: Coordinator) -> None:
    saga = Saga(f"bad-{uuid.uuid4().hex[:8]}")
    saga.step(name="a", after=("b",))(lambda ctx: None)
    with pytest.raises(DefinitionError, match="unknown step 'b'"):
        coord.register(saga)


# -- commits per step ---------------------------------------------------------------------


def count_commits(store: InMemorySagaStore, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    for method in ("create", "commit"):
        original = getattr(store, method)

        def counted(*args: Any, _original: Any = original, _name: str = method) -> Any:
            seen.append(_name)
            return _original(*args)

        monkeypatch.setattr(store, method, counted)
    return seen


def test_a_declarative_saga_costs_one_commit_per_step_plus_one(
    coord: Coordinator, store: InMemorySagaStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    saga = order_saga()
    commits = count_commits(store, monkeypatch)
    coord.run(saga)
    assert len(commits) == len(saga.steps) + 1


def test_a_context_manager_saga_costs_two_commits_per_step_plus_one(
    coord: Coordinator, store: InMemorySagaStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    commits = count_commits(store, monkeypatch)
    with coord.saga("transfer") as s:
        s.step(debit, "alice", 10, compensate=refund)
        s.step(credit, "bob", 10, compensate=uncredit)
    assert len(commits) == 2 * 2 + 1


# -- context-manager sagas ----------------------------------------------------------------


def test_context_manager_saga_completes(coord: Coordinator) -> None:
    with coord.saga("transfer", key="t-1") as s:
        hold = s.step(debit, "alice", 10, compensate=refund)
        s.step(credit, "bob", 10, compensate=uncredit)
    assert hold == {"hold": "alice-10"}
    view = coord.get(s.id)
    assert view.status is SagaStatus.COMPLETED
    assert view.step("debit").action == f"{__name__}:debit"
    assert view.step("debit").compensation == f"{__name__}:refund"


def test_a_failing_step_unwinds_with_result_and_arguments(coord: Coordinator) -> None:
    with pytest.raises(SagaFailed) as caught, coord.saga("transfer", key="t-1") as s:  # noqa: PT012
        s.step(debit, "alice", 10, compensate=refund)
        s.step(credit, "nobody", 10, compensate=uncredit)
    assert (caught.value.status, caught.value.failed_step) == (SagaStatus.COMPENSATED, "credit")
    assert isinstance(caught.value.__cause__, LookupError)
    undone = [c for c in calls if c[0] in ("refund", "uncredit")]
    assert undone == [
        ("uncredit", None, "nobody", 10),
        ("refund", {"hold": "alice-10"}, "alice", 10),
    ]


def test_an_error_in_the_block_unwinds_what_was_done(coord: Coordinator) -> None:
    with pytest.raises(SagaFailed) as caught, coord.saga("transfer") as s:  # noqa: PT012
        s.step(debit, "alice", 10, compensate=refund)
        raise KeyError("validation failed after the debit")
    assert caught.value.status is SagaStatus.COMPENSATED
    assert ("refund", {"hold": "alice-10"}, "alice", 10) in calls


def test_a_lambda_compensation_is_refused_before_anything_runs(coord: Coordinator) -> None:
    with pytest.raises(UnsafeReferenceError, match="is a lambda"), coord.saga("transfer") as s:
        s.step(debit, "alice", 10, compensate=lambda hold, *args: None)
    assert calls == []
    assert coord.list() == []


def test_current_step_knows_the_running_step(coord: Coordinator) -> None:
    with coord.saga("who") as s:
        me = s.step(whoami)
    assert me == {"saga": s.id, "key": f"{s.id}:whoami", "attempt": 1}
    with pytest.raises(RuntimeError, match="outside a saga step"):
        current_step()


def test_reentering_a_completed_block_replays_recorded_results(coord: Coordinator) -> None:
    for _ in range(2):
        with coord.saga("transfer", key="t-1") as s:
            assert s.step(debit, "alice", 10, compensate=refund) == {"hold": "alice-10"}
    assert calls == [("debit", "alice", 10)]


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


# -- crashes and recovery -------------------------------------------------------------------


def test_reentering_after_a_crash_continues_where_it_stopped(
    coord: Coordinator, clock: Clock
) -> None:
    for _ in range(2):
        try:
            with coord.saga("retry-me", key="k") as s:
                s.step(debit, "alice", 10, compensate=refund)
                outcome = s.step(crash_once)
        except PowerCut:
            clock.advance(6)  # the crashed run's lease runs out
    assert outcome == "second time lucky"
    assert calls.count(("debit", "alice", 10)) == 1
    assert coord.get(s.id).step("crash_once").attempt == 2


def test_a_step_that_always_crashes_stops_after_its_attempts(
    coord: Coordinator, clock: Clock
) -> None:
    outcomes = []
    for _ in range(5):
        try:
            with coord.saga("doomed", key="k") as s:
                s.step(debit, "alice", 10, compensate=refund)
                s.step(always_crash, retry=RetryPolicy(max_attempts=2))
        except (PowerCut, SagaFailed) as error:
            outcomes.append(type(error).__name__)
        clock.advance(6)
    assert outcomes == ["PowerCut", "PowerCut", "SagaFailed", "SagaFailed", "SagaFailed"]
    assert calls.count(("always_crash",)) == 2
    assert coord.get(s.id).status is SagaStatus.COMPENSATED


def test_recover_resumes_a_crashed_declarative_saga(
    coord: Coordinator, store: InMemorySagaStore, clock: Clock
) -> None:
    saga = Saga(f"resume-{uuid.uuid4().hex[:8]}")
    crash = {"now": True}

    @saga.step()
    def reserve(ctx: StepContext) -> str:
        return "R1"

    @saga.step()
    def charge(ctx: StepContext) -> str:
        if crash["now"]:
            raise PowerCut
        return "C1"

    with pytest.raises(PowerCut):
        coord.run(saga, key="o-1")
    crash["now"] = False
    recoverer = another(store)
    assert recoverer.recover().outcomes == []  # the lease is still live
    clock.advance(6)
    report = recoverer.recover()
    assert [(o.name, o.status, o.error) for o in report.outcomes] == [
        (saga.name, SagaStatus.COMPLETED, None)
    ]
    assert report.ok
    view = recoverer.get(report.outcomes[0].saga_id)
    assert view.results == {"reserve": "R1", "charge": "C1"}
    assert (view.epoch, view.step("charge").attempt) == (2, 2)


def test_on_crash_compensate_unwinds_instead(
    coord: Coordinator, store: InMemorySagaStore, clock: Clock
) -> None:
    saga = order_saga(on_crash="compensate")
    saga.steps[1].fn = lambda ctx: (_ for _ in ()).throw(PowerCut())
    with pytest.raises(PowerCut):
        coord.run(saga)
    clock.advance(6)
    report = another(store).recover()
    assert report.count(SagaStatus.COMPENSATED) == 1


def test_recover_refuses_a_changed_definition_and_records_why(
    coord: Coordinator, store: InMemorySagaStore, clock: Clock
) -> None:
    saga = order_saga()
    saga.steps[1].fn = lambda ctx: (_ for _ in ()).throw(PowerCut())
    with pytest.raises(PowerCut):
        coord.run(saga)
    saga.step(name="audit")(lambda ctx: None)  # the code changed while the saga was stuck
    clock.advance(6)
    report = another(store).recover()
    [outcome] = report.outcomes
    assert outcome.status is None
    assert outcome.error is not None
    assert "definition version" in outcome.error
    assert not report.ok
    assert report.errors == [outcome]
    assert "recovery_refused" in [e.kind for e in coord.history(outcome.saga_id)]
    assert coord.get(outcome.saga_id).status is SagaStatus.RUNNING


def test_recover_compensates_a_crashed_context_manager_saga(
    coord: Coordinator, store: InMemorySagaStore, clock: Clock
) -> None:
    with pytest.raises(PowerCut), coord.saga("transfer", key="t-1") as s:  # noqa: PT012
        s.step(debit, "alice", 10, compensate=refund)
        raise PowerCut
    clock.advance(6)
    report = another(store, trusted_modules=[__name__]).recover()
    assert report.count(SagaStatus.COMPENSATED) == 1
    assert ("refund", {"hold": "alice-10"}, "alice", 10) in calls


def test_cancel_unwinds_a_stuck_saga(
    coord: Coordinator, store: InMemorySagaStore, clock: Clock
) -> None:
    saga = order_saga()
    saga.steps[1].fn = lambda ctx: (_ for _ in ()).throw(PowerCut())
    with pytest.raises(PowerCut):
        coord.run(saga)
    [stuck] = coord.list(status="running")
    clock.advance(6)
    assert another(store).cancel(stuck.id).status is SagaStatus.CANCELLED
    assert [c for c in calls if c[0] == "undo"] == [
        ("undo", "charge", None),
        ("undo", "reserve", {"done": "reserve"}),
    ]


def test_list_filters_by_status_and_name(coord: Coordinator) -> None:
    good, bad = order_saga(), order_saga(fail_at="ship")
    coord.run(good)
    with pytest.raises(SagaFailed):
        coord.run(bad)
    assert [v.name for v in coord.list(status=SagaStatus.COMPENSATED)] == [bad.name]
    assert [v.name for v in coord.list(name=good.name)] == [good.name]
    assert [v.name for v in coord.list(limit=1)] == [bad.name]


def test_reentering_while_the_lease_is_live_is_refused(coord: Coordinator) -> None:
    with pytest.raises(PowerCut), coord.saga("transfer", key="t-1") as s:  # noqa: PT012
        s.step(debit, "alice", 10, compensate=refund)
        raise PowerCut
    with pytest.raises(SagaBusyError), coord.saga("transfer", key="t-1"):
        pass
    assert calls == [("debit", "alice", 10)]


def test_independent_steps_run_in_parallel(coord: Coordinator) -> None:
    saga = Saga(f"parallel-{uuid.uuid4().hex[:8]}", max_concurrency=2)
    both_running = threading.Barrier(2, timeout=5)

    @saga.step(after=())
    def left(ctx: StepContext) -> str:
        both_running.wait()  # only returns if the other step runs at the same time
        return "L"

    @saga.step(after=())
    def right(ctx: StepContext) -> str:
        both_running.wait()
        return "R"

    @saga.step(after=("left", "right"))
    def join(ctx: StepContext) -> str:
        return ctx.results["left"] + ctx.results["right"]

    assert coord.run(saga).results == {"left": "L", "right": "R", "join": "LR"}


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


def test_a_passed_deadline_stops_the_saga_at_its_next_step(
    coord: Coordinator, clock: Clock
) -> None:
    saga = Saga(f"late-{uuid.uuid4().hex[:8]}")

    @saga.step()
    def slow(ctx: StepContext) -> str:
        clock.advance(10)  # the step takes longer than the saga may
        return "S"

    @slow.compensation
    def undo_slow(ctx: StepContext) -> None:
        calls.append(("undo_slow", ctx.result))

    @saga.step()
    def never(ctx: StepContext) -> None:
        calls.append(("never",))

    with pytest.raises(SagaFailed) as caught:
        coord.run(saga, deadline=5.0)
    assert caught.value.status is SagaStatus.COMPENSATED
    assert calls == [("undo_slow", "S")]
    events = coord.history(caught.value.saga_id)
    [turn] = [e for e in events if e.kind == "saga_compensating"]
    assert turn.detail == {"reason": "deadline passed"}


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


def test_recovery_refuses_a_forged_compensation_and_changes_nothing(
    coord: Coordinator, store: InMemorySagaStore, clock: Clock
) -> None:
    saga_id = forged_saga(store)
    clock.advance(6)
    report = coord.recover()
    [outcome] = report.outcomes
    assert outcome.status is None
    assert outcome.error is not None
    assert "os:system" in outcome.error
    view = coord.get(saga_id)
    assert (view.status, view.step("debit").status) == (SagaStatus.RUNNING, StepStatus.SUCCEEDED)
    assert "recovery_refused" in [e.kind for e in coord.history(saga_id)]


def test_operator_compensate_refuses_a_forged_compensation_before_claiming(
    coord: Coordinator, store: InMemorySagaStore, clock: Clock
) -> None:
    saga_id = forged_saga(store)
    clock.advance(6)
    with pytest.raises(UnsafeReferenceError, match="os:system"):
        coord.compensate(saga_id)
    view = coord.get(saga_id)
    assert (view.status, view.epoch, view.owner) == (SagaStatus.RUNNING, 1, "elsewhere")
