"""Which type a recorded step result is read back as, in this process.

A declarative step's comes from its definition (``result_type=`` or the return
annotation); a context-manager step's from the annotation of the function this
process knows for its stored reference. A process without the definition (an
operator's shell without ``--app``) reads plain JSON.
"""

from __future__ import annotations

from typing import Any

from saga.codec import decode
from saga.definition import defined_saga
from saga.ports import SagaRecord, StepRecord
from saga.refs import known_function
from saga.typed import NOT_TYPED, ResultTypeError, result_type_of, revive


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
    return revive(value, result_type(record, step), f"result of step {step.name!r}")


def shown_result(record: SagaRecord, step: StepRecord, value: Any) -> Any:
    """What a view shows: the typed result, or the JSON as stored when it no longer
    matches its type (a view is for reading; a step reading it gets the error)."""
    if value is None:
        return None
    try:
        return revive(value, result_type(record, step), f"result of step {step.name!r}")
    except ResultTypeError:
        return value


def _version(record: SagaRecord) -> int:
    try:
        return int(record.version) if record.version is not None else 1
    except ValueError:
        return 1
