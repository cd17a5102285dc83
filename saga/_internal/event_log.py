"""Every lifecycle event as a log record: the listener each coordinator installs.

Apart from :mod:`saga.logs` (formatters, the step filter, :func:`saga.logs.configure`),
which re-exports these names, so that running a saga loads only what makes records.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from saga._internal.lifecycle import SagaEvent

ENGINE = logging.getLogger("saga.engine")
# A library's loggers stay silent until the application configures logging: without a
# handler of their own, Python's last-resort handler would print WARNING and above.
logging.getLogger("saga").addHandler(logging.NullHandler())

_LEVELS: Mapping[str, int] = {
    # What an operator wants to see by default: outcomes, claims, operator actions, give-ups.
    "saga_completed": logging.INFO,
    "saga_compensated": logging.INFO,
    "saga_failed": logging.ERROR,
    "saga_cancelled": logging.INFO,
    "saga_compensating": logging.INFO,
    "saga_running": logging.INFO,  # a paused saga resumed
    # Paused: held for a person (an operator's pause, or a step's retries ran out).
    "saga_paused": logging.WARNING,
    "lease_claimed": logging.INFO,
    "lease_released": logging.INFO,
    "operator_action": logging.INFO,
    "step_reset": logging.INFO,
    "step_failed": logging.INFO,
    "step_in_doubt": logging.WARNING,
    # A retry after an error, a lost lease, a refused recovery: worth a look.
    "retry_scheduled": logging.WARNING,
    "lease_lost": logging.WARNING,
    "recovery_refused": logging.WARNING,
    # A compensation given its result as stored JSON: the result's type changed since.
    "result_mismatch": logging.WARNING,
    # A failed compensation leaves something not undone: an operator must act.
    "compensation_failed": logging.ERROR,
}
"""Each event's level; every other event (each attempt, each compensation) is DEBUG."""

SAGA_FIELDS = ("saga_id", "saga_short_id", "saga_name", "saga_key", "step", "attempt")
"""The attributes every record about a saga carries (None when not known)."""


def level_of(kind: str) -> int:
    """The level an event of ``kind`` is logged at."""
    return _LEVELS.get(kind, logging.DEBUG)


class LogListener:
    """Logs every lifecycle event on ``logger`` (default ``saga.engine``); installed on
    every coordinator unless it is made with ``log_events=False``. Inline: a record is
    cheap, and it keeps its place among the records a step logs itself."""

    inline = True

    def __init__(self, logger: logging.Logger = ENGINE) -> None:
        self.logger = logger

    def wants(self, kind: str) -> bool:
        """Whether an event of ``kind`` would be logged: no event is made for one that
        would not (what keeps this listener nearly free while logs are off)."""
        return self.logger.isEnabledFor(level_of(kind))

    def __call__(self, event: SagaEvent) -> None:
        level = level_of(event.kind)
        if not self.logger.isEnabledFor(level):
            return
        # Imported once a record is really made: with logs off (the default level) a
        # saga never loads the wording of events.
        from saga._internal.wording import describe_event, printable

        took = f" (took {event.duration:.3f}s)" if event.duration is not None else ""
        self.logger.log(
            level,
            "saga %s %s: %s%s",
            event.short_id,
            printable(event.saga_name),  # stored text, maybe a client's: never raw controls
            printable(describe_event(event)),
            took,
            extra=fields_of(event),
        )

    def __repr__(self) -> str:
        return f"LogListener({self.logger.name!r})"


def fields_of(event: SagaEvent) -> dict[str, Any]:
    """The ``extra`` attributes of a lifecycle record."""
    return {
        "saga_id": event.saga_id,
        "saga_short_id": event.short_id,
        "saga_name": event.saga_name,
        "saga_key": event.key,
        "step": event.step,
        "attempt": event.attempt,
        "epoch": event.epoch,
        "event": event.kind,
        "status": event.status.value,
        "duration": event.duration,
        "error_type": event.error_type,
    }
