"""The flows one coordinator runs, bound to its settings.

Each method returns a flow (a generator of effects); a driver runs it:
``driver.run(flows.forward(saga, record))`` in threads,
``await driver.run(...)`` on an event loop.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from saga.definition import Saga
from saga.engine import unwind
from saga.engine.attempts import attempts
from saga.engine.decisions import Cursor, RunStep
from saga.engine.effects import Action, Flow, write
from saga.engine.forward import Forward
from saga.errors import SagaFailed
from saga.policy import RetryPolicy
from saga.ports import Event, SagaRecord, StepWrite
from saga.refs import Resolver
from saga.status import SagaStatus


@dataclasses.dataclass(frozen=True)
class Flows:
    """The entry points of the engine for one coordinator."""

    payload_limit: int
    resolver: Resolver

    def forward(
        self, saga: Saga, record: SagaRecord, started: Sequence[RunStep] = ()
    ) -> Flow[SagaRecord]:
        """Run a declarative saga's remaining steps; unwind and raise ``SagaFailed`` on
        failure. ``started`` are steps whose start is already durable (a new saga's first
        steps are recorded with the saga itself)."""
        return Forward(saga, record, self.payload_limit, self.resolver).run(list(started))

    def write(
        self,
        record: SagaRecord,
        writes: Sequence[StepWrite] = (),
        events: Sequence[Event] = (),
        status: SagaStatus | None = None,
        error: str | None = None,
    ) -> Flow[SagaRecord]:
        """Commit changes to ``record`` (fenced); the record as it then stands."""
        return write(record, writes, events, status, error)

    def attempts(
        self,
        cursor: Cursor,
        name: str,
        attempt: int,
        policy: RetryPolicy,
        timeout: float | None,
        action: Action,
        data: Any = None,
        transactional: bool = False,
    ) -> Flow[Any]:
        """A step's attempts (see :func:`saga.engine.attempts.attempts`)."""
        return attempts(
            cursor, name, attempt, policy, timeout, action, data, transactional, self.payload_limit
        )

    def fail(
        self, record: SagaRecord, name: str, error: BaseException | str, saga: Saga | None
    ) -> Flow[SagaFailed]:
        """Record step ``name``'s failure, unwind if allowed; what to raise."""
        return unwind.fail(self.resolver, record, name, error, saga)

    def cancelled(
        self, record: SagaRecord, saga: Saga | None, not_run: Sequence[str] = ()
    ) -> Flow[SagaFailed]:
        """Stop as the store asked and unwind; what to raise."""
        return unwind.cancelled(self.resolver, record, saga, list(not_run))

    def unwound(self, record: SagaRecord, saga: Saga | None, name: str | None) -> Flow[SagaFailed]:
        """Unwind a saga already turned ``compensating``; what to raise."""
        return unwind.unwound(self.resolver, record, saga, name)

    def unwind(
        self, record: SagaRecord, saga: Saga | None, fresh: bool = False
    ) -> Flow[SagaRecord]:
        """Compensate everything that may have acted, then finish; raises ``SagaFailed``
        when a compensation gives up."""
        return unwind.unwind(self.resolver, record, saga, fresh)

    def check_compensations(self, record: SagaRecord, saga: Saga | None) -> None:
        """Refuse (``UnsafeReferenceError``) before anything changes if a compensation
        still to run cannot be resolved safely."""
        unwind.check_compensations(self.resolver, record, saga)
