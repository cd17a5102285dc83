"""What ``SagaFailed`` says: the failing step and its error, and a compensation that failed.

Every test runs on SQLite and PostgreSQL, through ``Coordinator`` and through
``AsyncCoordinator`` (``any_coord``, or ``async with`` itself where the facade's
thread would change what is tested: the chain of what a block raises).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from typer.testing import CliRunner

from saga import (
    AsyncCoordinator,
    Coordinator,
    RecordedError,
    Saga,
    SagaFailed,
    SagaStatus,
    StepContext,
    StepStatus,
)
from saga.cli import app
from tests.integration import steps
from tests.integration.support import fast


@pytest.fixture
def coord_options() -> dict[str, Any]:
    """Context-manager compensations get the coordinator's policy: two quick attempts."""
    return {"compensation_retry": fast(2, retry_on=(Exception,))}


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


# -- the chain: the participant's own error, found by walking it ---------------------------


def _chain(error: BaseException) -> list[BaseException]:
    """``error`` and every exception chained to it (causes and contexts), each once."""
    seen: list[BaseException] = []
    todo: list[BaseException | None] = [error]
    while todo:
        found = todo.pop()
        if found is not None and not any(found is s for s in seen):
            seen.append(found)
            todo += [found.__cause__, found.__context__]
    return seen


def _assert_chains_the_refusal(failure: SagaFailed, cause: type[BaseException]) -> None:
    assert failure.status is SagaStatus.FAILED
    assert isinstance(failure.__cause__, cause)  # still the error that made it unwind
    refusals = [e for e in _chain(failure) if isinstance(e, steps.LedgerRefusedError)]
    assert refusals == [failure.compensation_error]
    assert str(refusals[0]) == "ledger refused the reversal"


def _refused_block(coord: Coordinator, how: str) -> None:
    with coord.saga(f"chain-{how}") as s:
        s.step(steps.debit, "alice", 10, compensate=steps.refused)
        if how == "step":
            s.step(steps.boom, "kaput")
        raise KeyError("the block itself failed")


@pytest.mark.parametrize(("how", "cause"), [("block", KeyError), ("step", RuntimeError)])
def test_a_context_manager_failure_chains_the_compensations_own_error(
    coord: Coordinator, how: str, cause: type[BaseException]
) -> None:
    with pytest.raises(SagaFailed) as raised:
        _refused_block(coord, how)
    _assert_chains_the_refusal(raised.value, cause)


def test_an_async_context_manager_failure_chains_the_compensations_own_error(
    db_url: str, coord_options: dict[str, Any]
) -> None:
    async def refused_block() -> None:
        async with AsyncCoordinator(db_url, **coord_options) as coord, coord.saga("chain") as s:
            await s.step(steps.debit, "alice", 10, compensate=steps.refused)
            raise KeyError("the block itself failed")

    with pytest.raises(SagaFailed) as raised:
        asyncio.run(refused_block())
    _assert_chains_the_refusal(raised.value, KeyError)


# -- the same key again: the recorded failure, rebuilt ------------------------------------


class DeclinedError(Exception):
    """Not a builtin: a rerun cannot know this class, only its name and message."""


def _declined(name: str, error: Exception) -> Saga:
    saga = Saga(name)

    @saga.step()
    def reserve(ctx: StepContext) -> str:
        return "R-1"

    @reserve.compensation
    def release(ctx: StepContext) -> None:
        pass

    @saga.step(retry=fast(2, retry_on=(DeclinedError,)))
    def charge(ctx: StepContext) -> None:
        raise error

    return saga


def _failures(coord: Coordinator, saga: Saga, key: str) -> tuple[SagaFailed, SagaFailed]:
    with pytest.raises(SagaFailed) as first:
        coord.run(saga, key=key)
    with pytest.raises(SagaFailed) as again:
        coord.run(saga, key=key)
    return first.value, again.value


def _assert_same(first: SagaFailed, again: SagaFailed) -> None:
    assert str(again) == str(first)
    assert (again.saga_id, again.status, again.failed_step) == (
        first.saga_id,
        first.status,
        first.failed_step,
    )
    assert (again.failed_compensation, again.compensation_error_type) == (
        first.failed_compensation,
        first.compensation_error_type,
    )
    assert again.compensation_error_message == first.compensation_error_message


def test_a_rerun_raises_the_same_failure_with_a_builtin_error_rebuilt(
    any_coord: Coordinator,
) -> None:
    first, again = _failures(any_coord, _declined("report-rerun", ValueError("card declined")), "k")
    _assert_same(first, again)
    assert again.status is SagaStatus.COMPENSATED
    assert again.failed_step == "charge"
    assert type(again.__cause__) is ValueError
    assert str(again.__cause__) == "card declined"


def test_a_rerun_rebuilds_an_unknown_error_class_by_name_only(any_coord: Coordinator) -> None:
    saga = _declined("report-rerun-own", DeclinedError("card declined"))
    first, again = _failures(any_coord, saga, "k")
    _assert_same(first, again)
    cause = again.__cause__
    assert isinstance(cause, RecordedError)
    assert (cause.type_name, cause.message, str(cause)) == (
        "DeclinedError",
        "card declined",
        "card declined",
    )
    assert (cause.saga_id, cause.step, cause.attempt) == (again.saga_id, "charge", 2)


def test_a_rerun_of_a_failed_saga_names_the_failed_compensation(any_coord: Coordinator) -> None:
    first, again = _failures(any_coord, _doomed("report-rerun-failed"), "doomed")
    _assert_same(first, again)
    _assert_names_the_compensation(again, "transfer")
    assert isinstance(again.__cause__, ValueError)
    assert str(again.__cause__) == "confirmation refused"


def test_a_rerun_tells_apart_a_step_and_its_own_failed_compensation(
    any_coord: Coordinator,
) -> None:
    saga = Saga("report-rerun-own-undo")

    @saga.step()
    def charge(ctx: StepContext) -> None:
        raise TimeoutError("gateway timed out")  # maybe after charging

    @charge.compensation(retry=fast(1))
    def refund(ctx: StepContext) -> None:
        raise RuntimeError("ledger locked")

    first, again = _failures(any_coord, saga, "k")
    assert (first.failed_step, first.failed_compensation) == ("charge", "charge")
    _assert_same(first, again)
    assert type(again.__cause__) is TimeoutError  # the step's error, not its compensation's
    assert isinstance(again.compensation_error, RuntimeError)
    view = any_coord.get(again.saga_id)
    assert view.error == "RuntimeError: ledger locked"  # the compensation's: act on it
    assert view.forward_error == "TimeoutError: gateway timed out"


def test_re_entering_a_failed_context_manager_saga_raises_its_failure_again(
    any_coord: Coordinator,
) -> None:
    raised: list[SagaFailed] = []
    for _ in range(2):
        with pytest.raises(SagaFailed) as failure, any_coord.saga("report-rerun-cm", key="k") as s:  # noqa: PT012 - the block is the saga
            s.step(steps.debit, "alice", 10, compensate=steps.refund)
            s.step(steps.boom, "kaput")
        raised.append(failure.value)
    first, again = raised
    _assert_same(first, again)
    assert again.failed_step == "boom"
    assert type(again.__cause__) is RuntimeError
    assert str(again.__cause__) == "kaput"
    assert [call[0] for call in steps.CALLS] == ["debit", "boom", "refund"]  # nothing ran again


def test_re_entering_a_context_manager_saga_whose_block_failed_rebuilds_its_error(
    any_coord: Coordinator,
) -> None:
    raised: list[SagaFailed] = []
    for _ in range(2):
        with (  # noqa: PT012 - the block is the saga
            pytest.raises(SagaFailed) as failure,
            any_coord.saga("report-rerun-block", key="k") as s,
        ):
            s.step(steps.debit, "alice", 10, compensate=steps.locked)
            raise KeyError("no such account")
        raised.append(failure.value)
    first, again = raised
    _assert_same(first, again)
    assert again.failed_step is None
    assert type(again.__cause__) is KeyError
    assert str(again.__cause__) == str(first.__cause__) == "'no such account'"


def test_the_admin_command_says_the_failed_compensation_once(
    coord: Coordinator, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(SagaFailed) as raised, coord.saga("report-cli") as s:  # noqa: PT012 - the block is the saga
        s.step(steps.debit, "alice", 10, compensate=steps.locked)
        raise KeyError("the block failed")
    # The command's compensation gets two quick attempts, as the application's had:
    # under the default budget it would wait for a worker instead of failing.
    monkeypatch.setenv("REPORT_DB", db_url)
    app_args = ["--app", "tests.integration.steps:quick_coordinator"]
    result = CliRunner().invoke(app, [*app_args, "compensate", raised.value.saga_id])
    assert result.exit_code == 1
    line = result.stderr.strip()
    assert "the compensation of step 'debit' failed: RuntimeError: ledger locked;" in line
    assert line.count("ledger locked") == 1
