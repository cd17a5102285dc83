"""What a recovery run did, saga by saga."""

from __future__ import annotations

import dataclasses

from saga._internal.status import SagaStatus

LOST = "lost to another process"
"""How a saga that another process claimed mid-recovery is reported."""


@dataclasses.dataclass(frozen=True, slots=True)
class RecoveryOutcome:
    """One claimed saga: how it ended, or why it could not be finished.

    ``lost``: another process claimed the saga while this one was finishing it
    (this one stalled past its lease). That process finishes it; this one
    wrote nothing more for it, no event and no release. ``status`` and
    ``error`` are then None, and the outcome is ok: nothing failed.
    ``handed_back``: this process was draining (``Coordinator.drain()``) and gave
    the saga back at a step boundary, still ``status``; ok, nothing failed. Or, with
    ``why`` (``waiting``), the saga's compensation failed again and was handed back
    until its next attempt is due, which a worker makes then; ok too.
    """

    saga_id: str
    name: str
    status: SagaStatus | None
    error: str | None
    lost: bool = False
    handed_back: bool = False
    why: str | None = None

    @property
    def waiting(self) -> bool:
        """Handed back to wait for a compensation's next attempt (not a stop)."""
        return self.handed_back and self.why is not None

    @property
    def ok(self) -> bool:
        return self.error is None and self.status is not SagaStatus.FAILED

    @classmethod
    def lost_to_another(cls, saga_id: str, name: str) -> RecoveryOutcome:
        """The outcome of a saga another process claimed while this one was finishing it."""
        return cls(saga_id, name, None, None, lost=True)

    @classmethod
    def given_back(
        cls, saga_id: str, name: str, status: SagaStatus, why: str | None = None
    ) -> RecoveryOutcome:
        """The outcome of a saga this process handed back while stopping, or (``why``)
        for its compensation's next attempt."""
        return cls(saga_id, name, status, None, handed_back=True, why=why)


@dataclasses.dataclass
class RecoveryReport:
    """Every saga a recovery run claimed, in the order it handled them."""

    outcomes: list[RecoveryOutcome] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(outcome.ok for outcome in self.outcomes)

    def count(self, status: SagaStatus) -> int:
        return sum(1 for outcome in self.outcomes if outcome.status is status)

    @property
    def errors(self) -> list[RecoveryOutcome]:
        return [outcome for outcome in self.outcomes if outcome.error is not None]

    @property
    def lost(self) -> list[RecoveryOutcome]:
        """The sagas another process claimed while this run was finishing them."""
        return [outcome for outcome in self.outcomes if outcome.lost]
