"""What a recovery run did, saga by saga."""

from __future__ import annotations

import dataclasses

from saga.status import SagaStatus


@dataclasses.dataclass(frozen=True, slots=True)
class RecoveryOutcome:
    """One claimed saga: how it ended, or why it could not be finished."""

    saga_id: str
    name: str
    status: SagaStatus | None
    error: str | None

    @property
    def ok(self) -> bool:
        return self.error is None and self.status is not SagaStatus.FAILED


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
