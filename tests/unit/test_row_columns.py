"""Each write path binds a record's columns from one place (saga.adapters.sql.rows):
the values it makes cover exactly the columns it names, which are the tables'."""

from __future__ import annotations

from saga.adapters.sql import rows

from saga._internal.ports import Event, SagaRecord, StepRecord
from saga._internal.status import SagaStatus, StepStatus


def test_the_values_made_are_the_columns_named() -> None:
    saga = SagaRecord("id", "name", None, "declarative", SagaStatus.RUNNING, None, "1", None, 1)
    step = StepRecord("charge", 0, StepStatus.RUNNING, 1)
    assert sorted(rows.instance_values(saga)) == sorted(rows.INSTANCE_COLUMNS)
    assert sorted(rows.step_values(step)) == sorted(rows.STEP_COLUMNS)
    assert sorted(rows.event_values("id", 1, Event("saga_started"))) == sorted(rows.EVENT_COLUMNS)
    assert set(rows.STEP_UPDATE_COLUMNS) < set(rows.STEP_COLUMNS)
