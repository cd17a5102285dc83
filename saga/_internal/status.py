"""Statuses of sagas and steps, and the only transitions between them.

The enums are defined in :mod:`saga._internal._statuses`, which imports nothing, so that
:mod:`saga._internal.errors` can name them; this module imports the errors it raises.
"""

from __future__ import annotations

from collections.abc import Iterable

from saga._internal._statuses import MAY_HAVE_ACTED, PIVOT_ACTED, SagaStatus, StepKind, StepStatus
from saga._internal.errors import ConfigurationError, IllegalTransitionError

__all__ = [
    "MAY_HAVE_ACTED",
    "PIVOT_ACTED",
    "SagaStatus",
    "StepKind",
    "StepStatus",
    "check_saga_move",
    "check_step_move",
    "parse_status",
    "statuses_of",
]


_SAGA_MOVES: dict[SagaStatus, frozenset[SagaStatus]] = {
    SagaStatus.RUNNING: frozenset(
        {SagaStatus.COMPLETED, SagaStatus.COMPENSATING, SagaStatus.FAILED, SagaStatus.PAUSED}
    ),
    SagaStatus.COMPENSATING: frozenset(
        {SagaStatus.COMPENSATED, SagaStatus.CANCELLED, SagaStatus.FAILED}
    ),
    # An operator may retry the compensation of a failed saga, or run forward again a
    # saga that failed past its pivot (saga retry).
    SagaStatus.FAILED: frozenset({SagaStatus.COMPENSATING, SagaStatus.RUNNING}),
    # Paused: an operator resumes it (running) or unwinds it (compensating).
    SagaStatus.PAUSED: frozenset({SagaStatus.RUNNING, SagaStatus.COMPENSATING}),
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
    # succeeded -> running / pending: an operator runs the saga again from this step, or
    # from one before it (saga retry --from; only a step declared idempotent).
    StepStatus.SUCCEEDED: frozenset(
        {StepStatus.COMPENSATING, StepStatus.RUNNING, StepStatus.PENDING}
    ),
    # failed / in_doubt -> running: an operator runs the step again (saga retry), or a
    # step parked by a pause (its retries ran out) runs again when the saga is resumed;
    # -> pending: it runs again after the step a retry --from starts with;
    # -> succeeded: an operator did it by hand and records its result (saga skip).
    StepStatus.FAILED: frozenset(
        {StepStatus.COMPENSATING, StepStatus.RUNNING, StepStatus.PENDING, StepStatus.SUCCEEDED}
    ),
    # in_doubt -> failed: an operator says the action did not happen (saga mark-step).
    StepStatus.IN_DOUBT: frozenset(
        {
            StepStatus.COMPENSATING,
            StepStatus.FAILED,
            StepStatus.RUNNING,
            StepStatus.PENDING,
            StepStatus.SUCCEEDED,
        }
    ),
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


def statuses_of(
    status: SagaStatus | str | Iterable[SagaStatus | str] | None,
) -> tuple[SagaStatus, ...]:
    """The statuses a ``list(status=...)`` argument names (one, several or none)."""
    if status is None:
        return ()
    if isinstance(status, SagaStatus | str):
        status = [status]
    return tuple(parse_status(s) for s in status)


def parse_status(status: SagaStatus | str) -> SagaStatus:
    """A status from its name, or ``ConfigurationError`` listing the valid ones."""
    try:
        return SagaStatus(status)
    except ValueError:
        known = ", ".join(s.value for s in SagaStatus)
        raise ConfigurationError(f"unknown status {status!r}; use one of: {known}") from None
