"""Lifecycle events: what a listener is told, and the words that name them.

One :class:`SagaEvent` per event a saga's history holds, told once the store has
committed it (see :mod:`saga._internal.listening` for who is told and how), and the kinds
that begin and end an attempt, a compensation or a saga, from which its
``duration`` is measured.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from saga._internal.status import SagaStatus

Listener = Callable[["SagaEvent"], Any]
"""A callable taking a :class:`SagaEvent`; a coroutine function is awaited."""

ATTEMPT_ENDS = {
    "step_succeeded": "step",
    "attempt_failed": "step",
    "step_failed": "step",
    "step_in_doubt": "step",
    "compensation_done": "undo",
    "compensation_failed": "undo",
    "compensation_attempt_failed": "undo",
}
"""The events that end an attempt, of a step (``"step"``) or of its compensation
(``"undo"``): their ``duration`` runs from the matching one of :data:`ATTEMPT_STARTS`."""
ATTEMPT_STARTS = {"step_started": "step", "compensation_started": "undo"}
SAGA_ENDS = frozenset(
    f"saga_{s.value}"
    for s in (
        SagaStatus.COMPLETED,
        SagaStatus.COMPENSATED,
        SagaStatus.FAILED,
        SagaStatus.CANCELLED,
    )
)
"""The events that end a saga."""

HOOKS = ("wants", "step_scope enter", "step_scope exit", "event", "trace_context", "discard")
"""The calls into a listener whose errors are counted apart (``Listeners.failures``)."""


class SagaEvent(NamedTuple):
    """One lifecycle event of one saga, as a listener is told it.

    ``kind`` is the history's name for it (``saga_started``, ``step_started``,
    ``attempt_failed``, ``compensation_done``, ``lease_claimed``,
    ``operator_action``...) or ``retry_scheduled`` / ``lease_lost``.
    ``status`` is the saga's status once the event was recorded; ``duration``
    (seconds, measured by this process) is how long the attempt, compensation
    or saga that the event ends took, when this process saw it start;
    ``delay`` is a scheduled retry's wait. ``error_type`` and ``error_message``
    describe the failure the event records, if any. A named tuple: cheap to
    make, as one is made for every event.
    """

    kind: str
    saga_id: str
    saga_name: str
    key: str | None
    status: SagaStatus
    epoch: int
    step: str | None = None
    attempt: int | None = None
    at: float = 0.0
    duration: float | None = None
    delay: float | None = None
    error_type: str | None = None
    error_message: str | None = None
    detail: dict[str, Any] | None = None
    durable: bool = True
    trace_context: str | None = None

    @property
    def short_id(self) -> str:
        """The first 8 characters of the saga id: what a log line shows."""
        return self.saga_id[:8]


def error_parts(text: object) -> tuple[str | None, str | None]:
    """("TypeName", "message") from a recorded error line ``"TypeName: message"``."""
    if not isinstance(text, str) or not text:
        return None, None
    kind, sep, message = text.partition(": ")
    if not sep or not kind.replace(".", "").replace("_", "").isalnum():
        return None, text
    return kind, message
