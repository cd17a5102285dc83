"""The coordinator's ``compensation_retry``: the policy of context-manager compensations,
which have no ``retry=`` of their own; a declarative compensation's own policy wins.

Every test runs on SQLite and PostgreSQL, through ``Coordinator`` and through
``AsyncCoordinator`` (``any_coord``).
"""

from __future__ import annotations

from typing import Any

import pytest

from saga import Coordinator, Saga, SagaFailed, SagaStatus, StepContext
from tests.integration import steps
from tests.integration.support import fast

COORDINATOR_ATTEMPTS = 3
STEP_ATTEMPTS = 2


@pytest.fixture
def coord_options() -> dict[str, Any]:
    return {"compensation_retry": fast(COORDINATOR_ATTEMPTS, retry_on=(Exception,))}


def _compensation_attempts(coord: Coordinator, saga_id: str, step: str) -> list[int | None]:
    return [
        e.attempt
        for e in coord.history(saga_id)
        if e.kind == "compensation_started" and e.step == step
    ]


def test_a_context_manager_compensation_gets_the_coordinators_budget(
    any_coord: Coordinator,
) -> None:
    with pytest.raises(SagaFailed) as raised, any_coord.saga("cretry-cm") as s:  # noqa: PT012 - the block is the saga
        s.step(steps.debit, "alice", 10, compensate=steps.locked)
        raise KeyError("the block failed")
    assert raised.value.status is SagaStatus.FAILED
    assert raised.value.failed_compensation == "debit"
    assert _compensation_attempts(any_coord, s.id, "debit") == [1, 2, 3]


def test_a_declarative_compensations_own_policy_wins_over_the_coordinators(
    any_coord: Coordinator,
) -> None:
    saga = Saga("cretry-declarative")

    @saga.step()
    def transfer(ctx: StepContext) -> str:
        return "T-1"

    @transfer.compensation(retry=fast(STEP_ATTEMPTS, retry_on=(Exception,)))
    def reverse(ctx: StepContext) -> None:
        raise RuntimeError("ledger locked")

    @saga.step()
    def confirm(ctx: StepContext) -> None:
        raise ValueError("confirmation refused")

    with pytest.raises(SagaFailed) as raised:
        any_coord.run(saga, key="k")
    assert raised.value.status is SagaStatus.FAILED
    assert _compensation_attempts(any_coord, raised.value.saga_id, "transfer") == [1, 2]
