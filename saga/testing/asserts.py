"""Assertion helpers for a saga's final state, with messages that say what ran."""

from __future__ import annotations

from collections.abc import Sequence

from saga._internal.status import SagaStatus, StepStatus
from saga._internal.views import SagaView


def _steps(view: SagaView) -> str:
    return ", ".join(f"{s.name} {s.status.value}" for s in view.steps) or "no steps"


def assert_completed(view: SagaView) -> None:
    """The saga completed and every step succeeded."""
    assert view.status is SagaStatus.COMPLETED, (
        f"saga {view.name} {view.id} is {view.status.value}, not completed ({_steps(view)})"
    )
    bad = [s.name for s in view.steps if s.status is not StepStatus.SUCCEEDED]
    assert not bad, f"saga {view.name} completed, yet {', '.join(bad)} did not succeed"


def assert_compensated(view: SagaView, steps: Sequence[str] | None = None) -> None:
    """The saga was compensated; with ``steps``, exactly those steps are compensated."""
    assert view.status is SagaStatus.COMPENSATED, (
        f"saga {view.name} {view.id} is {view.status.value}, not compensated ({_steps(view)})"
    )
    if steps is not None:
        undone = [s.name for s in view.steps if s.status is StepStatus.COMPENSATED]
        assert sorted(undone) == sorted(steps), (
            f"saga {view.name}: compensated {undone}, expected {list(steps)} ({_steps(view)})"
        )
