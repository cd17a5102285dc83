"""Read-only views of sagas, as ``coord.get`` and ``coord.list`` return them."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from saga._internal.codec import decode
from saga._internal.errors import CorruptRecordError
from saga._internal.failure import compensation_step
from saga._internal.ports import EventRecord, SagaRecord, StepRecord
from saga._internal.result_types import lenient_compensation_result, lenient_result
from saga._internal.status import SagaStatus, StepKind, StepStatus


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
    compensation_result: Any = None
    """What the step's compensation returned (a refund id, the amount given back), typed
    as its compensation declares (``result_type=`` or the return annotation), as its
    ``compensation_done`` event keeps it; None if it returned nothing or was not run."""
    compensation_result_error: str | None = None
    """Why ``compensation_result`` is the JSON as stored rather than its type, or why it
    was not kept (not JSON, over the size limit); None when there is nothing to say."""

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
    """The error a person must act on: for a saga ``failed`` because a compensation
    failed for good, that compensation's error; else the error that made it unwind
    or fail (``forward_error``), if any."""
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
    forward_error: str | None = None
    """The error that made the saga unwind (or fail past its pivot), kept beside
    ``error`` when a compensation's error took its place; equal to ``error`` otherwise."""

    @property
    def results(self) -> dict[str, Any]:
        """Results of the steps that succeeded, by step name."""
        return {s.name: s.result for s in self.steps if s.status is StepStatus.SUCCEEDED}

    def step(self, name: str) -> StepView:
        for step in self.steps:
            if step.name == name:
                return step
        raise KeyError(f"saga {self.id} has no step {name!r}")


def view_of(record: SagaRecord, events: Sequence[EventRecord] = ()) -> SagaView:
    """Decode a stored record into a view (``CorruptRecordError`` on bad JSON); what
    compensations returned is read from its ``events`` (none given: not shown)."""
    undone = compensation_results(events)
    return SagaView(
        id=record.id,
        name=record.name,
        key=record.key,
        kind=record.kind,
        status=record.status,
        input=_decoded(record.id, record.input, "input"),
        error=headline_error(record),
        owner=record.owner,
        epoch=record.epoch,
        lease_expires_at=record.lease_expires_at,
        created_at=record.created_at,
        updated_at=record.updated_at,
        cancel_requested=record.cancel_requested,
        steps=tuple(_step_view(record, s, undone.get(s.name)) for s in record.steps),
        version=_version(record),
        fingerprint=record.fingerprint,
        deadline=record.deadline,
        forward_error=record.error,
    )


def headline_error(record: SagaRecord) -> str | None:
    """The saga's error as an operator reads it first: the compensation that failed for
    good is what must be acted on, so its error (on its step's row) comes before the
    forward error that started the unwinding (the saga row's, which stays as written).
    A saga that completed after an operator's retry has none left to act on."""
    if record.status is SagaStatus.COMPLETED:
        return None
    undo = compensation_step(record)
    return record.error if undo is None else undo.error


def _version(record: SagaRecord) -> int | None:
    if record.kind != "declarative":
        return None
    try:
        return int(record.version) if record.version is not None else 1
    except ValueError:
        raise CorruptRecordError(record.id, f"unreadable version {record.version!r}") from None


def compensation_results(events: Sequence[EventRecord]) -> dict[str, Mapping[str, Any]]:
    """By step name, the detail of its ``compensation_done`` event, when it says what the
    compensation returned (``result``) or why that was not kept (``result_not_kept``)."""
    found: dict[str, Mapping[str, Any]] = {}
    for event in events:
        detail = event.detail
        if event.kind != "compensation_done" or event.step is None or not detail:
            continue
        if "result" in detail or "result_not_kept" in detail:
            found[event.step] = detail
    return found


def needs_events(record: SagaRecord) -> bool:
    """Whether the view of ``record`` reads its events: only a compensated step's
    compensation can have returned something (its event keeps it)."""
    return any(step.status is StepStatus.COMPENSATED for step in record.steps)


def _step_view(
    record: SagaRecord, step: StepRecord, undone: Mapping[str, Any] | None = None
) -> StepView:
    saga_id = record.id
    result = lenient_result(record, step, _decoded(saga_id, step.result, "result", step.name))
    returned = _compensation_returned(record, step, undone)
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
        args=_decoded(saga_id, step.args, "arguments", step.name),
        result_error=None if result.error is None else str(result.error),
        compensation_result=returned.value,
        compensation_result_error=returned.why,
    )


class _Returned(NamedTuple):
    value: Any = None
    why: str | None = None


def _compensation_returned(
    record: SagaRecord, step: StepRecord, undone: Mapping[str, Any] | None
) -> _Returned:
    """What ``step``'s compensation returned, typed; a type that no longer reads it gives
    the JSON as stored with the reason (a view never fails on it, as with results)."""
    if undone is None:
        return _Returned()
    if "result" not in undone:
        return _Returned(None, str(undone.get("result_not_kept")))
    read = lenient_compensation_result(record, step, undone["result"])
    return _Returned(read.value, None if read.error is None else str(read.error))


def _decoded(saga_id: str, text: str | None, what: str, step: str | None = None) -> Any:
    """``text`` decoded, or ``CorruptRecordError`` naming ``what`` (of ``step``). The name
    is only put together for the error: a view of ten thousand steps decodes 20,000."""
    try:
        return decode(text)
    except ValueError:
        whose = what if step is None else f"{what} of step {step!r}"
        raise CorruptRecordError(saga_id, f"{whose} is not valid JSON") from None
