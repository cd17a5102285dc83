"""Every effect the engine yields is a frozen dataclass of plain data: no function
crosses from the engine to a driver. A ``Call`` or ``Transact`` names what it runs (a
``Target``: a declared step's function by definition, version, step and role; a
compensation by its stored reference; a block's own call by the number its face was
given), and the driver finds the function. One field holds code, on purpose: a
``Branch``'s ``flow``, a sub-flow of the engine's own that the driver drives like any
other. What a transactional action's result is recorded as is a ``Recorded`` value,
not a function the engine hands over."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from saga._internal.engine import effects as fx
from saga._internal.engine.effects import Recorded
from saga._internal.engine.targets import Target
from saga._internal.ports import Commit, SagaRecord
from saga._internal.record import StepRecord
from saga._internal.status import SagaStatus, StepStatus

EFFECTS = typing.get_args(fx.Effect)
CODE_ON_PURPOSE = {("Branch", "flow")}


def _fields(kind: type) -> list[tuple[str, str]]:
    return [(field.name, str(field.type)) for field in dataclasses.fields(kind)]


@pytest.mark.parametrize("effect", EFFECTS, ids=lambda kind: kind.__name__)
def test_an_effect_is_frozen_data(effect: type) -> None:
    assert dataclasses.is_dataclass(effect)
    assert effect.__dataclass_params__.frozen  # type: ignore[attr-defined]
    for name, annotation in _fields(effect):
        if (effect.__name__, name) in CODE_ON_PURPOSE:
            continue
        assert "Callable" not in annotation, f"{effect.__name__}.{name}: {annotation}"


def test_what_they_carry_is_data_too() -> None:
    carried = [fx.Branch, fx.Launch, Recorded, *typing.get_args(Target)]
    for kind in carried:
        assert dataclasses.is_dataclass(kind)
        for name, annotation in _fields(kind):
            if (kind.__name__, name) not in CODE_ON_PURPOSE:
                assert "Callable" not in annotation, f"{kind.__name__}.{name}"


def _running(transactional_step: str) -> SagaRecord:
    step = StepRecord(transactional_step, 1, StepStatus.RUNNING, 1, transactional=True)
    return SagaRecord(
        "s-1", "order", None, "declarative", SagaStatus.RUNNING, None, None, "me", 1,
        steps=(step,),
    )  # fmt: skip


def test_a_recorded_outcome_is_a_value_that_makes_the_same_commit() -> None:
    record = _running("charge")
    outcome = Recorded(record, "charge", payload_limit=1000)
    assert outcome == Recorded(record, "charge", payload_limit=1000)  # comparable data
    first, again = outcome.change({"id": 1}), outcome.change({"id": 1})
    assert isinstance(first, Commit)
    assert [write.step.status for write in first.steps] == [StepStatus.SUCCEEDED]
    assert first.steps == again.steps
    assert first.events == again.events
    assert [event.kind for event in first.events] == ["step_succeeded"]
