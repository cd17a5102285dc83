"""The ``SagaFailed`` a saga's records say it ended with.

A compensation that fails for good ends the saga ``failed``; what is raised
names that compensation's step and carries its error.
"""

from __future__ import annotations

from saga.errors import RecordedError, SagaFailed
from saga.ports import SagaRecord
from saga.status import SagaStatus


def compensation_failed(
    record: SagaRecord, name: str, text: str, error: BaseException | None
) -> SagaFailed:
    """What to raise once step ``name``'s compensation failed for good (``text`` is what
    was recorded; ``error`` what it raised, if it raised anything)."""
    if error is None:  # its attempts were used up without an exception to show
        step = record.step(name)
        attempt = None if step is None else step.undo_attempt
        error = RecordedError(None, text, saga_id=record.id, step=name, attempt=attempt)
    return SagaFailed(
        record.id, SagaStatus.FAILED, failed_compensation=name, compensation_error=error
    )
