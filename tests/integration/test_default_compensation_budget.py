"""Issue 29: under the default compensation budget a participant's outage that ends
within minutes is outlasted. The caller makes the first attempts in place and gets
``SagaHandedBack`` (waiting, not failed); workers make the next attempts as each comes
due, and the saga ends ``compensated`` without a person. Under the old default (five
attempts within about 1.5 s) the same outage ended ``failed``. On SQLite and PostgreSQL.

No wall time decides anything here: each next attempt is made due by expiring the
saga's lease on purpose, as a worker finds it once the wait is over.
"""

from __future__ import annotations

import re
import threading

import pytest

from saga import (
    Coordinator,
    Saga,
    SagaFailed,
    SagaHandedBack,
    SagaScope,
    SagaStatus,
    StepContext,
    admin,
)
from tests.integration import steps
from tests.integration.conftest import MakeCoordinator
from tests.integration.support import expire_lease, fast, kinds

OUTAGE = 8
"""Attempts of the refund that fail before the bank is back: more than the old default's
five, a small part of the new default's twenty."""


def _saga(name: str, tries: list[int], outage: int = OUTAGE) -> Saga:
    """``ship`` fails; ``charge``'s refund fails its first ``outage`` attempts."""
    saga = Saga(name)

    @saga.step()
    def charge(ctx: StepContext) -> str:
        return "charged"

    @charge.compensation  # the default budget: no retry= of its own
    def refund(ctx: StepContext) -> None:
        tries.append(ctx.attempt)
        if ctx.attempt <= outage:
            raise ConnectionError("bank unreachable")

    @saga.step(retry=None)
    def ship(ctx: StepContext) -> None:
        raise RuntimeError("no courier")

    return saga


def _work_until_settled(worker: Coordinator, saga_id: str) -> list[SagaStatus | None]:
    """Worker passes, each after the saga's next attempt came due; what each pass ended."""
    ended: list[SagaStatus | None] = []
    while worker.get(saga_id).status is SagaStatus.COMPENSATING:
        assert len(ended) < 20  # the default budget ends it before
        expire_lease(worker, saga_id)  # the wait is over, as the database clock would say
        (outcome,) = worker.recover().outcomes
        assert outcome.error is None  # waiting, compensated or failed: never refused
        ended.append(None if outcome.waiting else outcome.status)
    return ended


def test_an_outage_that_ends_is_compensated_by_workers_without_a_person(
    make_coord: MakeCoordinator,
) -> None:
    tries: list[int] = []
    saga = _saga("budget-outage", tries)
    with pytest.raises(SagaHandedBack) as handed:
        make_coord().run(saga, key="outage-1")
    waiting = handed.value
    assert waiting.waiting
    assert waiting.status is SagaStatus.COMPENSATING
    # The waits of 0.5, 1 and 2 s are spent in place; the fourth failure hands it back.
    assert (waiting.step, waiting.attempt, waiting.max_attempts) == ("charge", 4, 20)
    assert waiting.error == "ConnectionError: bank unreachable"
    assert str(waiting).startswith(
        f"saga {waiting.saga_id} is compensating: attempt 4 of 20 of the compensation of "
        "step 'charge' failed (ConnectionError: bank unreachable); it waits "
    )
    assert tries == [1, 2, 3, 4]

    worker = make_coord()
    worker.register(saga)
    ended = _work_until_settled(worker, waiting.saga_id)
    # Attempts 5 to 8 fail, each handed back again; the 9th finds the bank back.
    assert ended == [None] * (OUTAGE - 4) + [SagaStatus.COMPENSATED]
    assert tries == list(range(1, OUTAGE + 2))
    view = worker.get(waiting.saga_id)
    assert view.status is SagaStatus.COMPENSATED
    assert view.step("charge").status.value == "compensated"
    assert "operator_action" not in kinds(worker, view.id)  # nobody had to act


def test_an_outage_longer_than_the_budget_still_ends_failed(
    make_coord: MakeCoordinator,
) -> None:
    """The budget is finite: a refund that never comes back ends ``failed`` after its
    twentieth attempt, for a person to look at."""
    tries: list[int] = []
    saga = _saga("budget-spent", tries, outage=1000)
    with pytest.raises(SagaHandedBack) as handed:
        make_coord().run(saga, key="spent-1")
    worker = make_coord()
    worker.register(saga)
    ended = _work_until_settled(worker, handed.value.saga_id)
    assert ended == [None] * 15 + [SagaStatus.FAILED]
    assert tries == list(range(1, 21))
    assert worker.get(handed.value.saga_id).status is SagaStatus.FAILED


def _charge_then_cancel(scope: SagaScope) -> None:
    with scope:
        scope.step(steps.flaky, "bank", compensate=steps.unflaky)
        steps.FAILURES["bank"] = 1000  # the bank goes down as the order is cancelled
        raise KeyError("order cancelled")


def test_an_operators_retry_gets_a_whole_fresh_budget_across_hand_backs(
    make_coord: MakeCoordinator,
) -> None:
    """``retry-compensation`` of a saga that spent its budget gives it the default budget
    afresh, and a worker that takes it after a hand-back counts from that fresh start
    (it used to count every attempt ever made, and fail the saga before trying)."""
    trusted = ["tests.integration.steps"]
    app = make_coord(compensation_retry=fast(20, retry_on=(Exception,)), trusted_modules=trusted)
    with pytest.raises(SagaFailed) as failure:
        _charge_then_cancel(app.saga("budget-retry"))
    saga_id = failure.value.saga_id
    assert app.get(saga_id).status is SagaStatus.FAILED
    assert app.get(saga_id).step("flaky").compensation_attempt == 20

    steps.FAILURES["bank"] = 6  # after the operator's retry, down for six more attempts
    operator = make_coord(trusted_modules=trusted)  # the default budget
    with pytest.raises(SagaHandedBack) as handed:
        admin.retry_compensation(operator, saga_id)
    assert (handed.value.attempt, handed.value.max_attempts) == (24, 40)

    ended = _work_until_settled(operator, saga_id)
    assert ended == [None, None, SagaStatus.COMPENSATED]  # 25 and 26 fail, 27 undoes it
    unflaky = [c[2] for c in steps.CALLS if c[0] == "unflaky"]
    assert unflaky == list(range(1, 28))


def test_the_worker_logs_a_compensation_that_fails_again_as_waiting(
    make_coord: MakeCoordinator,
) -> None:
    """``saga worker`` (``admin.run_worker``): a hand-back to wait for the next attempt
    is normal during an outage; it is logged as waiting, with when, and not counted
    among the sagas handed back because the worker was told to stop."""
    tries: list[int] = []
    saga = _saga("budget-worker", tries)
    with pytest.raises(SagaHandedBack) as handed:
        make_coord().run(saga, key="worker-1")
    saga_id = handed.value.saga_id
    worker = make_coord()
    worker.register(saga)
    expire_lease(worker, saga_id)  # attempt 5 is due; the bank is still down
    lines: list[str] = []
    stop = threading.Event()

    def log(line: str) -> None:
        print(line)  # shown if the test fails, a hang included
        lines.append(line)
        if saga_id in line:  # the one line about our saga: the pass is over
            stop.set()

    stats = admin.run_worker(worker, stop, interval=0.05, log=log)
    (said,) = [line for line in lines if saga_id in line]
    assert re.fullmatch(
        rf"saga {saga_id} is compensating: attempt 5 of 20 of the compensation of step "
        r"'charge' failed \(ConnectionError: bank unreachable\); next attempt at "
        r"\d\d:\d\d:\d\d UTC, a worker retries it",
        said,
    ), said
    assert (stats.waiting, stats.handed_back, stats.errors) == (1, 0, 0)
    assert "handing" not in lines[-1]  # "stopped after recovering 0 saga(s)", nothing handed
    assert tries == [1, 2, 3, 4, 5]
