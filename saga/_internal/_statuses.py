"""The status enums alone: they import nothing of saga's.

Apart from :mod:`saga._internal.status` (which re-exports them and adds the allowed moves
between them, raising ``IllegalTransitionError``) so that :mod:`saga._internal.errors`
can name ``SagaStatus`` without importing the module that imports it back.
Import them from ``saga``.
"""

from __future__ import annotations

from enum import StrEnum


class SagaStatus(StrEnum):
    """Where a saga stands. The last five are terminal: no process carries them on.

    ``failed`` and ``paused`` wait for an operator (``paused``: held on purpose, by
    ``coord.pause`` or a step's ``on_exhausted="pause"``; ``coord.resume`` goes on).
    """

    RUNNING = "running"
    COMPENSATING = "compensating"
    COMPLETED = "completed"
    COMPENSATED = "compensated"
    FAILED = "failed"
    CANCELLED = "cancelled"
    PAUSED = "paused"

    @property
    def is_terminal(self) -> bool:
        return self not in (SagaStatus.RUNNING, SagaStatus.COMPENSATING)

    @property
    def is_finished(self) -> bool:
        """Finished for good: ``failed`` and ``paused`` are terminal but wait for an
        operator."""
        return self.is_terminal and self not in (SagaStatus.FAILED, SagaStatus.PAUSED)


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

MAY_HAVE_ACTED = frozenset(
    {
        StepStatus.SUCCEEDED,
        StepStatus.RUNNING,
        StepStatus.FAILED,
        StepStatus.IN_DOUBT,
        StepStatus.COMPENSATING,
    }
)
"""A compensatable step in one of these may have acted: an unwinding compensates it (a
failed or running transactional step excepted: its transaction never committed)."""
