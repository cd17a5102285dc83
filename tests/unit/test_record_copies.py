"""``replaced`` copies a record exactly as ``dataclasses.replace`` would.

The engine copies a saga's records on every commit with ``replaced`` (faster than
``dataclasses.replace``); a field it dropped or carried over wrongly would be written
to the database, so each field is changed in turn and compared with the standard copy.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from saga._internal.record import SagaRecord, StepRecord, replaced
from saga._internal.status import SagaStatus, StepKind, StepStatus

STEP = StepRecord(
    "charge", 2, StepStatus.RUNNING, 1, StepKind.PIVOT, True, "m:f", "m:g", "[1]", "d1",
    '"ok"', "d2", "boom", 3, 10.5, 11.5,
)  # fmt: skip
SAGA = SagaRecord(
    "id-1", "order", "key-1", "declarative", SagaStatus.RUNNING, '{"a": 1}', "2", "me", 4,
    20.0, 1.0, 2.0, "err", 30.0, True, (STEP,), "fp", '{"traceparent": "x"}', True,
)  # fmt: skip
NEW_VALUES: dict[str, Any] = {
    "name": "other", "seq": 9, "status": StepStatus.SUCCEEDED, "attempt": 7,
    "kind": StepKind.RETRIABLE, "transactional": False, "action_ref": "m:h",
    "compensation_ref": None, "args": None, "input_digest": "x", "result": "1",
    "output_digest": "y", "error": None, "undo_attempt": 0, "started_at": None,
    "finished_at": 99.0, "id": "id-2", "key": None, "kind_": "imperative",
    "input": None, "version": None, "owner": None, "epoch": 5, "lease_expires_at": None,
    "created_at": 3.0, "updated_at": 4.0, "deadline": None, "cancel_requested": False,
    "steps": (), "fingerprint": None, "trace_context": None, "stop": False,
}  # fmt: skip


def _changed(record: object, field: str) -> Any:
    if isinstance(record, SagaRecord) and field == "kind":
        return NEW_VALUES["kind_"]
    return NEW_VALUES[field]


@pytest.mark.parametrize("record", [STEP, SAGA], ids=["step", "saga"])
def test_changing_any_one_field_copies_every_other_as_replace_does(record: Any) -> None:
    for field in dataclasses.fields(record):
        if not field.init:
            continue
        value = _changed(record, field.name)
        ours, theirs = (
            replaced(record, **{field.name: value}),
            dataclasses.replace(record, **{field.name: value}),
        )
        assert ours == theirs, field.name
        assert getattr(ours, field.name) == value
        assert [getattr(ours, f.name) for f in dataclasses.fields(record)] == [
            getattr(theirs, f.name) for f in dataclasses.fields(record)
        ]


def test_a_saga_copy_does_not_carry_its_name_index_over() -> None:
    saga = dataclasses.replace(SAGA)
    assert saga.step("charge") == STEP  # builds the index
    assert saga.names == {"charge": 0}
    copy = replaced(saga, steps=(dataclasses.replace(STEP, name="refund"),))
    assert copy.names is None
    assert copy.step("refund") is not None
    assert copy.step("charge") is None


def test_a_field_the_record_lacks_is_refused() -> None:
    with pytest.raises(TypeError, match="StepRecord has no field 'colour'"):
        replaced(STEP, colour="red")


def test_the_copy_is_still_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        replaced(STEP, attempt=2).attempt = 3  # type: ignore[misc]
