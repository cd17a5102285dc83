"""Timeouts, deadlines and cancellation, with ``Coordinator`` and ``AsyncCoordinator``.

A timeout test relies on a step that runs far longer than its timeout (it
waits for ``steps.RELEASE``, set when the test ends); a deadline test waits
until the database clock is past the stored deadline. Nothing is timed.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from datetime import timedelta
from typing import Any

import pytest

from saga import (
    Coordinator,
    Saga,
    SagaFailed,
    SagaStatus,
    StepContext,
    StepStatus,
    StepTimeoutError,
)
from tests.aio import steps
from tests.aio.support import wait_for_cancel_request, wait_past_deadline
from tests.children import child_env
from tests.integration.support import assert_history_replays, expire_lease, fast

# -- timeouts ---------------------------------------------------------------------------------


def test_a_step_past_its_timeout_is_a_failed_attempt_that_follows_the_retry_policy(
    any_coord: Coordinator,
) -> None:
    saga = Saga("stop-timeout")
    undone: list[Any] = []

    @saga.step(timeout=0.1, retry=fast(2))  # TimeoutError is in the default retry_on
    def slow(ctx: StepContext) -> str:
        steps.note("slow", ctx.attempt)
        steps.RELEASE.wait(60)
        return "too late"

    @slow.compensation
    def undo_slow(ctx: StepContext) -> None:
        undone.append(ctx.result)

    with pytest.raises(SagaFailed) as failed:
        any_coord.run(saga)
    assert failed.value.status is SagaStatus.COMPENSATED
    assert failed.value.failed_step == "slow"
    assert isinstance(failed.value.__cause__, StepTimeoutError)
    assert steps.LOG == [("slow", 1), ("slow", 2)]
    assert undone == [None]  # it may have acted: compensated, with no result
    view = any_coord.get(failed.value.saga_id)
    assert view.step("slow").attempt == 2
    assert view.step("slow").error == "StepTimeoutError: step 'slow' did not finish within 0.1s"
    history = [(e.kind, e.attempt) for e in any_coord.history(view.id) if e.step == "slow"]
    assert history[:4] == [
        ("step_started", 1),
        ("attempt_failed", 1),
        ("step_started", 2),
        ("step_failed", 2),
    ]


def test_a_timed_out_thread_keeps_running_while_the_next_attempt_succeeds(
    any_coord: Coordinator,
) -> None:
    saga = Saga("stop-timeout-retry")

    @saga.step(timeout=0.1, retry=fast(3))
    def lookup(ctx: StepContext) -> int:
        steps.note("lookup", ctx.attempt)
        if ctx.attempt == 1:
            steps.RELEASE.wait(60)
            steps.note("first attempt returned")
        return ctx.attempt

    view = any_coord.run(saga)
    assert view.status is SagaStatus.COMPLETED
    assert view.results == {"lookup": 2}
    # The saga stopped waiting for attempt 1, but its thread could not be killed.
    assert ("first attempt returned",) not in steps.LOG
    steps.RELEASE.set()
    waiting = threading.Event()
    while ("first attempt returned",) not in steps.LOG:
        waiting.wait(0.01)


def test_context_manager_steps_time_out_too(any_coord: Coordinator) -> None:
    with (  # noqa: PT012 - the block is the saga
        pytest.raises(SagaFailed) as failed,
        any_coord.saga("stop-cm-timeout", key="k") as s,
    ):
        s.step(steps.book, "quote", compensate=steps.unbook)
        s.step(steps.hang, "answer", timeout=0.1, retry=fast(1))
    assert failed.value.status is SagaStatus.COMPENSATED
    assert failed.value.failed_step == "hang"
    assert isinstance(failed.value.__cause__, StepTimeoutError)
    assert ("unbook", "quote", "quote-booked") in steps.LOG


# -- deadlines --------------------------------------------------------------------------------


def _three_steps(name: str, coord: Coordinator) -> Saga:
    """one -> two (returns once the saga's deadline passed) -> three."""
    saga = Saga(name)

    @saga.step()
    def one(ctx: StepContext) -> str:
        steps.note("one")
        return "1"

    @saga.step()
    def two(ctx: StepContext) -> str:
        wait_past_deadline(coord.store, ctx.saga_id)
        steps.note("two")
        return "2"

    @saga.step()
    def three(ctx: StepContext) -> str:
        steps.note("three")
        return "3"

    for step in (one, two, three):
        step.compensation(lambda ctx: steps.note("undo", ctx.step, ctx.result))
    return saga


def test_past_its_deadline_a_saga_stops_at_the_next_step_boundary_and_compensates(
    any_coord: Coordinator,
) -> None:
    saga = _three_steps("stop-deadline", any_coord)
    with pytest.raises(SagaFailed) as failed:
        any_coord.run(saga, deadline=timedelta(seconds=0.2))
    assert failed.value.status is SagaStatus.COMPENSATED
    assert ("three",) not in steps.LOG  # nothing starts after the deadline
    undone = [entry[1:] for entry in steps.LOG if entry[0] == "undo"]
    assert undone[-1] == ("one", "1")
    view = any_coord.get(failed.value.saga_id)
    assert view.status is SagaStatus.COMPENSATED
    # A step whose start commit reported the deadline never ran: skipped, not undone.
    # (An async step in flight may instead be cancelled when the lease renewal notices
    # the deadline first; it is then compensated like any step that may have acted.)
    statuses = [s.status for s in view.steps]
    assert all(s is StepStatus.COMPENSATED for s in statuses[:-1])
    assert statuses[-1] in (StepStatus.COMPENSATED, StepStatus.SKIPPED)
    turned = [e for e in any_coord.history(view.id) if e.kind == "saga_compensating"]
    assert [e.detail for e in turned] == [{"reason": "deadline passed"}]
    assert_history_replays(any_coord, view.id)  # type: ignore[arg-type]


def test_a_context_manager_saga_past_its_deadline_compensates(any_coord: Coordinator) -> None:
    with (  # noqa: PT012 - the block is the saga
        pytest.raises(SagaFailed) as failed,
        any_coord.saga("stop-cm-deadline", key="k", deadline=timedelta(seconds=0.3)) as s,
    ):
        s.step(steps.book, "quote", compensate=steps.unbook)
        wait_past_deadline(any_coord.store, s.id)
        s.step(steps.book, "late", compensate=steps.unbook)
    assert failed.value.status is SagaStatus.COMPENSATED
    assert [entry[1] for entry in steps.LOG if entry[0] == "book"] == ["quote"]
    assert ("unbook", "quote", "quote-booked") in steps.LOG
    assert any_coord.get(s.id).status is SagaStatus.COMPENSATED


def test_a_saga_recovered_past_its_deadline_compensates(any_coord: Coordinator) -> None:
    saga = Saga("stop-deadline-crash", deadline=timedelta(seconds=0.3))  # for every run

    @saga.step()
    def one(ctx: StepContext) -> str:
        return "1"

    @saga.step()
    def two(ctx: StepContext) -> str:
        if ctx.attempt == 1:
            raise steps.Crash("the process dies mid-step")
        steps.note("two ran again")
        return "2"

    @saga.step()
    def three(ctx: StepContext) -> str:
        steps.note("three")
        return "3"

    for step in (one, two):
        step.compensation(lambda ctx: steps.note("undo", ctx.step, ctx.result))
    with pytest.raises(steps.Crash):
        any_coord.run(saga)
    (crashed,) = any_coord.list()
    assert crashed.status is SagaStatus.RUNNING
    wait_past_deadline(any_coord.store, crashed.id)
    expire_lease(any_coord, crashed.id)
    report = any_coord.recover()
    assert [o.status for o in report.outcomes] == [SagaStatus.COMPENSATED]
    assert steps.LOG == [("undo", "two", None), ("undo", "one", "1")]
    view = any_coord.get(crashed.id)
    assert [(s.name, s.status) for s in view.steps] == [
        ("one", StepStatus.COMPENSATED),
        ("two", StepStatus.COMPENSATED),
    ]


def test_past_its_deadline_a_saga_whose_pivot_may_have_acted_still_goes_forward(
    any_coord: Coordinator,
) -> None:
    saga = Saga("stop-deadline-pivot")

    @saga.step()
    def hold(ctx: StepContext) -> str:
        return "held"

    @hold.compensation
    def release(ctx: StepContext) -> None:
        steps.note("release")

    @saga.step(pivot=True)
    def charge(ctx: StepContext) -> str:
        steps.note("charge", ctx.attempt)
        if ctx.attempt == 1:
            raise steps.Crash("died after the charge may have gone through")
        return "charged"

    @saga.step(retriable=True)
    def ship(ctx: StepContext) -> str:
        return "shipped"

    with pytest.raises(steps.Crash):
        any_coord.run(saga, deadline=0.3)
    (crashed,) = any_coord.list()
    wait_past_deadline(any_coord.store, crashed.id)
    expire_lease(any_coord, crashed.id)
    report = any_coord.recover()
    # The charge may have happened: the saga can only go forward, deadline or not.
    assert [o.status for o in report.outcomes] == [SagaStatus.COMPLETED]
    assert ("release",) not in steps.LOG
    assert steps.LOG == [("charge", 1), ("charge", 2)]


# -- cancellation -----------------------------------------------------------------------------

_CANCEL = (
    "import sys; from saga import Coordinator\n"
    "with Coordinator(sys.argv[1]) as coord:\n"
    "    print(coord.cancel(sys.argv[2]).status.value)\n"
)


def test_cancel_from_another_process_stops_a_running_saga(
    any_coord: Coordinator, db_url: str
) -> None:
    saga = Saga("stop-cancel")
    saga_ids: list[str] = []
    cancel_answered = threading.Event()

    @saga.step()
    def hold(ctx: StepContext) -> str:
        saga_ids.append(ctx.saga_id)
        wait_for_cancel_request(any_coord.store, ctx.saga_id)
        # Still running when the cancel command reads the saga back: otherwise whether
        # it prints running or compensating is a race with this owner's next commit.
        assert cancel_answered.wait(60), "the cancel command never returned"
        return "held"

    @hold.compensation
    def release(ctx: StepContext) -> None:
        steps.note("release", ctx.result)

    @saga.step()
    def charge(ctx: StepContext) -> None:
        steps.note("charge")

    outcome: list[BaseException] = []

    def run() -> None:
        try:
            any_coord.run(saga)
        except SagaFailed as failure:
            outcome.append(failure)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        while not saga_ids:
            thread.join(0.01)
        cancel = subprocess.run(
            [sys.executable, "-c", _CANCEL, db_url, saga_ids[0]],
            env=child_env(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        cancel_answered.set()
        thread.join(30)
    assert cancel.returncode == 0, cancel.stderr
    assert cancel.stdout.strip() == "running"  # the live owner stops by itself
    (failure,) = outcome
    assert isinstance(failure, SagaFailed)
    assert failure.status is SagaStatus.CANCELLED
    assert steps.LOG == [("release", "held")]  # charge never ran
    history = any_coord.history(saga_ids[0])
    assert [e.detail["action"] for e in history if e.kind == "operator_action"] == ["cancel"]
