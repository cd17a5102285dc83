"""The asyncio driver: the same decisions as ``runner.py``, carried out with tasks.

The engine decides; this module only awaits. Store calls go through the
async form of the store (``saga.store.async_store``): on PostgreSQL,
creations and commits are native async statements; everything else, and
everything on SQLite, is the sync store in worker threads
(``saga.adapters.threaded_async``; docs/async.md has the measurements). Async step
functions are awaited on the caller's event loop; sync ones run in a worker
thread. Independent steps run as concurrent tasks, bounded by
``max_concurrency``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from saga import engine, faults
from saga.codec import decode, encode
from saga.context import StepContext, entered
from saga.definition import Saga
from saga.errors import INFRASTRUCTURE_ERRORS, SagaFailed, StepTimeoutError
from saga.failure import compensation_failed
from saga.frontier import Frontier
from saga.policy import RetryPolicy
from saga.ports import AsyncSagaStore, Event, SagaRecord, StepRecord, StepWrite
from saga.runner import Action, Runner, Undoing, undone_outcome
from saga.status import SagaStatus, StepKind, StepStatus

T = TypeVar("T")


@dataclasses.dataclass
class AsyncRunner:
    """Executes sagas on an event loop for one ``AsyncCoordinator``."""

    sync: Runner
    store: AsyncSagaStore

    async def write(
        self,
        record: SagaRecord,
        writes: Sequence[StepWrite] = (),
        events: Sequence[Event] = (),
        status: SagaStatus | None = None,
        error: str | None = None,
    ) -> SagaRecord:
        change = engine.commit(record, writes, events, status, error)
        cancel = await self.store.commit(change)
        return engine.apply(record, change, cancel)

    # -- forward ---------------------------------------------------------------------------

    async def forward(
        self, saga: Saga, record: SagaRecord, started: Sequence[engine.RunStep] = ()
    ) -> SagaRecord:
        """Run the remaining steps (concurrently where allowed); unwind and raise on failure."""
        return await Forward(self, saga, record).run(list(started))

    async def _write_start(
        self, cursor: engine.Cursor, start: StepWrite, events: Sequence[Event]
    ) -> None:
        """Commit the start of a retry and advance ``cursor``, even when the step is
        cancelled meanwhile: ``cursor`` must say what the store holds, because a
        cancelled step is then recorded (failed) from it."""
        writing = asyncio.ensure_future(self.write(cursor.record, [start], events))
        try:
            cursor.record = await asyncio.shield(writing)
        except asyncio.CancelledError:
            cursor.record = await writing
            raise

    async def attempts(
        self,
        cursor: engine.Cursor,
        name: str,
        attempt: int,
        policy: RetryPolicy,
        timeout: float | None,
        action: Action,
        data: Any = None,
        transactional: bool = False,
    ) -> Any:
        """Run ``action`` until it succeeds or ``policy`` gives up; each retry durable first.

        A transactional action runs in a worker thread, inside the store
        transaction that records its success (see ``Runner.transactional``).
        """
        # As in Runner.attempts: the first attempt outside tenacity, its error to tenacity.
        began = time.monotonic()
        try:
            return await self._attempt(cursor, name, attempt, timeout, action, data, transactional)
        except Exception as error:
            first = error
        took = time.monotonic() - began  # how long the attempt ran, apart from the wait after
        last_error = engine.describe(first)
        async for retry_state in policy.async_retrying(attempts_used=attempt - 1):
            with retry_state:
                number = attempt - 1 + retry_state.retry_state.attempt_number
                if number == attempt:
                    raise first
                start = engine.start(cursor.record, _recorded(cursor.record, name), number)
                events = engine.started_event(start, last_error, took)
                await self._write_start(cursor, start, events)
                began = time.monotonic()
                try:
                    return await self._attempt(
                        cursor, name, number, timeout, action, data, transactional
                    )
                except Exception as error:
                    last_error, took = engine.describe(error), time.monotonic() - began
                    raise
        raise AssertionError("unreachable: tenacity re-raises")  # pragma: no cover

    async def _attempt(
        self,
        cursor: engine.Cursor,
        name: str,
        number: int,
        timeout: float | None,
        action: Action,
        data: Any,
        transactional: bool,
    ) -> Any:
        """Attempt ``number`` of step ``name``'s action (its start is already durable)."""
        context = self.sync._context(cursor.record, name, number, data)
        if transactional:
            result = await asyncio.to_thread(
                self.sync.transactional, cursor, context, action, self.sync._succeeded
            )
        else:
            result = await call(action, context, timeout, name)
        faults.point("after_action", name)
        return result

    # -- failing and unwinding ----------------------------------------------------------------

    async def fail(
        self, record: SagaRecord, name: str, error: BaseException | str, saga: Saga | None
    ) -> SagaFailed:
        """Record step ``name``'s failure, unwind if allowed; return what to raise."""
        text = error if isinstance(error, str) else engine.describe(error)
        write, event = engine.failed(record, name, text, outcome_unknown=isinstance(error, str))
        why = engine.no_unwinding(record, error)
        if why is not None:
            stop = engine.moved(record, SagaStatus.FAILED, reason=why)
            record = await self.write(record, [write], [event, stop], SagaStatus.FAILED, text)
            return SagaFailed(record.id, SagaStatus.FAILED, name)
        turn = engine.moved(record, SagaStatus.COMPENSATING, reason=f"step {name!r} failed")
        record = await self.write(record, [write], [event, turn], SagaStatus.COMPENSATING, text)
        return await self._unwound(record, saga, name)

    async def cancelled(
        self, record: SagaRecord, saga: Saga | None, not_run: Sequence[str] = ()
    ) -> SagaFailed:
        """Stop as the store asked and unwind; see ``Runner.cancelled``."""
        record = await self.store.load(record.id) or record
        skips, skipped = engine.not_run(record, not_run)
        turn = engine.moved(record, SagaStatus.COMPENSATING, reason=engine.stop_reason(record))
        record = await self.write(record, skips, [*skipped, turn], SagaStatus.COMPENSATING)
        return await self._unwound(record, saga, None)

    async def _unwound(self, record: SagaRecord, saga: Saga | None, name: str | None) -> SagaFailed:
        try:
            record = await self.unwind(record, saga)
        except SagaFailed as failure:
            failure.failed_step = name
            return failure
        return SagaFailed(record.id, record.status, name)

    async def unwind(
        self, record: SagaRecord, saga: Saga | None, fresh: bool = False
    ) -> SagaRecord:
        """Compensate every step that may have acted, newest first, then finish."""
        self.sync.check_compensations(record, saga)
        faults.point("before_unwind", None)
        for step in engine.undo_stack(record):
            record = await self._undo(record, step, saga, fresh)
        status = engine.unwound_status(record)
        settled, events = engine.nothing_to_undo(record)  # no step of it stays running
        faults.point("before_final_commit", None)
        record = await self.write(record, settled, [*events, engine.moved(record, status)], status)
        faults.point("after_final_commit", None)
        return record

    async def _undo(
        self, record: SagaRecord, step: StepRecord, saga: Saga | None, fresh: bool
    ) -> SagaRecord:
        undo, policy = self.sync._compensation(record, step, saga)
        if undo is None:
            return record
        used = 0 if fresh else step.undo_attempt
        if not policy.allows(used + 1):
            return await self._undo_exhausted(record, step.name, "compensation attempts used up")
        cursor = Undoing(record)
        try:
            async for retry_state in policy.async_retrying(attempts_used=used):
                with retry_state:
                    if await self._undo_attempt(cursor, step, undo):
                        return cursor.record  # transactional: "compensated" committed with it
        except INFRASTRUCTURE_ERRORS:
            raise
        except Exception as error:
            text = engine.describe(error)
            return await self._undo_exhausted(cursor.record, step.name, text, error)
        write, event = engine.undone(cursor.record, step.name)
        record = await self.write(cursor.record, [write], [event])
        faults.point("after_undo_commit", step.name)
        return record

    async def _undo_attempt(self, cursor: Undoing, step: StepRecord, undo: Action) -> bool:
        """One attempt of ``step``'s compensation; see ``Runner._undo_attempt``."""
        write, started = engine.undo_started(cursor.record, step.name)
        events = [
            *engine.undo_attempt_failed(cursor.record, step.name, cursor.error, cursor.took),
            started,
        ]
        faults.point("before_undo", step.name)
        cursor.record = await self.write(cursor.record, [write], events)
        cursor.error = None
        began = time.monotonic()
        context = self.sync._undo_context(cursor.record, step.name)
        try:
            if step.transactional:  # the undo and its record commit together
                await asyncio.to_thread(
                    self.sync.transactional, cursor, context, undo, undone_outcome
                )
            else:
                await call(undo, context, None, step.name)
        except Exception as error:
            cursor.error = engine.describe(error)  # written with the next attempt's start
            cursor.took = time.monotonic() - began
            raise
        faults.point("after_undo_commit" if step.transactional else "after_undo", step.name)
        return step.transactional

    async def _undo_exhausted(
        self, record: SagaRecord, name: str, text: str, cause: BaseException | None = None
    ) -> SagaRecord:
        write, event = engine.undo_failed(record, name, text)
        stop = engine.moved(record, SagaStatus.FAILED, reason=f"compensation of {name!r} failed")
        # The saga's error stays the one that made it unwind; this one is on the step.
        record = await self.write(record, [write], [event, stop], SagaStatus.FAILED)
        raise compensation_failed(record, name, text, cause) from cause


@dataclasses.dataclass(frozen=True, slots=True)
class _Outcome:
    step: StepRecord
    result: Any
    error: BaseException | str | None
    ended: float


@dataclasses.dataclass(slots=True)
class _Branch:
    """A step in flight: its task's view of the step, whether it may be cancelled,
    and when it ended if it was."""

    name: str
    cursor: engine.Cursor
    cancellable: bool
    cancelled_at: float | None = None


@dataclasses.dataclass
class Forward:
    """One forward run of a declarative saga: tasks for the steps in flight.

    The first failure is recorded at once, the saga turning ``compensating``
    in the same commit. Steps in flight whose action is an ``async``
    function (compensatable, not transactional) are then cancelled and
    recorded failed, so that they are compensated; the others (sync
    functions in worker threads, transactional steps, pivots) cannot be
    stopped safely and are waited for. Each completion after the failure is
    its own commit, so the unwinding goes newest first by completion.
    """

    runner: AsyncRunner
    saga: Saga
    record: SagaRecord
    carried: list[StepWrite] = dataclasses.field(default_factory=list)
    carried_events: list[Event] = dataclasses.field(default_factory=list)
    failure: tuple[str, BaseException | str] | None = None
    turned: bool = False
    cancelled: bool = False
    not_run: list[str] = dataclasses.field(default_factory=list)
    completed: list[str] = dataclasses.field(default_factory=list)
    running: dict[asyncio.Task[_Outcome], _Branch] = dataclasses.field(default_factory=dict)
    why_cancelled: str = "cancelled"
    frontier: Frontier = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.frontier = Frontier(self.saga, self.record)

    async def run(self, started: list[engine.RunStep]) -> SagaRecord:
        """Carry the saga forward; ``started`` steps are already durably started."""
        self._launch(started)
        try:
            while True:
                if self._stopping and not self.running:
                    if self._resumes_past_pivot():
                        continue
                    raise await self._stop()
                if not self._stopping:
                    decision = self.frontier.ready(
                        self._ahead(),
                        {branch.name for branch in self.running.values()},
                        self.saga.max_concurrency - len(self.running),
                    )
                    if isinstance(decision, engine.Complete):
                        return await self._complete()
                    if isinstance(decision, engine.GiveUp):
                        text = f"gave up after {decision.attempts} attempts"
                        await self._fail_first(decision.name, text)
                        continue
                    if decision or self.carried:
                        self._launch(await self._start(decision))
                    if not self.running:
                        continue
                done, _ = await asyncio.wait(self.running, return_when=asyncio.FIRST_COMPLETED)
                outcomes = sorted((self._outcome(task) for task in done), key=lambda o: o.ended)
                # Each branch wrote only its own step: their states enter the record at once.
                self.record = engine.ahead(self.record, [StepWrite(o.step) for o in outcomes])
                for outcome in outcomes:
                    await self._collect(outcome)
                    if self._stopping:
                        await self._flush()
        finally:
            await self._abandon()

    def stop_requested(self) -> None:
        """The lease renewal found a cancel request or a passed deadline: stop now,
        cancelling the async steps in flight (called on the event loop's thread)."""
        if self._stopping or engine.pivot_may_have_acted(self._ahead()):
            return
        self.cancelled = True
        self._cancel_in_flight("stopped: cancel requested or deadline passed")

    @property
    def _stopping(self) -> bool:
        return self.failure is not None or self.cancelled

    def _resumes_past_pivot(self) -> bool:
        """A stop request came while a pivot was in flight and the pivot succeeded:
        the saga can only go forward now, so the request is ignored."""
        if self.failure is None and self.cancelled and engine.past_pivot(self._ahead()):
            self.cancelled = False
            return True
        return False

    def _ahead(self) -> SagaRecord:
        return engine.ahead(self.record, self.carried)

    async def _start(self, steps: list[engine.RunStep]) -> list[engine.RunStep]:
        before = self._ahead()
        starts, started = engine.start_all(self.saga, before, steps)
        events = [*self.carried_events, *started]
        faults.point("before_start_commit", steps[0].name if steps else None)
        self.record = await self.runner.write(self.record, [*self.carried, *starts], events)
        faults.point("after_start_commit", steps[0].name if steps else None)
        self.carried, self.carried_events = [], []
        if self.record.stop and not engine.pivot_may_have_acted(before):
            self.cancelled = True
        if self._stopping:  # started but never launched: marked skipped when unwinding
            self.not_run.extend(step.name for step in steps)
            return []
        return steps

    def _launch(self, steps: list[engine.RunStep]) -> None:
        for step in steps:
            declared = self.saga.by_name(step.name)
            assert declared is not None
            cursor = engine.Cursor(self.record)
            cancellable = (
                declared.kind is StepKind.COMPENSATABLE
                and not declared.transactional
                and _is_async(declared.fn)
            )
            branch = _Branch(step.name, cursor, cancellable)
            task = asyncio.create_task(self._branch(step, branch), name=f"saga-step-{step.name}")
            self.running[task] = branch

    async def _branch(self, step: engine.RunStep, branch: _Branch) -> _Outcome:
        declared = self.saga.by_name(step.name)
        assert declared is not None
        cursor = branch.cursor
        data = decode(self.record.input)
        try:
            result = await self.runner.attempts(
                cursor,
                step.name,
                step.attempt,
                declared.retry,
                declared.timeout,
                declared.fn,
                data,
                declared.transactional,
            )
            # A result that cannot be stored fails its step (PayloadError), like any error.
            encode(result, f"result of step {step.name!r}", self.runner.sync.payload_limit)
        except INFRASTRUCTURE_ERRORS:
            raise
        except asyncio.CancelledError:
            branch.cancelled_at = time.monotonic()  # its place in the completion order
            raise
        except Exception as error:  # collected by the loop, then unwound
            return _Outcome(_recorded(cursor.record, step.name), None, error, time.monotonic())
        return _Outcome(_recorded(cursor.record, step.name), result, None, time.monotonic())

    def _outcome(self, task: asyncio.Task[_Outcome]) -> _Outcome:
        """How a finished task ended; a cancelled one counts as a failed attempt."""
        branch = self.running.pop(task)
        if task.cancelled():
            step = _recorded(branch.cursor.record, branch.name)
            ended = branch.cancelled_at or time.monotonic()
            return _Outcome(step, None, self.why_cancelled, ended)
        return task.result()  # a lost lease or a dead database propagates from here

    def _cancel_in_flight(self, why: str) -> None:
        self.why_cancelled = why
        for task, branch in self.running.items():
            if branch.cancellable:
                task.cancel()

    async def _collect(self, outcome: _Outcome) -> None:
        """Take a finished branch's outcome (its step's state is already in the record)."""
        self.completed.append(outcome.step.name)
        if outcome.error is None and outcome.step.status is StepStatus.SUCCEEDED:
            self.frontier.succeeded(outcome.step.name)
            return  # transactional: its success was recorded with its own writes
        name = outcome.step.name
        if outcome.error is None:
            encoded = encode(
                outcome.result, f"result of step {name!r}", self.runner.sync.payload_limit
            )
            # self.record holds this step's latest state; the carried writes are others'.
            write, event = engine.succeeded(self.record, name, encoded)
            self.frontier.succeeded(name)
        elif not self._stopping:
            await self._fail_first(name, outcome.error)
            return
        else:
            write, event = engine.failed(self._ahead(), name, _text(outcome.error))
        self.carried.append(write)
        self.carried_events.append(event)

    async def _fail_first(self, name: str, error: BaseException | str) -> None:
        """Record the first failure and turn ``compensating`` in one commit; cancel
        the async steps in flight. While a pivot may have acted the turn waits
        for the steps in flight: if the pivot succeeded, the saga ends ``failed``."""
        self.failure = (name, error)
        ahead = self._ahead()
        if engine.pivot_may_have_acted(ahead):
            return
        self._cancel_in_flight(f"cancelled: step {name!r} failed")
        text = _text(error)
        write, event = engine.failed(ahead, name, text, outcome_unknown=isinstance(error, str))
        turn = engine.moved(self.record, SagaStatus.COMPENSATING, reason=f"step {name!r} failed")
        writes, events = [*self.carried, write], [*self.carried_events, event, turn]
        self.carried, self.carried_events = [], []
        self.record = await self.runner.write(
            self.record, writes, events, SagaStatus.COMPENSATING, text
        )
        self.turned = True

    async def _flush(self) -> None:
        """Commit what the last completion left to write (while stopping: one commit each)."""
        if self.carried:
            self.record = await self.runner.write(self.record, self.carried, self.carried_events)
            self.carried, self.carried_events = [], []

    async def _complete(self) -> SagaRecord:
        done = engine.moved(self.record, SagaStatus.COMPLETED)
        faults.point("before_final_commit", None)
        record = await self.runner.write(
            self.record, self.carried, [*self.carried_events, done], SagaStatus.COMPLETED
        )
        faults.point("after_final_commit", None)
        return record

    async def _stop(self) -> BaseException:
        await self._flush()
        if self.saga.max_concurrency > 1:  # completion order comes from the database
            reloaded = await self.runner.store.load(self.record.id) or self.record
            self.record = engine.in_completion_order(reloaded, self.completed)
        if self.failure is None:
            return await self.runner.cancelled(self.record, self.saga, self.not_run)
        name, error = self.failure
        if self.turned:
            failure = await self.runner._unwound(self.record, self.saga, name)
        else:
            failure = await self.runner.fail(self.record, name, error, self.saga)
        if isinstance(error, BaseException):
            failure.__cause__ = error
        return failure

    async def _abandon(self) -> None:
        """Leaving early (a lost lease, a dead database, the caller cancelled):
        stop waiting for the steps in flight; recovery finishes the saga."""
        tasks = list(self.running)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


def _text(error: BaseException | str) -> str:
    return error if isinstance(error, str) else engine.describe(error)


async def call(action: Action, context: StepContext, timeout: float | None, name: str) -> Any:
    """Run ``action`` as the current step: awaited if async, in a thread if not."""
    with entered(context):
        running = action(context) if _is_async(action) else asyncio.to_thread(action, context)
        scope = asyncio.timeout(timeout)
        try:
            async with scope:
                result = await running
        except TimeoutError:
            if timeout is not None and scope.expired():
                raise StepTimeoutError(name, timeout) from None
            raise
        if inspect.isawaitable(result):  # a sync wrapper that returned a coroutine
            result = await result
        return result


def _is_async(action: Callable[..., Any]) -> bool:
    while isinstance(action, functools.partial):
        action = action.func
    return inspect.iscoroutinefunction(action)


def _recorded(record: SagaRecord, name: str) -> StepRecord:
    step = record.step(name)
    assert step is not None, name
    return step
