"""A compensation waiting for its next attempt, as the caller and the operator are told
it: the saga is ``compensating``, nothing failed for good, and a worker makes the next
attempt when it is due. ``saga compensate`` (and every verb that drives a compensation),
``saga recover``, ``saga worker`` and the web console say this instead of an error."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

from saga._internal.coordinator import Coordinator
from saga._internal.errors import SagaHandedBack
from saga._internal.status import SagaStatus
from saga._internal.wording import iso_time, next_attempt_at
from saga.admin.inputs import get_saga
from saga.admin.reads import retry_waits


@dataclasses.dataclass(frozen=True, slots=True)
class Waiting:
    """Step ``step``'s compensation failed its attempt ``attempt`` (of ``max_attempts``,
    None: unknown or no limit) with ``error``; its next attempt is due at
    ``next_attempt_at`` (database clock; None when not recorded)."""

    saga_id: str
    step: str
    attempt: int | None
    max_attempts: int | None
    error: str | None
    next_attempt_at: float | None

    @property
    def text(self) -> str:
        """``saga X is compensating: attempt 4 of 20 of the compensation of step 'charge'
        failed (E); next attempt at 12:03:05 UTC, a worker retries it``."""
        of = "" if self.max_attempts is None else f" of {self.max_attempts}"
        due = "later" if self.next_attempt_at is None else f"at {clock(self.next_attempt_at)}"
        return (
            f"saga {self.saga_id} is compensating: attempt {self.attempt}{of} of the "
            f"compensation of step {self.step!r} failed ({self.error}); next attempt {due}, "
            "a worker retries it"
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "attempt": self.attempt,
            "max_attempts": self.max_attempts,
            "error": self.error,
            "next_attempt_at": iso_time(self.next_attempt_at),
            "text": self.text,
        }


def clock(seconds: float) -> str:
    """``12:03:05 UTC``: the time of day is what an operator waiting minutes needs."""
    return datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC).strftime("%H:%M:%S UTC")


def waiting(coord: Coordinator, saga_id: str) -> Waiting | None:
    """What saga ``saga_id``'s compensation waits for, read from its history (as
    ``saga show`` reads it); None if the saga is not waiting for a compensation's retry."""
    view = get_saga(coord, saga_id)
    if view.status is not SagaStatus.COMPENSATING:
        return None
    for name, wait in retry_waits(view, coord.store.events(view.id)).items():
        event = wait.event
        if event.kind != "compensation_attempt_failed":
            continue
        detail = event.detail or {}
        most = detail.get("max_attempts")
        error = detail.get("error")
        return Waiting(
            view.id,
            name,
            event.attempt,
            most if isinstance(most, int) else None,
            error if isinstance(error, str) else None,
            next_attempt_at(event),
        )
    return None


def waiting_after(coord: Coordinator, handed: SagaHandedBack) -> Waiting:
    """What a caller tells of ``handed`` (a compensation waiting for its next attempt):
    read from the store, where its next attempt time is the database's; from the
    exception itself if the store says no more (another process took the saga since)."""
    found = waiting(coord, handed.saga_id)
    if found is not None:
        return found
    return Waiting(
        handed.saga_id, handed.step or "?", handed.attempt, handed.max_attempts, handed.error, None
    )
