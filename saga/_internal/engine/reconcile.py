"""Asking a step's reconcile function about an attempt in doubt, before recovery
re-runs or compensates it (:mod:`saga._internal.reconciled` says what each answer means).

An attempt is in doubt when its step is recorded ``running`` in a saga another process
is now carrying on: that process died inside the action, and nothing says whether it
acted. Only steps that declare a reconcile function are asked; the others go on as
before (forward: run again; unwinding: compensated).
"""

from __future__ import annotations

import dataclasses

from saga._internal.codec import decode, encode_result
from saga._internal.definition import Saga, StepFn
from saga._internal.engine import records
from saga._internal.engine.attempts import context_for
from saga._internal.engine.effects import Call, Flow, write
from saga._internal.engine.targets import Declared
from saga._internal.errors import INFRASTRUCTURE_ERRORS, PayloadError
from saga._internal.ports import Event, SagaRecord, StepRecord, StepWrite
from saga._internal.reconciled import Reconciled
from saga._internal.status import StepStatus, check_step_move


class NotDone(Exception):  # noqa: N818 - an answer, recorded as the step's failure
    """The participant said the attempt did not happen: the step failed, not in doubt."""


def in_doubt(saga: Saga, record: SagaRecord) -> list[StepRecord]:
    """The steps recorded ``running`` whose declaration can be asked."""
    return [
        step
        for step in record.steps
        if step.status is StepStatus.RUNNING and _reconciler(saga, step.name) is not None
    ]


def ask(saga: Saga, record: SagaRecord, step: StepRecord, payload_limit: int) -> Flow[Reconciled]:
    """Call step ``step``'s reconcile function with the context of its attempt in doubt;
    an error, or anything but a ``Reconciled``, is an unknown outcome."""
    declared = saga.by_name(step.name)
    assert declared is not None
    assert declared.reconciler is not None
    target = Declared(saga.name, saga.version, step.name, "reconcile")
    context = context_for(record, step.name, step.attempt, decode(record.input))
    try:
        answer = yield Call(target, context, declared.timeout)
    except INFRASTRUCTURE_ERRORS:
        raise
    except Exception:  # noqa: BLE001 - cannot tell is the answer; the event says so
        answer = None
    if not isinstance(answer, Reconciled):
        return Reconciled.unknown()
    if answer.outcome == "done":
        try:
            encode_result(answer.result, f"result of step {step.name!r}", payload_limit)
        except PayloadError:  # a result that cannot be stored is no answer either
            return Reconciled.unknown()
    return answer


def recorded_done(
    record: SagaRecord, step: StepRecord, answer: Reconciled, payload_limit: int
) -> Flow[SagaRecord]:
    """The attempt happened: the step is recorded succeeded with the answer's result."""
    encoded = encode_result(answer.result, f"result of step {step.name!r}", payload_limit)
    write_, event = records.succeeded(record, step.name, encoded)
    told = dataclasses.replace(event, detail={"reconciled": "done"})
    return (yield from write(record, [write_], [told]))


def recorded_not_done(record: SagaRecord, step: StepRecord) -> Flow[SagaRecord]:
    """While unwinding: the attempt did not happen, so there is nothing to compensate."""
    check_step_move(step.name, step.status, StepStatus.SKIPPED)
    skipped = dataclasses.replace(step, status=StepStatus.SKIPPED)
    event = Event("step_skipped", step.name, step.attempt, {"reason": "reconciled: not done"})
    return (yield from write(record, [StepWrite(skipped, stamp="finished")], [event]))


def noted(record: SagaRecord, step: StepRecord, answer: Reconciled) -> Flow[SagaRecord]:
    """Record an answer that changes no state (forward: not done, or unknown)."""
    event = Event("step_reconciled", step.name, step.attempt, {"outcome": answer.outcome})
    return (yield from write(record, [], [event]))


def _reconciler(saga: Saga, name: str) -> StepFn | None:
    declared = saga.by_name(name)
    return None if declared is None else declared.reconciler
