"""Operator actions on one saga: compensate, resume, cancel, retry-compensation
and mark-compensated. Each is recorded as an event and returns where the saga
now stands.
"""

from __future__ import annotations

import dataclasses

from saga import engine
from saga.admin.facts import past_pivot
from saga.admin.inputs import definition_of, get_saga, parse_saga_id
from saga.coordinator import Coordinator
from saga.definition import Saga
from saga.errors import ConfigurationError, OperationRefusedError, UnknownSagaError
from saga.operations import operator_detail
from saga.ports import Event, SagaRecord, StepRecord, StepWrite
from saga.status import SagaStatus, StepStatus
from saga.views import SagaView


def compensate(coord: Coordinator, saga_id: str) -> SagaView:
    """Unwind a saga now (refused past its pivot and once it finished)."""
    return coord.compensate(parse_saga_id(saga_id))


def resume(coord: Coordinator, saga_id: str) -> SagaView:
    """Carry a running declarative saga forward now (its definition must be known: --app)."""
    return coord.resume(parse_saga_id(saga_id))


def cancel(coord: Coordinator, saga_id: str) -> SagaView:
    """Ask a running saga to stop at its next step boundary and unwind."""
    return coord.cancel(parse_saga_id(saga_id))


def retry_compensation(coord: Coordinator, saga_id: str) -> SagaView:
    """Run the compensations of a ``failed`` saga again, with a fresh attempt budget."""
    saga_id = parse_saga_id(saga_id)
    _require_failed(get_saga(coord, saga_id), "retry-compensation")
    return coord.compensate(saga_id, action="retry-compensation")


def mark_compensated(coord: Coordinator, saga_id: str, step: str, reason: str) -> SagaView:
    """Record that an operator undid ``step`` by hand, then unwind the rest.

    For a saga that is ``failed`` because ``step``'s compensation kept
    failing: the operator fixed things outside saga and says so here. The
    step is recorded as compensated (with who, where and why), and the
    compensations of the steps below it run as ``retry-compensation`` would.
    """
    saga_id = parse_saga_id(saga_id)
    if not reason.strip():
        raise ConfigurationError("--reason must say what was done by hand; it is recorded")
    view = get_saga(coord, saga_id)
    _require_failed(view, "mark-compensated")
    definition = definition_of(view)
    if view.kind == "declarative" and definition is None:
        raise UnknownSagaError(
            f"no definition of saga {view.name!r} in this process; pass --app MODULE"
        )
    record = coord.store.load(saga_id)
    assert record is not None
    _record_hand_undo(coord, saga_id, _undo_candidate(record, step, definition), reason)
    return coord.compensate(saga_id, action="continue after mark-compensated")


def _record_hand_undo(coord: Coordinator, saga_id: str, marked: StepRecord, reason: str) -> None:
    """Record ``marked`` as compensated by this operator, under a claim of the saga."""
    claim = Event("lease_claimed", detail={"owner": coord.owner, "why": "mark-compensated"})
    record = coord.store.claim(saga_id, coord.owner, coord.lease_ttl, claim)
    who = operator_detail()
    detail = {"action": "mark-compensated", "step": marked.name, "reason": reason, **who}
    marked_by = {"marked_by": f"{who['by']}@{who['host']}", "reason": reason}
    events = [
        Event("operator_action", detail=detail),
        Event("compensation_done", marked.name, marked.undo_attempt, marked_by),
    ]
    compensated = dataclasses.replace(marked, status=StepStatus.COMPENSATED)
    write = StepWrite(compensated)  # its finish time stays its action's, as engine.undone keeps it
    # Released in the same transaction: the unwind that follows claims the saga
    # afresh, and a failed saga is never taken by a recoverer in between.
    change = dataclasses.replace(engine.commit(record, [write], events), release=True)
    coord.store.commit(change, coord.lease_ttl)


def _require_failed(view: SagaView, action: str) -> None:
    if view.status is not SagaStatus.FAILED:
        raise OperationRefusedError(
            view.id,
            f"saga {view.id} is {view.status.value}; {action} is the way out of 'failed' only",
        )
    if past_pivot(view):
        raise OperationRefusedError(
            view.id,
            f"saga {view.id} failed after its pivot step, so it cannot be compensated; "
            "fix the failing step's cause and finish it by hand",
        )


def _undo_candidate(record: SagaRecord, step: str, definition: Saga | None) -> StepRecord:
    """The recorded step ``step`` if it is still waiting to be compensated."""
    waiting = {s.name: s for s in engine.undo_stack(record) if _has_undo(s, definition)}
    if step in waiting:
        return waiting[step]
    names = ", ".join(waiting) or "none"
    if record.step(step) is None:
        raise UnknownSagaError(f"saga {record.id} has no step {step!r}; steps to undo: {names}")
    raise OperationRefusedError(
        record.id, f"step {step!r} of saga {record.id} has nothing to undo; steps to undo: {names}"
    )


def _has_undo(step: StepRecord, definition: Saga | None) -> bool:
    if definition is None:
        return step.compensation_ref is not None
    declared = definition.by_name(step.name)
    return declared is not None and declared.undo is not None
