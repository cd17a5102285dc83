"""A compensation whose next attempt is due only after a long wait is handed back: the
caller gets ``SagaHandedBack`` at once (the failed attempt recorded, the saga
``compensating`` with no owner), no recoverer takes it before the attempt is due, and
one that takes it then carries the backoff on to ``compensated``, or to ``failed`` once
the budget is spent. On SQLite and PostgreSQL (``db_url``).
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest

from saga import RetryPolicy, Saga, SagaHandedBack, SagaStatus, StepContext, admin
from saga.admin.recovery import Result
from tests.cli.conftest import run_saga
from tests.integration.conftest import MakeCoordinator
from tests.integration.support import expire_lease, kinds

NEXT_WAIT = 600.0  # the participant's outage outlasts anything a caller should wait for


def _saga(name: str, attempts: int, down: list[bool], tries: list[int]) -> Saga:
    saga = Saga(name)

    @saga.step()
    def charge(ctx: StepContext) -> str:
        return "charged"

    policy = RetryPolicy(
        max_attempts=attempts,
        initial_delay=NEXT_WAIT,
        max_delay=NEXT_WAIT,
        jitter=0,
        retry_on=(Exception,),
    )

    @charge.compensation(retry=policy)
    def refund(ctx: StepContext) -> None:
        tries.append(ctx.attempt)
        if down[0]:
            raise ConnectionError("bank unreachable")

    @saga.step(retry=RetryPolicy(max_attempts=1))
    def ship(ctx: StepContext) -> None:
        raise RuntimeError("no courier")

    return saga


def test_a_long_compensation_wait_hands_the_saga_back_until_it_is_due(
    make_coord: MakeCoordinator, db_url: str, tmp_path: Path
) -> None:
    down, tries = [True], []
    saga = _saga("handback-recovers", 5, down, tries)
    caller = make_coord()
    with pytest.raises(SagaHandedBack) as handed:
        caller.run(saga, key="h-1")  # returns while the bank is still down
    assert handed.value.status is SagaStatus.COMPENSATING
    assert "waits 600.0s" in str(handed.value)
    view = caller.get(handed.value.saga_id)
    assert view.status is SagaStatus.COMPENSATING
    assert view.owner is None
    assert view.lease_expires_at is not None
    assert view.updated_at is not None
    assert view.lease_expires_at - view.updated_at == pytest.approx(NEXT_WAIT, abs=1.0)
    assert kinds(caller, view.id)[-2:] == ["compensation_attempt_failed", "lease_released"]
    _show_says_when_the_next_attempt_is_due(db_url, view.id, view.lease_expires_at, tmp_path)

    recoverer = make_coord()
    recoverer.register(saga)
    assert recoverer.recover().outcomes == []  # not due yet: nobody retries it
    assert tries == [1]

    down[0] = False  # the bank is back; its next attempt comes due
    expire_lease(recoverer, view.id)
    (outcome,) = recoverer.recover().outcomes
    assert outcome.status is SagaStatus.COMPENSATED
    assert tries == [1, 2]  # the attempt count went on across processes


def _show_says_when_the_next_attempt_is_due(
    db_url: str, saga_id: str, due: float, tmp_path: Path
) -> None:
    shown = run_saga("--db", db_url, "show", saga_id, "--json", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    (step,) = [s for s in json.loads(shown.stdout)["steps"] if s["name"] == "charge"]
    wait = step["retry_wait"]
    assert wait["error"] == "ConnectionError: bank unreachable"
    at = datetime.datetime.fromisoformat(wait["next_attempt_at"].replace("Z", "+00:00"))
    assert at.timestamp() == pytest.approx(due, abs=1.0)  # when a worker will claim it
    text = run_saga("--db", db_url, "show", saga_id, cwd=tmp_path).stdout
    assert "compensation attempt 1 failed: ConnectionError: bank unreachable" in text
    assert "next attempt at" in text


def test_a_handed_back_compensation_fails_for_good_once_its_budget_is_spent(
    make_coord: MakeCoordinator,
) -> None:
    down, tries = [True], []
    saga = _saga("handback-exhausted", 2, down, tries)
    with pytest.raises(SagaHandedBack) as handed:
        make_coord().run(saga, key="h-2")
    recoverer = make_coord()
    recoverer.register(saga)
    expire_lease(recoverer, handed.value.saga_id)
    (outcome,) = recoverer.recover().outcomes
    assert outcome.status is SagaStatus.FAILED
    assert tries == [1, 2]
    assert recoverer.get(handed.value.saga_id).status is SagaStatus.FAILED


def test_saga_recover_says_a_compensation_that_fails_again_waits_not_that_it_failed(
    make_coord: MakeCoordinator,
) -> None:
    down, tries = [True], []
    saga = _saga("handback-admin", 5, down, tries)
    with pytest.raises(SagaHandedBack) as handed:
        make_coord().run(saga, key="h-3")
    operator = make_coord()
    operator.register(saga)
    expire_lease(operator, handed.value.saga_id)
    (item,) = admin.recover(operator).items  # the bank is still down
    assert item.result is Result.SKIPPED
    assert item.reason is not None
    # Waiting, said with which attempt of how many failed and when the next is due.
    assert item.reason.startswith(
        f"waiting: saga {handed.value.saga_id} is compensating: attempt 2 of 5 of the "
        "compensation of step 'charge' failed (ConnectionError: bank unreachable); "
        "next attempt at "
    )
    assert item.reason.endswith(" UTC, a worker retries it")
    view = operator.get(handed.value.saga_id)
    assert (view.status, view.owner) == (SagaStatus.COMPENSATING, None)
    assert tries == [1, 2]
