"""Which type a recorded step result is read back as, in this process.

A declarative step's comes from its definition (``result_type=`` or the return
annotation); a context-manager step's from the annotation of the function this
process knows for its stored reference. A process without the definition (an
operator's shell without ``--app``) reads plain JSON.

Who reads decides what a mismatch does: a step reading ``ctx.results`` gets the
``ResultTypeError`` (:func:`typed_result`); a compensation and a view get the JSON
as stored with the error beside it (:func:`lenient_result`): an unwinding or an
operator's look must never fail on a type that changed since the result was written.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from saga._internal.codec import decode
from saga._internal.definition import defined_saga
from saga._internal.known_functions import known_function
from saga._internal.ports import SagaRecord, StepRecord
from saga._internal.typed import NOT_TYPED, ResultTypeError, result_type_of, revive


class Read(NamedTuple):
    """A recorded result as read: its value, and why it is the JSON as stored (None: it
    is typed as its step declares, or plain JSON for an untyped step)."""

    value: Any
    error: ResultTypeError | None = None


def result_type(record: SagaRecord, step: StepRecord) -> Any:
    """The type ``step``'s result is read back as (``NOT_TYPED``: plain JSON)."""
    if record.kind == "declarative":
        saga = defined_saga(record.name, _version(record))
        declared = saga.by_name(step.name) if saga is not None else None
        return declared.result_type if declared is not None else NOT_TYPED
    return result_type_of(known_function(step.action_ref))


def typed_result(record: SagaRecord, step: StepRecord) -> Any:
    """``step``'s recorded result, decoded and revived (``ResultTypeError`` on a mismatch)."""
    value = decode(step.result)
    if value is None:
        return None
    return revive(value, result_type(record, step), _what(step))


def lenient_result(record: SagaRecord, step: StepRecord, value: Any) -> Read:
    """``value`` (``step``'s decoded result) typed, else as stored with the reason."""
    if value is None:
        return Read(None)
    try:
        return Read(revive(value, result_type(record, step), _what(step)))
    except ResultTypeError as error:
        return Read(value, error)


def compensation_result_type(record: SagaRecord, step: StepRecord) -> Any:
    """The type what ``step``'s compensation returned is read back as (``NOT_TYPED``:
    plain JSON): its ``result_type=`` or return annotation, as for a step's result."""
    if record.kind == "declarative":
        saga = defined_saga(record.name, _version(record))
        declared = saga.by_name(step.name) if saga is not None else None
        return declared.compensation_result_type if declared is not None else NOT_TYPED
    return result_type_of(known_function(step.compensation_ref))


def lenient_compensation_result(record: SagaRecord, step: StepRecord, value: Any) -> Read:
    """``value`` (what ``step``'s compensation returned, decoded) typed, else as stored
    with the reason: reading it back never fails a view, as with a step's result."""
    if value is None:
        return Read(None)
    what = f"result of the compensation of step {step.name!r}"
    try:
        return Read(revive(value, compensation_result_type(record, step), what))
    except ResultTypeError as error:
        return Read(value, error)


def _what(step: StepRecord) -> str:
    return f"result of step {step.name!r}"


def _version(record: SagaRecord) -> int:
    try:
        return int(record.version) if record.version is not None else 1
    except ValueError:
        return 1
