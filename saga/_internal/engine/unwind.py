"""Failing and unwinding: a step's failure recorded, then every step that may have
acted compensated, newest first, each compensation attempt durable before it runs.

A compensation's end is not a commit of its own: it rides with the next one (the next
compensation's start, or the saga's end), as a forward step's success rides with the
next start. A crash before that commit runs the compensation again, which it must
bear anyway (a crash between its return and any commit of it does the same).

The flows here serve every entry point: a declarative saga's forward flow, the
context-manager scopes, and the operator verbs (recover, compensate, cancel).
"""

from __future__ import annotations

import time
from typing import Any

from saga._internal.codec import DEFAULT_PAYLOAD_LIMIT
from saga._internal.definition import Saga
from saga._internal.engine import reconcile, records
from saga._internal.engine.attempts import (
    Retries,
    in_transaction,
    recorded,
    retry_scheduled,
    undo_context,
    undo_result,
)
from saga._internal.engine.carried import Carried
from saga._internal.engine.decisions import (
    Cursor,
    no_unwinding,
    stop_reason,
    undo_stack,
    unwound_status,
)
from saga._internal.engine.effects import (
    DRAINING,
    Call,
    CodeRefs,
    Flow,
    Load,
    ReadHistory,
    Recorded,
    Sleep,
    hand_back,
    write,
)
from saga._internal.engine.fault_points import fault
from saga._internal.engine.targets import Declared, Referenced, Target
from saga._internal.errors import INFRASTRUCTURE_ERRORS, SagaFailed, SagaHandedBack
from saga._internal.failure import compensation_failed
from saga._internal.policy import RetryPolicy
from saga._internal.ports import Event, SagaRecord, StepRecord, StepWrite
from saga._internal.result_types import Read
from saga._internal.status import SagaStatus


def fail(
    resolver: CodeRefs,
    record: SagaRecord,
    name: str,
    error: BaseException | str,
    saga: Saga | None,
) -> Flow[SagaFailed]:
    """Record step ``name``'s failure, unwind if allowed; return what to raise.

    ``error`` is a text when no exception says why (its attempts never returned)."""
    text = error if isinstance(error, str) else records.describe(error)
    write_, event = records.failed(record, name, text, outcome_unknown=isinstance(error, str))
    why = no_unwinding(record, error)
    if why is not None:
        stop = records.moved(record, SagaStatus.FAILED, reason=why)
        record = yield from write(record, [write_], [event, stop], SagaStatus.FAILED, text)
        return SagaFailed(record.id, SagaStatus.FAILED, name)
    turn = records.moved(record, SagaStatus.COMPENSATING, reason=f"step {name!r} failed")
    record = yield from write(record, [write_], [event, turn], SagaStatus.COMPENSATING, text)
    return (yield from unwound(resolver, record, saga, name))


def cancelled(
    resolver: CodeRefs, record: SagaRecord, saga: Saga | None, not_run: list[str]
) -> Flow[SagaFailed]:
    """Stop as the store asked (a cancel request or a passed deadline) and unwind;
    return what to raise. The saga ends ``cancelled`` or ``compensated``.
    ``not_run`` are steps just recorded as started whose actions were not called."""
    record = (yield Load(record.id)) or record  # which of the two it was
    skips, skipped = records.not_run(record, not_run)
    turn = records.moved(record, SagaStatus.COMPENSATING, reason=stop_reason(record))
    record = yield from write(record, skips, [*skipped, turn], SagaStatus.COMPENSATING)
    return (yield from unwound(resolver, record, saga, None))


def unwound(
    resolver: CodeRefs, record: SagaRecord, saga: Saga | None, name: str | None
) -> Flow[SagaFailed]:
    """Unwind a saga that turned ``compensating`` because of step ``name`` (None: it was
    stopped); return what to raise."""
    try:
        record = yield from unwind(resolver, record, saga)
    except SagaFailed as failure:
        failure.failed_step = name
        return failure
    return SagaFailed(record.id, record.status, name)


def unwind(
    resolver: CodeRefs, record: SagaRecord, saga: Saga | None, fresh: bool = False
) -> Flow[SagaRecord]:
    """Compensate every step that may have acted, newest first, then finish.

    ``fresh``: compensations get their whole retry budget again (an operator's retry)."""
    check_compensations(resolver, record, saga)
    yield from fault("before_unwind")
    if saga is not None:
        record = yield from _reconciled(record, saga)
    carried = Carried()  # the last compensation's end, not yet written
    for step in undo_stack(record):
        record = yield from _undo(resolver, record, step, saga, fresh, carried)
    ahead = carried.ahead(record)
    status = unwound_status(ahead)
    settled, events = records.nothing_to_undo(ahead)  # no step of it stays running
    yield from fault("before_final_commit")
    done, told = carried.take()
    moved = records.moved(ahead, status)
    record = yield from write(record, [*done, *settled], [*told, *events, moved], status)
    yield from _undone_commits(done)
    yield from fault("after_final_commit")
    return record


def _undone_commits(done: list[StepWrite]) -> Flow[None]:
    """The crash point after each compensation's end is committed (with a later write)."""
    for written in done:
        yield from fault("after_undo_commit", written.step.name)


def _reconciled(record: SagaRecord, saga: Saga) -> Flow[SagaRecord]:
    """Ask the steps whose attempt is in doubt whether it happened, before compensating:
    done, the compensation gets the answer's result; not done, there is nothing to
    compensate (the step is recorded skipped); unknown, it is compensated as before."""
    for step in reconcile.in_doubt(saga, record):
        answer = yield from reconcile.ask(saga, record, step, DEFAULT_PAYLOAD_LIMIT)
        if answer.outcome == "done":
            record = yield from reconcile.recorded_done(record, step, answer, DEFAULT_PAYLOAD_LIMIT)
        elif answer.outcome == "not_done":
            record = yield from reconcile.recorded_not_done(record, step)
        else:
            record = yield from reconcile.noted(record, step, answer)
    return record


def check_compensations(resolver: CodeRefs, record: SagaRecord, saga: Saga | None) -> None:
    """Resolve every compensation still to run: an untrusted stored reference is
    refused (``UnsafeReferenceError``) before any compensation runs."""
    for step in undo_stack(record):
        compensation(resolver, record, step, saga)


class _Undoing(Cursor):
    """A compensation's retries: the latest record, and the error of the last attempt
    until the next attempt's start records it."""

    def __init__(self, record: SagaRecord, carried: Carried) -> None:
        super().__init__(record)
        self.carried = carried  # the compensation before's end: rides with this one's start
        self.error: str | None = None
        self.took: float | None = None  # how long that attempt ran
        self.returned: Any = None  # what the compensation returned, kept in its event
        self.mismatch_noted = False  # its result does not read as its type: recorded once


def _undo(
    resolver: CodeRefs,
    record: SagaRecord,
    step: StepRecord,
    saga: Saga | None,
    fresh: bool,
    carried: Carried,
) -> Flow[SagaRecord]:
    """Compensate ``step``; its end is left in ``carried``, for the next commit (a
    transactional compensation's committed with its own writes)."""
    call, policy = compensation(resolver, record, step, saga)
    if call is None:
        return record
    if (yield DRAINING):  # stopping: the next owner goes on with this compensation
        raise (yield from hand_back(record, *carried.take()))
    used = 0 if fresh else (yield from _budget_used(record, step, policy))
    if not policy.allows(used + 1):
        exhausted = "compensation attempts used up"
        return (yield from _exhausted(record, step.name, exhausted, carried=carried))
    cursor = _Undoing(record, carried)
    retries = Retries(policy, used)
    while True:
        try:
            if (yield from _undo_attempt(cursor, step, call)):
                return cursor.record  # transactional: "compensated" committed with it
            break
        except Exception as error:
            try:
                delay = retries.after(error)  # tenacity decides, as for a step's attempts
            except INFRASTRUCTURE_ERRORS:
                raise
            except Exception:
                text = records.describe(error)
                return (yield from _exhausted(cursor.record, step.name, text, error))
            yield from _before_next_undo(
                resolver, cursor, step, error, delay, _budget(policy, used, step)
            )
    carried.add(*records.undone(cursor.record, step.name, cursor.returned))
    return cursor.record


def _before_next_undo(
    resolver: CodeRefs,
    cursor: _Undoing,
    step: StepRecord,
    error: Exception,
    delay: float,
    budget: int | None,
) -> Flow[None]:
    """A compensation's attempt failed and another follows after ``delay``: wait here,
    or hand the saga back when the wait is longer than a caller's thread may wait in
    place or the process drains (the failed attempt recorded with the hand-back)."""
    attempt = recorded(cursor.record, step.name).undo_attempt
    yield retry_scheduled(cursor.record, step.name, attempt, error, delay, True)
    if delay > resolver.compensation_wait_in_place:
        failed = records.undo_attempt_failed(
            cursor.record, step.name, cursor.error, cursor.took, delay, budget
        )
        waiting = SagaHandedBack.waiting_for(
            cursor.record.id, step.name, attempt, budget, cursor.error, delay
        )
        assert waiting.why is not None
        yield from hand_back(cursor.record, (), failed, delay, waiting.why)
        raise waiting from None
    yield Sleep(delay, interruptible=True)
    if (yield DRAINING):
        failed = records.undo_attempt_failed(cursor.record, step.name, cursor.error, cursor.took)
        raise (yield from hand_back(cursor.record, (), failed)) from None


def _budget_used(record: SagaRecord, step: StepRecord, policy: RetryPolicy) -> Flow[int]:
    """How many attempts of ``step``'s compensation its current budget has used: all of
    them, unless an operator's retry gave it a fresh budget and it was handed back to
    wait since; then those made after the retry began, as the hand-back recorded where
    that budget ends (``max_attempts`` of its failed attempt)."""
    if step.undo_attempt == 0 or policy.max_attempts is None:
        return step.undo_attempt
    history = yield ReadHistory(record.id)
    for event in reversed(history):
        if event.step == step.name and event.kind == "compensation_attempt_failed":
            end = (event.detail or {}).get("max_attempts")
            if isinstance(end, int) and end > policy.max_attempts:  # a fresh budget's end
                return max(0, step.undo_attempt - (end - policy.max_attempts))
            break
    return step.undo_attempt


def _budget(policy: RetryPolicy, used: int, step: StepRecord) -> int | None:
    """The attempt number the policy stops after, as attempts are numbered (stored):
    an operator's fresh budget starts after the attempts already made."""
    if policy.max_attempts is None:
        return None
    return policy.max_attempts + (step.undo_attempt - used)


def _undo_attempt(cursor: _Undoing, step: StepRecord, call: Target) -> Flow[bool]:
    """One attempt of ``step``'s compensation, its start durable first (with the error of
    the attempt before, if that one failed). True when the compensation is transactional:
    its "compensated" record then committed with its own writes."""
    result = undo_result(cursor.record, step.name)
    noted = _mismatch_noted(cursor, step.name, result)
    write_, started = records.undo_started(cursor.record, step.name)
    failed_before = records.undo_attempt_failed(cursor.record, step.name, cursor.error, cursor.took)
    yield from fault("before_undo", step.name)
    done, told = cursor.carried.take()
    events = [*told, *failed_before, *noted, started]
    cursor.record = yield from write(cursor.record, [*done, write_], events)
    yield from _undone_commits(done)
    cursor.error = None
    began = time.monotonic()
    context = undo_context(cursor.record, step.name, result)
    try:
        if step.transactional:  # the undo and its record commit together
            outcome = Recorded(cursor.record, step.name, undone=True)
            yield from in_transaction(cursor, context, call, outcome)
        else:
            cursor.returned = yield Call(call, context)
    except Exception as error:
        cursor.error = records.describe(error)  # written with the next attempt's start
        cursor.took = time.monotonic() - began
        raise
    yield from fault("after_undo_commit" if step.transactional else "after_undo", step.name)
    return step.transactional


def _mismatch_noted(cursor: _Undoing, name: str, result: Read) -> tuple[Event, ...]:
    """The ``result_mismatch`` event to write with this attempt's start: with the first
    attempt that gets its result as stored JSON, not with every retry."""
    if result.error is None or cursor.mismatch_noted:
        return ()
    cursor.mismatch_noted = True
    return (records.result_mismatch(cursor.record, name, result.error),)


def _exhausted(
    record: SagaRecord,
    name: str,
    text: str,
    cause: BaseException | None = None,
    carried: Carried | None = None,
) -> Flow[SagaRecord]:
    write_, event = records.undo_failed(record, name, text)
    stop = records.moved(record, SagaStatus.FAILED, reason=f"compensation of {name!r} failed")
    done, told = carried.take() if carried is not None else ([], [])
    # The saga's error stays the one that made it unwind; this one is on the step.
    record = yield from write(record, [*done, write_], [*told, event, stop], SagaStatus.FAILED)
    yield from _undone_commits(done)
    raise compensation_failed(record, name, text, cause) from cause


def compensation(
    resolver: CodeRefs, record: SagaRecord, step: StepRecord, saga: Saga | None
) -> tuple[Target | None, RetryPolicy]:
    """What runs as step ``step``'s compensation, and its retry policy (None: nothing to
    call). A stored reference is checked here (``UnsafeReferenceError`` before anything
    runs); the driver finds the function again to call it."""
    if record.kind == "declarative":
        assert saga is not None
        declared = saga.by_name(step.name)
        if declared is None or declared.undo is None:
            return None, declared.undo_retry if declared else RetryPolicy()
        return Declared(saga.name, saga.version, step.name, "undo"), declared.undo_retry
    if step.compensation_ref is None:
        return None, RetryPolicy()
    resolver.resolve(step.compensation_ref)
    return Referenced(step.compensation_ref, step.args), resolver.compensation_retry
