"""Read-only views of sagas, as ``coord.get`` and ``coord.list`` return them."""

from __future__ import annotations

import dataclasses
from typing import Any

from saga.codec import decode
from saga.errors import CorruptRecordError
from saga.ports import SagaRecord, StepRecord
from saga.result_types import lenient_result
from saga.status import SagaStatus, StepKind, StepStatus


@dataclasses.dataclass(frozen=True, slots=True)
class StepView:
    """One step of the success stack, with its decoded result."""

    name: str
    seq: int
    status: StepStatus
    attempt: int
    result: Any
    error: str | None
    kind: StepKind
    transactional: bool
    compensation_attempt: int
    started_at: float | None
    finished_at: float | None
    input_digest: str | None
    output_digest: str | None
    action: str | None
    compensation: str | None
    args: Any = None
    """A context-manager step's recorded arguments (``{"args": [...], "kwargs": {...}}``
    as stored); None for a declarative step, which reads the saga's input."""
    result_error: str | None = None
    """Why ``result`` is the JSON as stored rather than its step's type (the type changed
    since it was recorded, or its validator raised); None when it reads as its type."""

    @property
    def duration(self) -> float | None:
        """Seconds from the step's (last) start to its end, when both are known."""
        if self.started_at is None or self.finished_at is None:
            return None
        return max(0.0, self.finished_at - self.started_at)


@dataclasses.dataclass(frozen=True, slots=True)
class SagaView:
    """A saga as stored: status, input, and its steps in execution order."""

    id: str
    name: str
    key: str | None
    kind: str
    status: SagaStatus
    input: Any
    error: str | None
    owner: str | None
    epoch: int
    lease_expires_at: float | None
    created_at: float | None
    updated_at: float | None
    cancel_requested: bool
    steps: tuple[StepView, ...]
    version: int | None = None
    """The definition version it started with (None: a context-manager saga)."""
    fingerprint: str | None = None
    """That definition's fingerprint (step names, order, dependencies, kinds)."""
    deadline: float | None = None
    """When the saga must stop by (database clock, epoch seconds), if it has a deadline."""

    @property
    def results(self) -> dict[str, Any]:
        """Results of the steps that succeeded, by step name."""
        return {s.name: s.result for s in self.steps if s.status is StepStatus.SUCCEEDED}

    def step(self, name: str) -> StepView:
        for step in self.steps:
            if step.name == name:
                return step
        raise KeyError(f"saga {self.id} has no step {name!r}")


def view_of(record: SagaRecord) -> SagaView:
    """Decode a stored record into a view (``CorruptRecordError`` on bad JSON)."""
    return SagaView(
        id=record.id,
        name=record.name,
        key=record.key,
        kind=record.kind,
        status=record.status,
        input=_decoded(record.id, "input", record.input),
        error=record.error,
        owner=record.owner,
        epoch=record.epoch,
        lease_expires_at=record.lease_expires_at,
        created_at=record.created_at,
        updated_at=record.updated_at,
        cancel_requested=record.cancel_requested,
        steps=tuple(_step_view(record, s) for s in record.steps),
        version=_version(record),
        fingerprint=record.fingerprint,
        deadline=record.deadline,
    )


def _version(record: SagaRecord) -> int | None:
    if record.kind != "declarative":
        return None
    try:
        return int(record.version) if record.version is not None else 1
    except ValueError:
        raise CorruptRecordError(record.id, f"unreadable version {record.version!r}") from None


def _step_view(record: SagaRecord, step: StepRecord) -> StepView:
    saga_id = record.id
    result = lenient_result(
        record, step, _decoded(saga_id, f"result of step {step.name!r}", step.result)
    )
    return StepView(
        name=step.name,
        seq=step.seq,
        status=step.status,
        attempt=step.attempt,
        result=result.value,
        error=step.error,
        kind=step.kind,
        transactional=step.transactional,
        compensation_attempt=step.undo_attempt,
        started_at=step.started_at,
        finished_at=step.finished_at,
        input_digest=step.input_digest,
        output_digest=step.output_digest,
        action=step.action_ref,
        compensation=step.compensation_ref,
        args=_decoded(saga_id, f"arguments of step {step.name!r}", step.args),
        result_error=None if result.error is None else str(result.error),
    )


def _decoded(saga_id: str, what: str, text: str | None) -> Any:
    try:
        return decode(text)
    except ValueError:
        raise CorruptRecordError(saga_id, f"{what} is not valid JSON") from None
