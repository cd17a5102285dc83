"""What turns a stopped declarative saga ``running`` again: ``saga retry`` (after a fix,
optionally ``--from`` an earlier step), ``saga skip`` (a step done by hand) and the resume
of a paused saga. Pure functions of (definition, record), like :mod:`.rules`.

``retry --from S`` runs step ``S`` again and every step that follows it (depends on it,
at any remove), once the operator checked what ``S`` did. It is refused unless each of
those steps that already succeeded is declared ``idempotent`` (its participant dedupes
by ``ctx.idempotency_key``, so running it again acts once) and none is a pivot (a pivot
that acted is never run again: a failure after it must not unwind what came before).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from saga._internal.codec import Encoded
from saga._internal.definition import Saga
from saga._internal.engine import decisions, records
from saga._internal.engine.rules import declarative_only
from saga._internal.errors import OperationRefusedError
from saga._internal.ports import ClaimGuard, Event, SagaRecord, StepRecord, StepWrite
from saga._internal.status import SagaStatus, StepKind, StepStatus

RETRIED = frozenset({StepStatus.FAILED, StepStatus.IN_DOUBT})
"""The steps ``saga retry`` runs again: the ones whose failure stopped the saga."""

UNWOUND = frozenset({StepStatus.COMPENSATING, StepStatus.COMPENSATED})

RESUMED = RETRIED | {StepStatus.RUNNING}
"""The steps resuming a paused saga runs again: parked when their retries ran out, or
started and never ended (a crash, or the commit that learnt of the pause)."""

Reopening = tuple[list[StepWrite], list[Event], list[decisions.RunStep]]
"""The writes and events that turn a failed saga ``running`` again, and the step
attempts they start."""


def refuse_retry(record: SagaRecord) -> None:
    """Only a declarative saga that failed going forward (past its pivot: nothing was
    unwound) runs forward again; a failed compensation has its own ways out."""
    declarative_only(
        record, "only its own code can run it forward (re-enter the same coord.saga(name, key=...))"
    )
    if record.status is not SagaStatus.FAILED:
        raise OperationRefusedError(
            record.id, f"saga {record.id} is {record.status.value}; retry is for failed sagas"
        )
    if any(step.status in UNWOUND for step in record.steps):
        raise OperationRefusedError(
            record.id,
            f"saga {record.id} failed while compensating; see retry-compensation and "
            "mark-compensated",
        )
    if not any(step.status in RETRIED for step in record.steps):
        raise OperationRefusedError(record.id, f"saga {record.id} has no failed step to retry")


def run_again_from(saga: Saga, record: SagaRecord, first: str) -> frozenset[str]:
    """The steps ``retry --from first`` runs again: ``first`` and every step that follows
    it; refused (naming the step and what to do) unless each may run again."""
    refuse_retry(record)
    if saga.by_name(first) is None:
        names = ", ".join(step.name for step in saga.steps)
        raise OperationRefusedError(
            record.id, f"saga {record.id} has no step {first!r}; its steps: {names}"
        )
    recorded = record.step(first)
    if recorded is None or recorded.status is StepStatus.PENDING:
        raise OperationRefusedError(
            record.id, f"step {first!r} of saga {record.id} has not run; retry runs it in turn"
        )
    again = _followers(saga, first)
    for step in record.steps:
        if step.name in again:
            _refuse_running_again(saga, record, step, first)
    return again


def _followers(saga: Saga, first: str) -> frozenset[str]:
    """``first`` and the steps that depend on it, directly or through others."""
    deps = saga.dependencies()
    found = {first}
    for step in saga.order():  # prerequisites come first in this order
        if any(d in found for d in deps[step.name]):
            found.add(step.name)
    return frozenset(found)


def _refuse_running_again(saga: Saga, record: SagaRecord, step: StepRecord, first: str) -> None:
    if step.status in RETRIED or step.status is StepStatus.PENDING:
        return  # it stopped the saga, or never ran: retry runs it anyway
    where = f"step {step.name!r} of saga {record.id}"
    if step.status is not StepStatus.SUCCEEDED:
        raise OperationRefusedError(
            record.id, f"{where} is {step.status.value}; retry --from {first} cannot run it again"
        )
    if step.kind is StepKind.PIVOT:
        raise OperationRefusedError(
            record.id,
            f"{where} is its pivot and acted: a pivot is never run again; "
            "retry --from a step after it",
        )
    declared = saga.by_name(step.name)
    if declared is None or not declared.idempotent:
        raise OperationRefusedError(
            record.id,
            f"{where} succeeded and is not declared idempotent, so running it again could "
            "act twice; declare @saga.step(idempotent=True) if its participant dedupes by "
            "ctx.idempotency_key, or retry --from a later step",
        )


def refuse_skip(record: SagaRecord, step: str) -> None:
    """``saga skip`` records the result of one of the steps ``retry`` would run again."""
    refuse_retry(record)
    failed = ", ".join(s.name for s in record.steps if s.status in RETRIED)
    found = record.step(step)
    if found is None or found.status not in RETRIED:
        raise OperationRefusedError(
            record.id,
            f"step {step!r} of saga {record.id} did not fail; the failed steps: {failed}",
        )


def skipped(
    record: SagaRecord, step: str, result: Encoded, reason: str, who: Mapping[str, str]
) -> tuple[StepWrite, list[Event]]:
    """Step ``step`` recorded as succeeded with ``result``, done by hand by ``who``:
    its compensation (if ever run) gets that result."""
    write_, event = records.succeeded(record, step, result)
    marked = {"marked_by": f"{who.get('by')}@{who.get('host')}", "reason": reason}
    by_hand = dataclasses.replace(event, detail={**(event.detail or {}), **marked})
    return write_, [by_hand]


def retry_guard(record: SagaRecord) -> ClaimGuard:
    """Forward again needs the saga as it was read: still failed, nobody claimed it since."""
    return ClaimGuard(frozenset({SagaStatus.FAILED}), record.epoch)


def reopened(
    record: SagaRecord,
    saga: Saga,
    done: tuple[StepWrite, list[Event]] | None = None,
    from_step: str | None = None,
) -> Reopening:
    """What turns a failed (or paused) saga ``running`` again: the starts of the next
    attempts of its failed (or parked) steps (writes and events), and those attempts.
    Each gets its step's whole retry budget again (``budget_from``: the attempts made
    before), its number going on. ``from_step``: that step starts instead, and the steps
    that follow it are set back to pending, to run again in turn."""
    by_hand = None if done is None else done[0].step.name
    paused = record.status is SagaStatus.PAUSED
    again = frozenset() if from_step is None else run_again_from(saga, record, from_step)
    starting = [
        step
        for step in record.steps
        if (step.status in (RESUMED if paused else RETRIED) and step.name not in again)
        or step.name == from_step
    ]
    runs = [
        decisions.RunStep(step.name, step.attempt + 1, budget_from=step.attempt)
        for step in starting
        if step.name != by_hand
    ]
    writes, events = records.start_all(saga, record, runs)
    for step in record.steps:
        if step.name in again and step.name != from_step and step.status is not StepStatus.PENDING:
            write_, event = records.to_run_again(record, step.name, str(from_step))
            writes, events = [*writes, write_], [*events, event]
    if done is not None:  # a step done by hand, its result recorded (saga skip)
        writes, events = [done[0], *writes], [*done[1], *events]
    back = records.moved(record, SagaStatus.RUNNING, reason=_why(paused, by_hand, from_step))
    return writes, [*events, back], runs


def _why(paused: bool, by_hand: str | None, from_step: str | None) -> str:
    if paused:
        return "operator resume"
    if by_hand is not None:
        return f"operator skip of step {by_hand!r}"
    return "operator retry" if from_step is None else f"operator retry from step {from_step!r}"
