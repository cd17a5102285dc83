"""What ``SagaFailed`` says: the failing step and its error, and a compensation that failed.

Every test runs on SQLite and PostgreSQL, through ``Coordinator`` and through
``AsyncCoordinator`` (``any_coord``).
"""

from __future__ import annotations

import pytest

from saga import Coordinator, Saga, SagaFailed, SagaStatus, StepContext, StepStatus
from tests.integration import steps
from tests.integration.support import fast


@pytest.fixture(autouse=True)
def quick_compensation_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Context-manager compensations get the default policy: make its backoff tiny."""
    monkeypatch.setattr("saga.runner.DEFAULT_COMPENSATION_RETRY", fast(2, retry_on=(Exception,)))


def _doomed(name: str) -> Saga:
    """confirm fails; transfer's compensation fails every time."""
    saga = Saga(name)

    @saga.step()
    def transfer(ctx: StepContext) -> dict[str, int]:
        return {"amount": 10}

    @transfer.compensation(retry=fast(2, retry_on=(Exception,)))
    def reverse(ctx: StepContext) -> None:
        raise RuntimeError("ledger locked")

    @saga.step()
    def confirm(ctx: StepContext) -> None:
        raise ValueError("confirmation refused")

    return saga


def _assert_names_the_compensation(failure: SagaFailed, step: str) -> None:
    assert failure.status is SagaStatus.FAILED
    assert failure.failed_compensation == step
    assert isinstance(failure.compensation_error, RuntimeError)
    assert str(failure.compensation_error) == "ledger locked"
    assert failure.compensation_error_type == "RuntimeError"
    assert failure.compensation_error_message == "ledger locked"
    assert f"compensation of step {step!r} failed: RuntimeError: ledger locked" in str(failure)


def test_a_failed_compensation_is_named_in_what_run_raises(any_coord: Coordinator) -> None:
    with pytest.raises(SagaFailed) as raised:
        any_coord.run(_doomed("report-declarative"), key="doomed")
    failure = raised.value
    _assert_names_the_compensation(failure, "transfer")
    assert failure.failed_step == "confirm"
    assert isinstance(failure.__cause__, ValueError)  # still the error that made it unwind
    assert str(failure) == (
        f"saga {failure.saga_id} ended failed at step 'confirm'; "
        "the compensation of step 'transfer' failed: RuntimeError: ledger locked"
    )


def test_a_failed_compensation_is_named_when_a_context_manager_step_fails(
    any_coord: Coordinator,
) -> None:
    with pytest.raises(SagaFailed) as raised, any_coord.saga("report-cm-step") as s:  # noqa: PT012 - the block is the saga
        s.step(steps.debit, "alice", 10, compensate=steps.locked)
        s.step(steps.boom, "kaput", compensate=steps.unboom)
    failure = raised.value
    _assert_names_the_compensation(failure, "debit")
    assert failure.failed_step == "boom"
    assert isinstance(failure.__cause__, RuntimeError)
    assert str(failure.__cause__) == "kaput"
    assert any_coord.get(s.id).step("debit").status is StepStatus.COMPENSATING


def test_a_failed_compensation_is_named_when_a_context_manager_block_fails(
    any_coord: Coordinator,
) -> None:
    with pytest.raises(SagaFailed) as raised, any_coord.saga("report-cm-block") as s:  # noqa: PT012 - the block is the saga
        s.step(steps.debit, "alice", 10, compensate=steps.locked)
        raise KeyError("the block itself failed")
    failure = raised.value
    _assert_names_the_compensation(failure, "debit")
    assert failure.failed_step is None
    assert isinstance(failure.__cause__, KeyError)


def test_a_failed_compensation_is_named_after_parallel_context_manager_steps(
    any_coord: Coordinator,
) -> None:
    with pytest.raises(SagaFailed) as raised, any_coord.saga("report-cm-parallel") as s:  # noqa: PT012 - the block is the saga
        s.step(steps.debit, "alice", 10, compensate=steps.locked)
        s.parallel(s.call(steps.credit, "bob", 10), s.call(steps.boom, "kaput"))
    failure = raised.value
    _assert_names_the_compensation(failure, "debit")
    assert failure.failed_step == "boom"
    assert isinstance(failure.__cause__, RuntimeError)
