"""Statuses of sagas and steps, and the only transitions between them."""

from __future__ import annotations

from enum import StrEnum

from saga.errors import IllegalTransitionError


class SagaStatus(StrEnum):
    """Where a saga stands. The last four are terminal."""

    RUNNING = "running"
    COMPENSATING = "compensating"
    COMPLETED = "completed"
    COMPENSATED = "compensated"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_terminal(self) -> bool:
        return self not in (SagaStatus.RUNNING, SagaStatus.COMPENSATING)

    @property
    def is_finished(self) -> bool:
        """Finished for good: ``failed`` is terminal but waits for an operator."""
        return self.is_terminal and self is not SagaStatus.FAILED


class StepStatus(StrEnum):
    """Where one step stands. ``pending`` and ``skipped`` are never stored."""

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    IN_DOUBT = "in_doubt"
    """Gave up without ever learning how it ended (its process died on every attempt):
    it may have acted. Not the same as ``failed``, whose action is known to have raised."""
    COMPENSATING = "compensating"
    COMPENSATED = "compensated"
    SKIPPED = "skipped"


class StepKind(StrEnum):
    """Garcia-Molina & Salem's step kinds."""

    COMPENSATABLE = "compensatable"
    PIVOT = "pivot"
    RETRIABLE = "retriable"


PIVOT_ACTED = frozenset({StepStatus.SUCCEEDED, StepStatus.RUNNING, StepStatus.IN_DOUBT})
"""A pivot step in one of these may have had its irreversible effect: nothing before it
may be unwound. Stores check the same set inside the claim of an unwinding verb."""


_SAGA_MOVES: dict[SagaStatus, frozenset[SagaStatus]] = {
    SagaStatus.RUNNING: frozenset(
        {SagaStatus.COMPLETED, SagaStatus.COMPENSATING, SagaStatus.FAILED}
    ),
    SagaStatus.COMPENSATING: frozenset(
        {SagaStatus.COMPENSATED, SagaStatus.CANCELLED, SagaStatus.FAILED}
    ),
    # An operator may retry the compensation of a failed saga.
    SagaStatus.FAILED: frozenset({SagaStatus.COMPENSATING}),
    SagaStatus.COMPLETED: frozenset(),
    SagaStatus.COMPENSATED: frozenset(),
    SagaStatus.CANCELLED: frozenset(),
}

_STEP_MOVES: dict[StepStatus, frozenset[StepStatus]] = {
    StepStatus.PENDING: frozenset({StepStatus.RUNNING, StepStatus.SKIPPED}),
    # running -> running is the next attempt of the same step.
    # running -> skipped: recorded as started, but the saga stopped before the action ran.
    StepStatus.RUNNING: frozenset(
        {
            StepStatus.RUNNING,
            StepStatus.SUCCEEDED,
            StepStatus.FAILED,
            StepStatus.IN_DOUBT,
            StepStatus.COMPENSATING,
            StepStatus.SKIPPED,
        }
    ),
    StepStatus.SUCCEEDED: frozenset({StepStatus.COMPENSATING}),
    StepStatus.FAILED: frozenset({StepStatus.COMPENSATING}),
    # in_doubt -> failed: an operator says the action did not happen (saga mark-step).
    StepStatus.IN_DOUBT: frozenset({StepStatus.COMPENSATING, StepStatus.FAILED}),
    # compensating -> compensating is the next attempt of the compensation.
    StepStatus.COMPENSATING: frozenset({StepStatus.COMPENSATING, StepStatus.COMPENSATED}),
    StepStatus.COMPENSATED: frozenset(),
    StepStatus.SKIPPED: frozenset(),
}


def check_saga_move(saga_id: str, old: SagaStatus, new: SagaStatus) -> None:
    """Raise ``IllegalTransitionError`` unless ``old -> new`` is allowed."""
    if old is not new and new not in _SAGA_MOVES[old]:
        raise IllegalTransitionError(f"saga {saga_id}: {old.value} -> {new.value} is not allowed")


def check_step_move(step: str, old: StepStatus, new: StepStatus) -> None:
    """Raise ``IllegalTransitionError`` unless ``old -> new`` is allowed."""
    if new not in _STEP_MOVES[old]:
        raise IllegalTransitionError(f"step {step!r}: {old.value} -> {new.value} is not allowed")
