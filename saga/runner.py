"""The thread driver: carries out the engine's decisions against a store.

It runs actions and compensations (with tenacity, the attempts made durable
before each one runs), writes what the engine builds, and raises what the
caller must see. It decides nothing on its own.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import inspect
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from saga import engine, faults
from saga.codec import Encoded, decode, encode
from saga.context import StepContext, entered
from saga.definition import Saga, Step
from saga.engine import Cursor
from saga.errors import INFRASTRUCTURE_ERRORS, SagaFailed, StepTimeoutError
from saga.failure import compensation_failed
from saga.lease import Heartbeat
from saga.policy import DEFAULT_COMPENSATION_RETRY, RetryPolicy
from saga.ports import Commit, Event, SagaRecord, SagaStore, StepRecord, StepWrite
from saga.refs import Resolver
from saga.status import SagaStatus, StepStatus

Action = Callable[[StepContext], Any]


@dataclasses.dataclass
class Runner:
    """Executes sagas for one coordinator."""

    store: SagaStore
    lease_ttl: float
    payload_limit: int
    resolver: Resolver
    heartbeat: Heartbeat

    # -- writing -----------------------------------------------------------------------------

    def write(
        self,
        record: SagaRecord,
        writes: Sequence[StepWrite] = (),
        events: Sequence[Event] = (),
        status: SagaStatus | None = None,
        error: str | None = None,
    ) -> SagaRecord:
        """Commit changes to ``record`` (fenced) and return the record as it now stands."""
        change = engine.commit(record, writes, events, status, error)
        cancel = self.store.commit(change)
        return engine.apply(record, change, cancel)

    # -- forward ----------------------------------------------------------------------------

    def forward(
        self, saga: Saga, record: SagaRecord, started: Sequence[engine.RunStep] = ()
    ) -> SagaRecord:
        """Run a declarative saga's remaining steps; unwind and raise on failure.

        ``started`` are steps whose start is already durable (a new saga's
        first steps are recorded with the saga itself).
        """
        if saga.max_concurrency > 1:
            from saga.fanout import FanOut

            return FanOut(self, saga, record).run(list(started))
        return self._sequential(saga, record, started[0] if started else None)

    def _sequential(
        self, saga: Saga, record: SagaRecord, started: engine.RunStep | None
    ) -> SagaRecord:
        carried: list[StepWrite] = []
        carried_events: list[Event] = []
        ahead = record
        while True:
            decision = started or engine.next_forward(saga, ahead)
            if isinstance(decision, engine.Complete):
                done = engine.moved(record, SagaStatus.COMPLETED)
                faults.point("before_final_commit", None)
                record = self.write(
                    record, carried, [*carried_events, done], status=SagaStatus.COMPLETED
                )
                faults.point("after_final_commit", None)
                return record
            if isinstance(decision, engine.GiveUp):
                record = self.write(record, carried, carried_events) if carried else record
                reason = f"gave up after {decision.attempts} attempts that never returned"
                raise self.fail(record, decision.name, reason, saga)
            step = saga.by_name(decision.name)
            assert step is not None
            if started is None:
                record = self._start(record, ahead, step, decision.attempt, carried, carried_events)
                # A pivot that may have acted (even unconfirmed, before a crash) means
                # forward only: a cancel request or a passed deadline no longer unwinds.
                if record.stop and not engine.pivot_may_have_acted(ahead):
                    raise self.cancelled(record, saga, [step.name])
            started = None
            cursor = Cursor(record)
            encoded = self._run_step(cursor, step.name, decision.attempt, step, saga)
            record = cursor.record
            if step.transactional:  # its success committed with its own writes
                carried, carried_events, ahead = [], [], record
                continue
            write, event = engine.succeeded(record, step.name, encoded)
            carried, carried_events = [write], [event]
            ahead = engine.ahead(record, carried)

    def _start(
        self,
        record: SagaRecord,
        ahead: SagaRecord,
        step: Step,
        attempt: int,
        carried: list[StepWrite],
        carried_events: list[Event],
    ) -> SagaRecord:
        """Make the start of ``step`` durable, with whatever the last step left to write."""
        template = engine.template(ahead, step.name, step.kind, step.transactional)
        start = engine.start(ahead, template, attempt)
        faults.point("before_start_commit", step.name)
        events = [*carried_events, *engine.started_event(start)]
        record = self.write(record, [*carried, start], events)
        faults.point("after_start_commit", step.name)
        return record

    def _run_step(self, cursor: Cursor, name: str, attempt: int, step: Step, saga: Saga) -> Encoded:
        """The step's encoded result; a result that cannot be stored fails the step."""
        data = decode(cursor.record.input)
        try:
            result = self.attempts(
                cursor, name, attempt, step.retry, step.timeout, step.fn, data, step.transactional
            )
            return encode(result, f"result of step {name!r}", self.payload_limit)
        except INFRASTRUCTURE_ERRORS:
            raise
        except Exception as error:
            raise self.fail(cursor.record, name, error, saga) from error

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
    ) -> Any:
        """Run ``action`` until it succeeds or ``policy`` gives up; each retry durable first.

        A transactional action runs inside a store transaction that also
        records its success: ``cursor.record`` then shows it succeeded.
        """
        # The first attempt runs outside tenacity, so that the usual case (it succeeds)
        # costs no retry machinery; its error is handed to tenacity, which decides.
        began = time.monotonic()
        try:
            return self._attempt(cursor, name, attempt, timeout, action, data, transactional)
        except Exception as error:
            first = error
        took = time.monotonic() - began  # how long the attempt ran, apart from the wait after
        last_error = engine.describe(first)
        for retry_state in policy.retrying(attempts_used=attempt - 1):
            with retry_state:
                number = attempt - 1 + retry_state.retry_state.attempt_number
                if number == attempt:
                    raise first
                record = cursor.record
                start = engine.start(record, _recorded(record, name), number)
                events = engine.started_event(start, last_error, took)
                cursor.record = self.write(record, [start], events)
                began = time.monotonic()
                try:
                    return self._attempt(cursor, name, number, timeout, action, data, transactional)
                except Exception as error:
                    last_error, took = engine.describe(error), time.monotonic() - began
                    raise
        raise AssertionError("unreachable: tenacity re-raises")  # pragma: no cover

    def _attempt(
        self,
        cursor: Cursor,
        name: str,
        number: int,
        timeout: float | None,
        action: Action,
        data: Any,
        transactional: bool,
    ) -> Any:
        """Attempt ``number`` of step ``name``'s action (its start is already durable)."""
        context = self._context(cursor.record, name, number, data)
        if transactional:
            result = self.transactional(cursor, context, action, self._succeeded)
        else:
            result = _call(action, context, timeout, name)
        faults.point("after_action", name)
        return result

    def transactional(
        self,
        cursor: Cursor,
        context: StepContext,
        action: Action,
        outcome: Callable[[SagaRecord, str, Any], tuple[StepWrite, Event]],
    ) -> Any:
        """Run ``action`` with ``context.session`` in the transaction that records ``outcome``
        (success, or the compensation done); advance ``cursor``."""
        name = context.step
        change: list[Commit] = []

        def work(session: Any) -> Any:
            return _call(action, dataclasses.replace(context, session=session), None, name)

        def record_outcome(result: Any) -> Commit:
            write, event = outcome(cursor.record, name, result)
            change.append(engine.commit(cursor.record, [write], [event]))
            return change[-1]

        result, stop = self.store.transact(work, record_outcome, self.lease_ttl)
        cursor.record = engine.apply(cursor.record, change[-1], stop)
        return result

    def _succeeded(self, record: SagaRecord, name: str, result: Any) -> tuple[StepWrite, Event]:
        encoded = encode(result, f"result of step {name!r}", self.payload_limit)
        return engine.succeeded(record, name, encoded)

    def _context(self, record: SagaRecord, name: str, attempt: int, data: Any) -> StepContext:
        return StepContext(
            saga_id=record.id,
            saga_name=record.name,
            step=name,
            attempt=attempt,
            epoch=record.epoch,
            data=data,
            results=results_of(record),
        )

    # -- failing and unwinding -------------------------------------------------------------

    def fail(
        self, record: SagaRecord, name: str, error: BaseException | str, saga: Saga | None
    ) -> SagaFailed:
        """Record step ``name``'s failure, unwind if allowed; return what to raise."""
        text = error if isinstance(error, str) else engine.describe(error)
        write, event = engine.failed(record, name, text, outcome_unknown=isinstance(error, str))
        why = engine.no_unwinding(record, error)
        if why is not None:
            stop = engine.moved(record, SagaStatus.FAILED, reason=why)
            record = self.write(record, [write], [event, stop], SagaStatus.FAILED, text)
            return SagaFailed(record.id, SagaStatus.FAILED, name)
        turn = engine.moved(record, SagaStatus.COMPENSATING, reason=f"step {name!r} failed")
        record = self.write(record, [write], [event, turn], SagaStatus.COMPENSATING, text)
        return self._unwound(record, saga, name)

    def cancelled(
        self, record: SagaRecord, saga: Saga | None, not_run: Sequence[str] = ()
    ) -> SagaFailed:
        """Stop as the store asked (a cancel request or a passed deadline) and unwind;
        return what to raise. The saga ends ``cancelled`` or ``compensated``.
        ``not_run`` are steps just recorded as started whose actions were not called."""
        record = self.store.load(record.id) or record  # which of the two it was
        skips, skipped = engine.not_run(record, not_run)
        turn = engine.moved(record, SagaStatus.COMPENSATING, reason=engine.stop_reason(record))
        record = self.write(record, skips, [*skipped, turn], SagaStatus.COMPENSATING)
        return self._unwound(record, saga, None)

    def _unwound(self, record: SagaRecord, saga: Saga | None, name: str | None) -> SagaFailed:
        try:
            record = self.unwind(record, saga)
        except SagaFailed as failure:
            failure.failed_step = name
            return failure
        return SagaFailed(record.id, record.status, name)

    def unwind(self, record: SagaRecord, saga: Saga | None, fresh: bool = False) -> SagaRecord:
        """Compensate every step that may have acted, newest first, then finish."""
        self.check_compensations(record, saga)
        faults.point("before_unwind", None)
        for step in engine.undo_stack(record):
            record = self._undo(record, step, saga, fresh)
        status = engine.unwound_status(record)
        settled, events = engine.nothing_to_undo(record)  # no step of it stays running
        faults.point("before_final_commit", None)
        record = self.write(record, settled, [*events, engine.moved(record, status)], status)
        faults.point("after_final_commit", None)
        return record

    def check_compensations(self, record: SagaRecord, saga: Saga | None) -> None:
        """Resolve every compensation still to run: an untrusted stored reference is
        refused (``UnsafeReferenceError``) before any compensation runs."""
        for step in engine.undo_stack(record):
            self._compensation(record, step, saga)

    def _undo(
        self, record: SagaRecord, step: StepRecord, saga: Saga | None, fresh: bool
    ) -> SagaRecord:
        call, policy = self._compensation(record, step, saga)
        if call is None:
            return record
        used = 0 if fresh else step.undo_attempt
        if not policy.allows(used + 1):
            return self._undo_exhausted(record, step.name, "compensation attempts used up")
        cursor = Undoing(record)
        try:
            for retry_state in policy.retrying(attempts_used=used):
                with retry_state:
                    if self._undo_attempt(cursor, step, call):
                        return cursor.record  # transactional: "compensated" committed with it
        except INFRASTRUCTURE_ERRORS:
            raise
        except Exception as error:
            return self._undo_exhausted(cursor.record, step.name, engine.describe(error), error)
        write, event = engine.undone(cursor.record, step.name)
        record = self.write(cursor.record, [write], [event])
        faults.point("after_undo_commit", step.name)
        return record

    def _undo_attempt(self, cursor: Undoing, step: StepRecord, call: Action) -> bool:
        """One attempt of ``step``'s compensation, its start durable first (with the error of
        the attempt before, if that one failed). True when the compensation is transactional:
        its "compensated" record then committed with its own writes."""
        write, started = engine.undo_started(cursor.record, step.name)
        events = [
            *engine.undo_attempt_failed(cursor.record, step.name, cursor.error, cursor.took),
            started,
        ]
        faults.point("before_undo", step.name)
        cursor.record = self.write(cursor.record, [write], events)
        cursor.error = None
        began = time.monotonic()
        context = self._undo_context(cursor.record, step.name)
        try:
            if step.transactional:  # the undo and its record commit together
                self.transactional(cursor, context, call, undone_outcome)
            else:
                _call(call, context, None, step.name)
        except Exception as error:
            cursor.error = engine.describe(error)  # written with the next attempt's start
            cursor.took = time.monotonic() - began
            raise
        faults.point("after_undo_commit" if step.transactional else "after_undo", step.name)
        return step.transactional

    def _undo_exhausted(
        self, record: SagaRecord, name: str, text: str, cause: BaseException | None = None
    ) -> SagaRecord:
        write, event = engine.undo_failed(record, name, text)
        stop = engine.moved(record, SagaStatus.FAILED, reason=f"compensation of {name!r} failed")
        # The saga's error stays the one that made it unwind; this one is on the step.
        record = self.write(record, [write], [event, stop], SagaStatus.FAILED)
        raise compensation_failed(record, name, text, cause) from cause

    def _compensation(
        self, record: SagaRecord, step: StepRecord, saga: Saga | None
    ) -> tuple[Action | None, RetryPolicy]:
        if record.kind == "declarative":
            assert saga is not None
            declared = saga.by_name(step.name)
            if declared is None or declared.undo is None:
                return None, declared.undo_retry if declared else RetryPolicy()
            undo = declared.undo
            return (lambda context: undo(context)), declared.undo_retry
        if step.compensation_ref is None:
            return None, RetryPolicy()
        function = self.resolver.resolve(step.compensation_ref)
        args = decode(step.args) or {"args": [], "kwargs": {}}

        def undo_call(context: StepContext) -> Any:
            return function(context.result, *args["args"], **args["kwargs"])

        return undo_call, DEFAULT_COMPENSATION_RETRY

    def _undo_context(self, record: SagaRecord, name: str) -> StepContext:
        step = _recorded(record, name)
        result = decode(step.result) if step.result is not None else None
        return dataclasses.replace(
            self._context(record, name, step.undo_attempt, decode(record.input)),
            result=result,
            compensating=True,
        )


@dataclasses.dataclass
class Undoing(Cursor):
    """A compensation's retries: the latest record, and the error of the last attempt
    until the next attempt's start records it (as ``attempt_failed`` is for a step)."""

    error: str | None = None
    took: float | None = None  # how long that attempt ran


def undone_outcome(record: SagaRecord, name: str, _result: Any) -> tuple[StepWrite, Event]:
    """What a transactional compensation commits with its own writes: "compensated"."""
    return engine.undone(record, name)


def results_of(record: SagaRecord) -> Mapping[str, Any]:
    """Results of the steps that succeeded, by name, decoded when read."""
    return StepResults(record)


class StepResults(Mapping[str, Any]):
    """``ctx.results``: a read-only mapping that decodes a result only when asked for it,
    so a step of a 10,000-step saga does not decode 10,000 results it never reads."""

    def __init__(self, record: SagaRecord) -> None:
        self._record = record

    def _done(self, name: str) -> StepRecord | None:
        step = self._record.step(name)
        if step is None or step.status is not StepStatus.SUCCEEDED or step.result is None:
            return None
        return step

    def __getitem__(self, name: str) -> Any:
        step = self._done(name)
        if step is None:
            raise KeyError(name)
        return decode(step.result)

    def __iter__(self) -> Iterator[str]:
        return (s.name for s in self._record.steps if self._done(s.name) is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return repr(dict(self))


def _recorded(record: SagaRecord, name: str) -> StepRecord:
    step = record.step(name)
    assert step is not None, name
    return step


def _call(action: Action, context: StepContext, timeout: float | None, name: str) -> Any:
    """Run ``action`` as the current step; give up waiting after ``timeout`` seconds."""
    if timeout is None:
        with entered(context):
            return _awaited(action(context))
    outcome: dict[str, Any] = {}
    snapshot = contextvars.copy_context()

    def target() -> None:
        with entered(context):
            try:
                outcome["result"] = _awaited(action(context))
            except BaseException as error:  # noqa: BLE001 - handed to the waiting thread
                outcome["error"] = error

    thread = threading.Thread(target=snapshot.run, args=(target,), daemon=True)
    thread.name = f"saga-step-{name}"
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise StepTimeoutError(name, timeout)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def _awaited(result: Any) -> Any:
    """An async step or compensation driven to its end when a sync driver runs it
    (for example ``saga recover`` finishing a saga whose steps are coroutines)."""
    if not inspect.isawaitable(result):
        return result

    async def wait_for_it() -> Any:
        return await result

    return asyncio.run(wait_for_it())
