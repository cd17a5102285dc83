"""The records of a saga's progress: the step writes and events each decision commits.

Pure functions of (recorded state, outcome); every status change is checked
against the state machine in :mod:`saga._internal.status` before it is built.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from saga._internal.codec import Encoded, decode, encode_result
from saga._internal.definition import Saga
from saga._internal.engine.decisions import RunStep
from saga._internal.errors import (
    MAX_ERROR_LENGTH as MAX_ERROR_LENGTH,  # re-exported: the stored bound
)
from saga._internal.errors import PayloadError, describe_error
from saga._internal.ports import Commit, Event, SagaRecord, StepRecord, StepWrite
from saga._internal.record import replaced
from saga._internal.status import SagaStatus, StepKind, StepStatus, check_saga_move, check_step_move


def with_step(record: SagaRecord, step: StepRecord) -> SagaRecord:
    """``record`` with ``step`` (same seq) replaced by a newer state of it."""
    return ahead(record, [StepWrite(step)])


def ahead(record: SagaRecord, writes: Sequence[StepWrite]) -> SagaRecord:
    """``record`` as it will be once step ``writes`` commit (what the next decision sees
    before they are written: they travel with the next commit). With none, ``record``
    itself: the forward run looks ahead at every turn, mostly with nothing carried."""
    if not writes:
        return record
    steps, names = _with_steps(record, [write.step for write in writes])
    return _indexed(replaced(record, steps=steps), names)


def in_completion_order(record: SagaRecord, completed: Iterable[str]) -> SagaRecord:
    """``record`` (just reloaded) with ties in finish times broken as this process saw
    the steps end. The database clock can give two steps that ended a moment apart the
    same time (SQLite keeps milliseconds); only the in-memory copy is adjusted."""
    last = -math.inf
    for name in completed:
        step = record.step(name)
        if step is None or step.finished_at is None:
            continue
        if step.finished_at <= last:
            step = replaced(step, finished_at=math.nextafter(last, math.inf))
            record = with_step(record, step)
        last = step.finished_at if step.finished_at is not None else last
    return record


def describe(error: BaseException) -> str:
    """An error as one stored line of bounded length (``"TypeName: message"``)."""
    return describe_error(error)


def start(record: SagaRecord | None, template: StepRecord, attempt: int) -> StepWrite:
    """The record that step ``template.name`` may have started attempt ``attempt``."""
    existing = None if record is None else record.step(template.name)
    if existing is None:
        step = replaced(template, status=StepStatus.RUNNING, attempt=attempt)
        return StepWrite(step, new=True, stamp="started")
    check_step_move(existing.name, existing.status, StepStatus.RUNNING)
    step = replaced(existing, status=StepStatus.RUNNING, attempt=attempt)
    return StepWrite(step, stamp="started")


def started_event(write: StepWrite) -> tuple[Event, ...]:
    """The start of an attempt."""
    step = write.step
    return (Event("step_started", step.name, step.attempt),)


def attempt_failed(name: str, attempt: int, error: str, took: float, delay: float) -> Event:
    """Attempt ``attempt`` of step ``name`` failed with ``error`` after running ``took``
    seconds (the worker's monotonic clock), and the next starts ``delay`` seconds after
    this record: committed before that wait, so the event's own time is when it failed
    and ``at + delay`` when the next attempt is due (``next_attempt_at`` in the reads)."""
    detail = {**_failure(error, took), "delay": round(delay, 6)}
    return Event("attempt_failed", name, attempt, detail)


def _failure(error: str, took: float | None) -> dict[str, object]:
    return {"error": error} if took is None else {"error": error, "took": round(took, 6)}


def succeeded(record: SagaRecord, name: str, result: Encoded) -> tuple[StepWrite, Event]:
    step = _recorded(record, name)
    check_step_move(name, step.status, StepStatus.SUCCEEDED)
    new = replaced(
        step, status=StepStatus.SUCCEEDED, result=result.text, output_digest=result.digest
    )
    return StepWrite(new, stamp="finished"), Event("step_succeeded", name, step.attempt)


def failed(
    record: SagaRecord, name: str, error: str, outcome_unknown: bool = False
) -> tuple[StepWrite, Event]:
    """Step ``name`` failed for good. ``outcome_unknown``: it was given up because no
    attempt ever returned (each crashed its process), so it may have acted; it is then
    recorded ``in_doubt``, except a transactional step, whose transaction rolled back.
    A step that ended so already (parked by a pause, found over its budget after a
    crash) keeps its status."""
    step = _recorded(record, name)
    in_doubt = outcome_unknown and not step.transactional
    status = StepStatus.IN_DOUBT if in_doubt else StepStatus.FAILED
    if step.status in (StepStatus.FAILED, StepStatus.IN_DOUBT):
        status = step.status
    else:
        check_step_move(name, step.status, status)
    new = replaced(step, status=status, error=error)
    kind = "step_in_doubt" if in_doubt else "step_failed"
    return StepWrite(new, stamp="finished"), Event(kind, name, step.attempt, {"error": error})


def not_run(record: SagaRecord, names: Iterable[str]) -> tuple[list[StepWrite], list[Event]]:
    """Steps recorded as started whose action never ran, because the store answered that
    commit with "stop": marked skipped, so nothing is compensated for them. Only a first
    attempt qualifies: an earlier attempt of a retried step may have acted."""
    writes: list[StepWrite] = []
    events: list[Event] = []
    for name in names:
        step = record.step(name)
        if step is None or step.status is not StepStatus.RUNNING or step.attempt != 1:
            continue
        check_step_move(name, step.status, StepStatus.SKIPPED)
        writes.append(StepWrite(replaced(step, status=StepStatus.SKIPPED), stamp="finished"))
        events.append(Event("step_skipped", name, 1, {"reason": "stopped before it ran"}))
    return writes, events


def undo_started(record: SagaRecord, name: str) -> tuple[StepWrite, Event]:
    step = _recorded(record, name)
    check_step_move(name, step.status, StepStatus.COMPENSATING)
    attempt = step.undo_attempt + 1
    new = replaced(step, status=StepStatus.COMPENSATING, undo_attempt=attempt)
    return StepWrite(new), Event("compensation_started", name, attempt)


def result_mismatch(record: SagaRecord, name: str, error: BaseException) -> Event:
    """Step ``name``'s compensation was given its result as stored JSON: it no longer
    reads as its type (``error``). Written once per unwinding, with the first attempt."""
    attempt = _recorded(record, name).undo_attempt + 1
    return Event("result_mismatch", name, attempt, {"error": describe(error)})


def undo_attempt_failed(
    record: SagaRecord,
    name: str,
    previous_error: str | None,
    took: float | None = None,
    delay: float | None = None,
    max_attempts: int | None = None,
) -> tuple[Event, ...]:
    """The event of step ``name``'s last compensation attempt having failed with
    ``previous_error`` (none without one): written with the next attempt's start (a
    step's forward attempt is recorded as it fails instead: :func:`attempt_failed`), or
    as it fails with the ``delay`` to its next attempt when the saga is handed back for
    that wait (``next_attempt_at`` in the reads), and the attempt number its policy
    stops after (``max_attempts``, kept so that a reader can say "attempt 4 of 20")."""
    if previous_error is None:
        return ()
    attempt = _recorded(record, name).undo_attempt
    detail = _failure(previous_error, took)
    if delay is not None:
        detail["delay"] = round(delay, 6)
    if max_attempts is not None:
        detail["max_attempts"] = max_attempts
    return (Event("compensation_attempt_failed", name, attempt, detail),)


def undone(record: SagaRecord, name: str, returned: Any = None) -> tuple[StepWrite, Event]:
    """Step ``name`` compensated. Its finish time stays its action's (the compensation's own
    times are its events'), so durations and completion order keep saying what happened.
    What the compensation returned, if anything, is kept in the event (:func:`undo_detail`)."""
    step = _recorded(record, name)
    check_step_move(name, step.status, StepStatus.COMPENSATED)
    new = replaced(step, status=StepStatus.COMPENSATED)
    detail = undo_detail(name, returned)
    return StepWrite(new), Event("compensation_done", name, step.undo_attempt, detail)


UNDO_RESULT_LIMIT = 4096
"""Largest compensation result kept in its event, in encoded bytes: a refund id or a
count, read with every history; a larger one is noted, not kept."""


def undo_detail(name: str, returned: Any) -> dict[str, Any] | None:
    """``{"result": value}`` for a compensation that returned a JSON value (None: nothing).
    A value that cannot be stored is described instead: the compensation did its work, and
    a result it was never asked for must not fail it."""
    if returned is None:
        return None
    try:
        # Stored as a step's result is, so that its type reads it back exactly.
        encoded = encode_result(
            returned, f"result of the compensation of step {name!r}", UNDO_RESULT_LIMIT
        )
    except PayloadError as error:
        return {"result_not_kept": str(error)}
    return {"result": decode(encoded.text)}


def nothing_to_undo(record: SagaRecord) -> tuple[list[StepWrite], list[Event]]:
    """The steps still ``running`` once everything else is undone, settled.

    They were in flight when the saga turned (its process died, or it never
    reported back) and there is nothing to undo for them. One without a
    compensation may have acted and is recorded ``compensated`` (nothing to
    undo); a transactional one is recorded ``failed``: its transaction never
    committed, so nothing happened (no error text: it did not raise). Without
    this an unwound saga would keep them ``running``, shown as in doubt
    forever. The event says why.
    """
    writes: list[StepWrite] = []
    events: list[Event] = []
    for step in record.steps:
        if step.status is not StepStatus.RUNNING or step.kind is not StepKind.COMPENSATABLE:
            continue
        if step.transactional:
            check_step_move(step.name, StepStatus.RUNNING, StepStatus.FAILED)
            writes.append(StepWrite(replaced(step, status=StepStatus.FAILED)))
            detail = {"reason": "its transaction never committed: nothing happened"}
            events.append(Event("step_failed", step.name, step.attempt, detail))
            continue
        check_step_move(step.name, StepStatus.RUNNING, StepStatus.COMPENSATING)
        check_step_move(step.name, StepStatus.COMPENSATING, StepStatus.COMPENSATED)
        writes.append(StepWrite(replaced(step, status=StepStatus.COMPENSATED)))
        detail = {"reason": "nothing to undo: no compensation"}
        events.append(Event("compensation_done", step.name, step.undo_attempt, detail))
    return writes, events


def undo_failed(record: SagaRecord, name: str, error: str) -> tuple[StepWrite, Event]:
    step = _recorded(record, name)
    new = replaced(step, error=error)
    detail = {"error": error}
    return StepWrite(new), Event("compensation_failed", name, step.undo_attempt, detail)


def moved(record: SagaRecord, status: SagaStatus, **detail: object) -> Event:
    """The event for the saga moving to ``status`` (checked against the state machine)."""
    check_saga_move(record.id, record.status, status)
    return Event(f"saga_{status.value}", detail=dict(detail) or None)


def apply(record: SagaRecord, change: Commit, stop: bool | None = None) -> SagaRecord:
    """``record`` as it is once ``change`` committed (timestamps aside).

    ``stop`` is the commit's answer to "must this saga stop?", when it gave one.
    """
    steps, names = _with_steps(record, [write.step for write in change.steps])
    applied = replaced(
        record,
        status=change.status or record.status,
        error=change.error if change.error is not None else record.error,
        owner=None if change.release else record.owner,
        steps=steps,
        stop=record.stop if stop is None else stop,
    )
    return _indexed(applied, names)


def _indexed(record: SagaRecord, names: dict[str, int] | None) -> SagaRecord:
    """``record`` with its name index already filled in, when one was carried over."""
    if names is not None:
        object.__setattr__(record, "names", names)
    return record


def _with_steps(
    record: SagaRecord, written: Iterable[StepRecord]
) -> tuple[tuple[StepRecord, ...], dict[str, int] | None]:
    """The steps with ``written`` put in place, and the name index carried over.

    Steps are kept in seq order and seqs are 1, 2, 3...: a step's position is
    its seq - 1, so a large saga's commit costs a list copy, not a sort.
    """
    steps = list(record.steps)
    names = record.names
    copied = False  # the record's index is shared: copy it once, at the first new step
    for step in written:
        position = step.seq - 1
        if position < len(steps) and steps[position].seq == step.seq:
            steps[position] = step
        elif position == len(steps) and (not steps or steps[-1].seq == step.seq - 1):
            steps.append(step)
            if names is not None:
                if not copied:
                    names, copied = dict(names), True
                names[step.name] = position
        else:  # seqs with gaps (never written by saga itself): sort, rebuild the index
            by_seq = {s.seq: s for s in steps} | {step.seq: step}
            steps, names = [by_seq[seq] for seq in sorted(by_seq)], None
    return tuple(steps), names


def commit(
    record: SagaRecord,
    writes: Iterable[StepWrite] = (),
    events: Iterable[Event] = (),
    status: SagaStatus | None = None,
    error: str | None = None,
) -> Commit:
    """One fenced transaction's worth of changes; terminal statuses drop the lease."""
    return Commit(
        saga_id=record.id,
        epoch=record.epoch,
        status=status,
        error=error,
        steps=tuple(writes),
        events=tuple(events),
        release=status is not None and status.is_terminal,
    )


def release(record: SagaRecord) -> Commit:
    """Give the lease up without changing anything else."""
    return Commit(saga_id=record.id, epoch=record.epoch, release=True)


def template(
    record: SagaRecord, name: str, kind: StepKind, transactional: bool, seq: int | None = None
) -> StepRecord:
    """The step as recorded, or a new one placed at ``seq`` (by default after every
    recorded step)."""
    existing = record.step(name)
    if existing is not None:
        return existing
    if seq is None:
        seq = _next_seq(record)
    return StepRecord(name, seq, StepStatus.PENDING, 0, kind=kind, transactional=transactional)


def _next_seq(record: SagaRecord) -> int:
    return record.steps[-1].seq + 1 if record.steps else 1  # steps are kept in seq order


def start_all(
    saga: Saga, record: SagaRecord, steps: Sequence[RunStep]
) -> tuple[list[StepWrite], list[Event]]:
    """The start writes of ``steps``, and their events: a recorded step is restarted, a
    new one placed after every recorded step, in the order given (what starting them one
    at a time gives, without a copy of the record per step)."""
    seq = _next_seq(record)
    writes: list[StepWrite] = []
    events: list[Event] = []
    for run in steps:
        declared = saga.by_name(run.name)
        assert declared is not None
        step = template(record, run.name, declared.kind, declared.transactional, seq)
        if step.seq == seq:  # a new step: the next one goes after it
            seq += 1
        write = start(record, step, run.attempt)
        writes.append(write)
        if run.budget_from:  # a fresh budget an operator gave: read back after a crash
            budget = {"budget_from": run.budget_from}
            events.append(Event("step_started", run.name, run.attempt, budget))
        else:
            events.extend(started_event(write))
    return writes, events


def to_run_again(record: SagaRecord, name: str, first: str) -> tuple[StepWrite, Event]:
    """Step ``name`` set back to pending (``retry --from first``): it runs again once the
    steps it follows have, its attempts counting on; its earlier result is set aside (its
    digest stays in the event)."""
    step = _recorded(record, name)
    check_step_move(name, step.status, StepStatus.PENDING)
    new = replaced(step, status=StepStatus.PENDING, result=None, output_digest=None, error=None)
    detail = {"from_step": first, "was": step.status.value, "digest": step.output_digest}
    return StepWrite(new), Event("step_reset", name, step.attempt, detail)


def _recorded(record: SagaRecord, name: str) -> StepRecord:
    step = record.step(name)
    if step is None:
        raise KeyError(f"saga {record.id} has no recorded step {name!r}")
    return step
