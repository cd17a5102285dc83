"""Retries: which errors, how many attempts (across crashes), recorded and backed off."""

from __future__ import annotations

import contextlib
import time
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
    StepStatus,
)
from tests.integration import steps
from tests.integration.conftest import MakeCoordinator
from tests.integration.steps import Crash
from tests.integration.support import assert_history_replays, fast, wait_until_expired


def test_retry_on_errors_are_retried_and_each_attempt_is_recorded(coord: Coordinator) -> None:
    attempts: list[int] = []
    saga = Saga("retry-recorded")

    @saga.step(retry=fast(4, retry_on=(ConnectionError,)))
    def call(ctx: StepContext) -> str:
        attempts.append(ctx.attempt)
        if ctx.attempt < 3:
            raise ConnectionError(f"refused {ctx.attempt}")
        return "ok"

    view = coord.run(saga)
    assert attempts == [1, 2, 3]
    assert view.status is SagaStatus.COMPLETED
    assert view.step("call").attempt == 3
    assert coord.get(view.id).step("call").attempt == 3
    history = [(e.kind, e.attempt) for e in coord.history(view.id) if e.step == "call"]
    assert history == [
        ("step_started", 1),
        ("attempt_failed", 1),
        ("step_started", 2),
        ("attempt_failed", 2),
        ("step_started", 3),
        ("step_succeeded", 3),
    ]
    failed = [e for e in coord.history(view.id) if e.kind == "attempt_failed"]
    assert failed[0].detail is not None
    assert failed[0].detail["error"] == "ConnectionError: refused 1"
    # How long the attempt ran: inside the window from its start to its failure's record
    # (which comes after the retry wait), as a timeline needs to tell the two apart.
    first_start = next(
        e for e in coord.history(view.id) if e.kind == "step_started" and e.step == "call"
    )
    assert 0 <= failed[0].detail["took"] <= failed[0].at - first_start.at + 0.01
    assert_history_replays(coord, view.id)


class HistoryAtFailure:
    """An inline listener (called in the saga's own thread or loop, right after the
    commit that told it) that reads the saga's history from the database the moment an
    ``attempt_failed`` is told: what an operator would see during the retry wait."""

    inline = True

    def __init__(self, url: str) -> None:
        self.url = url
        self.seen: list[tuple[str, int | None, dict[str, Any] | None]] = []

    def __call__(self, event: SagaEvent) -> None:
        if event.kind != "attempt_failed":
            return
        with contextlib.closing(Coordinator(self.url)) as reader:
            self.seen = [(e.kind, e.attempt, e.detail) for e in reader.history(event.saga_id)]


def test_a_failed_attempt_is_durable_before_the_retry_wait(
    make_coord: MakeCoordinator, db_url: str
) -> None:
    saga = Saga("retry-wait-recorded")
    policy = RetryPolicy(
        max_attempts=2, initial_delay=0.05, max_delay=0.05, jitter=0, retry_on=(ConnectionError,)
    )

    @saga.step(retry=policy)
    def call(ctx: StepContext) -> str:
        if ctx.attempt == 1:
            raise ConnectionError("reset by peer")
        return "ok"

    listener = HistoryAtFailure(db_url)
    view = make_coord(listeners=[listener]).run(saga)
    assert view.status is SagaStatus.COMPLETED
    # Told before the wait, and already in the database: the next attempt's start is not.
    *_, (kind, attempt, detail) = listener.seen
    assert (kind, attempt) == ("attempt_failed", 1)
    assert [(k, a) for k, a, _ in listener.seen if k == "step_started"] == [("step_started", 1)]
    assert detail is not None
    assert (detail["error"], detail["delay"]) == ("ConnectionError: reset by peer", 0.05)
    history = make_coord().history(view.id)
    failed = next(e for e in history if e.kind == "attempt_failed")
    retried = next(e for e in history if e.kind == "step_started" and e.attempt == 2)
    assert failed.id < retried.id
    assert failed.at <= retried.at


def test_errors_outside_retry_on_are_not_retried(coord: Coordinator) -> None:
    attempts: list[int] = []
    saga = Saga("retry-not-retried")

    @saga.step(retry=fast(5, retry_on=(ConnectionError,)))
    def call(ctx: StepContext) -> None:
        attempts.append(ctx.attempt)
        raise ValueError("bad request")

    with pytest.raises(SagaFailed) as raised:
        coord.run(saga)
    assert attempts == [1]
    assert isinstance(raised.value.__cause__, ValueError)
    view = coord.get(raised.value.saga_id)
    assert view.step("call").attempt == 1
    assert "attempt_failed" not in [e.kind for e in coord.history(view.id)]


def test_retries_stop_at_max_attempts_then_the_saga_unwinds(coord: Coordinator) -> None:
    attempts: list[int] = []
    saga = Saga("retry-exhausted")

    @saga.step(retry=fast(3))
    def call(ctx: StepContext) -> None:
        attempts.append(ctx.attempt)
        raise TimeoutError(f"slow {ctx.attempt}")

    with pytest.raises(SagaFailed) as raised:
        coord.run(saga)
    assert attempts == [1, 2, 3]
    assert raised.value.status is SagaStatus.COMPENSATED
    assert raised.value.failed_step == "call"
    assert str(raised.value.__cause__) == "slow 3"
    step = coord.get(raised.value.saga_id).step("call")
    assert step.attempt == 3
    assert step.error == "TimeoutError: slow 3"
    assert_history_replays(coord, raised.value.saga_id)


def test_context_manager_steps_are_retried_with_their_policy(coord: Coordinator) -> None:
    steps.FAILURES["remote"] = 2
    with coord.saga("retry-cm") as s:
        assert s.step(steps.flaky, "remote", retry=fast(3)) == "remote"
    assert steps.CALLS == [("flaky", "remote", 1), ("flaky", "remote", 2), ("flaky", "remote", 3)]
    view = coord.get(s.id)
    assert view.step("flaky").attempt == 3
    assert [e.kind for e in coord.history(s.id)].count("attempt_failed") == 2


def test_backoff_waits_between_attempts(coord: Coordinator) -> None:
    """Only lower bounds: a retry never comes sooner than its backoff (sleep guarantees it)."""
    starts: list[float] = []
    saga = Saga("retry-backoff")
    policy = fast(3, initial_delay=0.02, multiplier=2.0, max_delay=1.0)

    @saga.step(retry=policy)
    def call(ctx: StepContext) -> None:
        starts.append(time.monotonic())
        if ctx.attempt < 3:
            raise ConnectionError("again")

    coord.run(saga)
    assert len(starts) == 3
    assert starts[1] - starts[0] >= 0.02
    assert starts[2] - starts[1] >= 0.04


def test_max_attempts_counts_attempts_across_crashes(make_coord: MakeCoordinator) -> None:
    """A step that kills its process every time is stopped by the persisted attempt count."""
    attempts: list[int] = []
    undone: list[object] = []
    saga = Saga("retry-across-crashes")

    @saga.step(retry=fast(2))
    def deadly(ctx: StepContext) -> None:
        attempts.append(ctx.attempt)
        raise Crash("the process dies")

    @deadly.compensation
    def undo_deadly(ctx: StepContext) -> None:
        undone.append(ctx.result)

    first = make_coord(lease_ttl=0.3)
    with pytest.raises(Crash):
        first.run(saga)
    saga_id = first.list(limit=1)[0].id
    assert first.get(saga_id).step("deadly").attempt == 1

    second = make_coord(lease_ttl=0.3)
    wait_until_expired(second, saga_id)
    with pytest.raises(Crash):
        second.recover()  # attempt 2 dies too
    assert second.get(saga_id).step("deadly").attempt == 2

    third = make_coord(lease_ttl=0.3)
    wait_until_expired(third, saga_id)
    report = third.recover()
    assert attempts == [1, 2]  # never a third attempt
    assert [o.status for o in report.outcomes] == [SagaStatus.COMPENSATED]
    view = third.get(saga_id)
    assert view.status is SagaStatus.COMPENSATED
    assert view.step("deadly").status is StepStatus.COMPENSATED
    assert "gave up after 2 attempts" in (view.step("deadly").error or "")
    assert undone == [None]
    assert_history_replays(third, saga_id)


def test_context_manager_max_attempts_counts_across_crashes(make_coord: MakeCoordinator) -> None:
    steps.FAILURES["deadly"] = 10
    first = make_coord(lease_ttl=0.3)
    with pytest.raises(Crash), first.saga("retry-cm-crashes", key="k") as s:  # noqa: PT012 - the block is the saga
        s.step(steps.debit, "alice", 1, compensate=steps.refund)
        s.step(steps.crash, "deadly", retry=fast(2))
    second = make_coord(lease_ttl=0.3)
    wait_until_expired(second, s.id)
    with pytest.raises(Crash), second.saga("retry-cm-crashes", key="k") as again:  # noqa: PT012 - the block is the saga
        again.step(steps.debit, "alice", 1, compensate=steps.refund)
        again.step(steps.crash, "deadly", retry=fast(2))
    third = make_coord(lease_ttl=0.3)
    wait_until_expired(third, s.id)
    with pytest.raises(SagaFailed) as raised, third.saga("retry-cm-crashes", key="k") as last:  # noqa: PT012 - the block is the saga
        last.step(steps.debit, "alice", 1, compensate=steps.refund)
        last.step(steps.crash, "deadly", retry=fast(2))
    crashes = [c for c in steps.CALLS if c[0] == "crash"]
    assert crashes == [("crash", "deadly", 1), ("crash", "deadly", 2)]
    assert [c[0] for c in steps.CALLS].count("debit") == 1
    assert raised.value.status is SagaStatus.COMPENSATED
    assert raised.value.failed_step == "crash"
    view = third.get(s.id)
    assert view.step("crash").attempt == 2
    assert view.step("debit").status is StepStatus.COMPENSATED
    assert_history_replays(third, s.id)
