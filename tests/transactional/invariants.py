"""Exactly-once, checked: the effect rows and the saga's records must tell the same story."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.engine import Row

from saga import SagaStatus, SagaView, StepStatus

_NEVER_COMMITTED = (StepStatus.FAILED, StepStatus.RUNNING)


def check_agree(saga: SagaView, rows: Sequence[Row[Any]], steps: Sequence[str]) -> None:
    """Every step's recorded status matches the rows that committed with it, once each."""
    where = f"saga {saga.id} ({saga.status.value})"
    assert saga.status.is_terminal, f"{where} is not terminal"
    mine = [row for row in rows if row.saga_id == saga.id]
    recorded = {step.name for step in saga.steps}
    strays = sorted({row.step for row in mine} - recorded)
    assert not strays, f"{where}: effects of steps never recorded: {strays}"
    for step in saga.steps:
        done = [row for row in mine if row.step == step.name and row.kind == "do"]
        undone = [row for row in mine if row.step == step.name and row.kind == "undo"]
        state = f"{where} step {step.name} {step.status.value}: {len(done)} do, {len(undone)} undo"
        assert len(done) <= 1, f"{state}: an effect was applied twice"
        assert len(undone) <= 1, f"{state}: an effect was undone twice"
        if step.status is StepStatus.SUCCEEDED:
            assert (len(done), len(undone)) == (1, 0), state
        elif step.status is StepStatus.COMPENSATED:
            assert (len(done), len(undone)) == (1, 1), state
        else:
            assert step.status in _NEVER_COMMITTED, state
            assert (len(done), len(undone)) == (0, 0), state
        if done:
            assert step.result == {"row": done[0].id}, f"{state}: result {step.result}"
    statuses = [step.status for step in saga.steps]
    if saga.status is SagaStatus.COMPLETED:
        assert [s.name for s in saga.steps] == list(steps), f"{where}: steps {statuses}"
        assert set(statuses) == {StepStatus.SUCCEEDED}, f"{where}: steps {statuses}"
    elif saga.status is SagaStatus.COMPENSATED:
        assert StepStatus.SUCCEEDED not in statuses, f"{where}: steps {statuses}"
