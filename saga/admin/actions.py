"""Operator actions on one saga: compensate, resume, pause, cancel, retry, skip,
retry-compensation and mark-compensated. Each is recorded as an event and returns where the saga
now stands.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
from typing import Any

from saga._internal import engine
from saga._internal.coordinator import Coordinator
from saga._internal.definition import Saga
from saga._internal.errors import ConfigurationError, OperationRefusedError, UnknownSagaError
from saga._internal.operator_identity import operator_detail
from saga._internal.ports import ClaimGuard, Event, SagaRecord, StepRecord, StepWrite
from saga._internal.status import SagaStatus, StepStatus, check_step_move
from saga._internal.views import SagaView
from saga.admin.facts import past_pivot
from saga.admin.inputs import SagaRef, definition_of, get_saga, no_definition, saga_id_of


def compensate(coord: Coordinator, saga_id: SagaRef) -> SagaView:
    """Unwind a saga now (refused past its pivot and once it finished)."""
    return coord.compensate(saga_id_of(coord, saga_id))


def resume(coord: Coordinator, saga_id: SagaRef) -> SagaView:
    """Carry a stuck or paused declarative saga forward now (its definition must be
    known: --app)."""
    return coord.resume(saga_id_of(coord, saga_id))


def pause(coord: Coordinator, saga_id: SagaRef) -> SagaView:
    """Hold a running declarative saga at its next step boundary, nothing compensated
    (a live owner hands it back there; an idle one is handed back at once)."""
    return coord.pause(saga_id_of(coord, saga_id))


def cancel(coord: Coordinator, saga_id: SagaRef) -> SagaView:
    """Ask a running saga to stop at its next step boundary and unwind."""
    return coord.cancel(saga_id_of(coord, saga_id))


def retry(coord: Coordinator, saga_id: SagaRef, from_step: str | None = None) -> SagaView:
    """Run forward again a saga that failed past its pivot, once its cause is fixed
    (the failed step with a fresh attempt budget, then the rest; needs --app);
    ``from_step``: from that step on (each succeeded step after it idempotent)."""
    return coord.retry(saga_id_of(coord, saga_id), from_step)


def skip(coord: Coordinator, saga_id: SagaRef, step: str, result: str, reason: str) -> SagaView:
    """Record that an operator did ``step`` of a saga failed past its pivot by hand, its
    result the JSON text ``result`` ("null" for none), then carry the saga forward."""
    value = parse_result(result)
    return coord.skip(saga_id_of(coord, saga_id), step=step, result=value, reason=reason)


def parse_result(result: str) -> Any:
    """A step's result as an operator typed it, JSON text ("null" for none)."""
    try:
        return json.loads(result)
    except ValueError as error:
        raise ConfigurationError(f"--result must be JSON (null for none): {error}") from None


def retry_compensation(coord: Coordinator, saga_id: SagaRef) -> SagaView:
    """Run the compensations of a ``failed`` saga again, with a fresh attempt budget."""
    saga_id = saga_id_of(coord, saga_id)
    _require_failed(get_saga(coord, saga_id), "retry-compensation")
    return coord.compensate(saga_id, action="retry-compensation")


def mark_compensated(coord: Coordinator, saga_id: SagaRef, step: str, reason: str) -> SagaView:
    """Record that an operator undid ``step`` by hand, then unwind the rest.

    For a saga that is ``failed`` because ``step``'s compensation kept
    failing: the operator fixed things outside saga and says so here. The
    step is recorded as compensated (with who, where and why), and the
    compensations of the steps below it run as ``retry-compensation`` would.
    Only that step, the top of what is left to undo, can be marked; any other
    is refused (naming it) before anything is written.
    """
    saga_id = saga_id_of(coord, saga_id)
    if not reason.strip():
        raise ConfigurationError("--reason must say what was done by hand; it is recorded")
    view = get_saga(coord, saga_id)
    _require_failed(view, "mark-compensated")
    definition = definition_of(view)
    if view.kind == "declarative" and definition is None:
        raise UnknownSagaError(no_definition(coord, view))
    record = coord.store.load(saga_id)
    assert record is not None
    _record_hand_undo(coord, record, _undo_candidate(record, step, definition), reason)
    return coord.compensate(saga_id, action="continue after mark-compensated")


def mark_step(coord: Coordinator, saga_id: SagaRef, step: str, reason: str) -> SagaView:
    """Record that step ``step``, given up ``in_doubt``, did not happen (the operator
    checked the system it calls): it becomes ``failed``, so the saga may be unwound.

    Only for a ``failed`` saga and a step whose outcome was never learnt. Nothing is
    compensated here: ``retry-compensation`` does that next, and its refusals apply.
    """
    saga_id = saga_id_of(coord, saga_id)
    if not reason.strip():
        raise ConfigurationError("--reason must say how you know; it is recorded")
    record = coord.store.load(saga_id)
    if record is None:
        raise UnknownSagaError(f"no saga with id {saga_id!r}")
    marked = _in_doubt(record, step)
    claim = Event("lease_claimed", detail={"why": "mark-step"})
    guard = ClaimGuard(frozenset({SagaStatus.FAILED}), record.epoch)
    record = coord.claim_guarded(saga_id, claim, guard, lambda fresh: _in_doubt(fresh, step))
    who = operator_detail()
    detail = {"action": "mark-step", "step": step, "outcome": "did not happen"}
    marked_by = {"marked_by": f"{who['by']}@{who['host']}", "reason": reason}
    events = [
        Event("operator_action", detail={**detail, "reason": reason, **who}),
        Event("step_failed", step, marked.attempt, {"error": marked.error, **marked_by}),
    ]
    check_step_move(step, marked.status, StepStatus.FAILED)
    write = StepWrite(dataclasses.replace(marked, status=StepStatus.FAILED))
    change = dataclasses.replace(engine.commit(record, [write], events), release=True)
    coord.store.commit(change)
    return coord.get(saga_id)


def _in_doubt(record: SagaRecord, step: str) -> StepRecord:
    """The step ``step`` of a failed saga, if its outcome is unknown; refuse otherwise."""
    if record.status is not SagaStatus.FAILED:
        raise OperationRefusedError(
            record.id, f"saga {record.id} is {record.status.value}; mark-step is for failed sagas"
        )
    found = record.step(step)
    doubtful = ", ".join(s.name for s in record.steps if s.status is StepStatus.IN_DOUBT)
    if found is None:
        raise UnknownSagaError(
            f"saga {record.id} has no step {step!r}; in doubt: {doubtful or 'none'}"
        )
    if found.status is not StepStatus.IN_DOUBT:
        raise OperationRefusedError(
            record.id,
            f"step {step!r} of saga {record.id} is {found.status.value}, not in doubt; "
            f"in doubt: {doubtful or 'none'}",
        )
    return found


def _record_hand_undo(
    coord: Coordinator, read: SagaRecord, marked: StepRecord, reason: str
) -> None:
    """Record ``marked`` as compensated by this operator, under a claim of the saga
    that holds only if nobody claimed it since it was read."""
    claim = Event("lease_claimed", detail={"owner": coord.owner, "why": "mark-compensated"})
    guard = ClaimGuard(frozenset({SagaStatus.FAILED}), read.epoch, before_pivot=True)
    record = coord.claim_guarded(read.id, claim, guard, lambda _: None)
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
    coord.store.commit(change)


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
    """The recorded step ``step`` if it is the next to be compensated: the top of what
    is left to undo, whose compensation failed for good."""
    waiting = {s.name: s for s in engine.undo_stack(record) if _has_undo(s, definition)}
    top = next(iter(waiting.values()), None)  # undo_stack is newest first
    if top is not None and top.name == step:
        return top
    names = ", ".join(waiting) or "none"
    if record.step(step) is None:
        raise UnknownSagaError(f"saga {record.id} has no step {step!r}; steps to undo: {names}")
    if top is not None and step in waiting:
        # Undoing out of order would record a stack that was never unwound newest first.
        raise OperationRefusedError(
            record.id,
            f"step {step!r} of saga {record.id} is not next to undo: step {top.name!r}, "
            f"whose compensation failed, comes first (retry-compensation, or "
            f"mark-compensated --step {shlex.quote(top.name)} once you undid it by hand)",
        )
    raise OperationRefusedError(
        record.id, f"step {step!r} of saga {record.id} has nothing to undo; steps to undo: {names}"
    )


def _has_undo(step: StepRecord, definition: Saga | None) -> bool:
    if definition is None:
        return step.compensation_ref is not None
    declared = definition.by_name(step.name)
    return declared is not None and declared.undo is not None
