"""What a failed saga's records say: the failing step, the failed compensation, their errors."""

from __future__ import annotations

import dataclasses

import pytest

from saga import RecordedError, SagaStatus, StepStatus
from saga._internal.errors import describe_error
from saga._internal.failure import failing_step, rebuilt_error, recorded_failure
from saga._internal.ports import SagaRecord, StepRecord

T = StepStatus


def saga(*steps: StepRecord, status: SagaStatus, error: str | None) -> SagaRecord:
    return SagaRecord(
        id="saga-1",
        name="order",
        key="k",
        kind="declarative",
        status=status,
        input=None,
        version=None,
        owner=None,
        epoch=1,
        error=error,
        steps=steps,
    )


def step(
    name: str, seq: int, status: StepStatus, error: str | None = None, **more: object
) -> StepRecord:
    return dataclasses.replace(StepRecord(name, seq, status, 1, error=error), **more)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "error",
    [
        ValueError("card declined"),
        KeyError("no such account"),
        KeyError(42),
        TimeoutError("slow"),
        ConnectionError(""),
        RuntimeError("two\nlines"),
        FileNotFoundError(2, "No such file or directory"),
    ],
    ids=repr,
)
def test_builtin_errors_come_back_as_their_class_reading_the_same(error: Exception) -> None:
    text = describe_error(error)
    rebuilt = rebuilt_error(text)
    assert type(rebuilt) is type(error)
    assert describe_error(rebuilt) == text
    assert str(rebuilt) == str(error)


@pytest.mark.parametrize(
    ("text", "type_name", "message"),
    [
        ("DeclinedError: card declined", "DeclinedError", "card declined"),
        ("StepTimeoutError: step 'x' did not finish within 1s", "StepTimeoutError", None),
        ("SystemExit: 3", "SystemExit", "3"),  # a builtin, but not an Exception: never made
        ("UnicodeDecodeError: 'utf-8' codec can't decode", "UnicodeDecodeError", None),
        ("KeyError: <object at 0x1>", "KeyError", "<object at 0x1>"),  # would read back quoted
        ("gave up after 3 attempts that never returned", None, None),
        ("os.system: rm -rf /", None, None),
    ],
)
def test_other_errors_are_recorded_errors_and_nothing_is_imported(
    text: str, type_name: str | None, message: str | None
) -> None:
    rebuilt = rebuilt_error(text, saga_id="s", step="charge", attempt=2)
    assert isinstance(rebuilt, RecordedError)
    assert rebuilt.type_name == type_name
    if message is not None:
        assert rebuilt.message == message
    assert describe_error(rebuilt) == text
    assert (rebuilt.saga_id, rebuilt.step, rebuilt.attempt) == ("s", "charge", 2)


def test_the_failing_step_is_the_one_whose_error_the_saga_kept() -> None:
    record = saga(
        step("a", 1, T.FAILED, "ValueError: first", result=None),
        step("b", 2, T.FAILED, "ValueError: later"),
        status=SagaStatus.COMPENSATED,
        error="ValueError: first",
    )
    failing = failing_step(record)
    assert failing is not None
    assert failing.name == "a"


def test_a_step_whose_own_compensation_failed_is_still_the_failing_step() -> None:
    record = saga(
        step("reserve", 1, T.SUCCEEDED, result='"R-1"'),
        step("charge", 2, T.COMPENSATING, "RuntimeError: ledger locked", undo_attempt=2),
        status=SagaStatus.FAILED,
        error="TimeoutError: gateway timed out",
    )
    failure = recorded_failure(record)
    assert (failure.failed_step, failure.failed_compensation) == ("charge", "charge")
    assert type(failure.__cause__) is TimeoutError
    assert isinstance(failure.compensation_error, RuntimeError)


def test_a_compensation_that_failed_after_succeeding_is_not_the_failing_step() -> None:
    record = saga(
        step("reserve", 1, T.COMPENSATING, "RuntimeError: ledger locked", result='"R-1"'),
        status=SagaStatus.FAILED,
        error="KeyError: 'the block failed'",
    )
    failure = recorded_failure(record)
    assert failure.failed_step is None
    assert failure.failed_compensation == "reserve"
    assert type(failure.__cause__) is KeyError


def test_a_reason_is_no_cause_as_the_first_run_had_none() -> None:
    reason = "gave up after 3 attempts that never returned"
    record = saga(
        step("crash", 1, T.COMPENSATED, reason), status=SagaStatus.COMPENSATED, error=reason
    )
    failure = recorded_failure(record)
    assert failure.failed_step == "crash"
    assert failure.__cause__ is None


def test_a_cancelled_saga_has_no_failing_step_and_no_cause() -> None:
    record = saga(step("a", 1, T.COMPENSATED, result="1"), status=SagaStatus.CANCELLED, error=None)
    failure = recorded_failure(record)
    assert (failure.failed_step, failure.failed_compensation, failure.__cause__) == (
        None,
        None,
        None,
    )
