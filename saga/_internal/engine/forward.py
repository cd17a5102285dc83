"""A declarative saga going forward: one flow for one step at a time and for many.

Every start is durable before its step runs; a step's success travels with the
next commit (the starts it made ready, or the final status). Steps run as
branches, which the driver runs beside each other when the saga allows it
(``max_concurrency``) or one after the other in the caller's thread when it
does not. The first failure is recorded at once, the saga turning
``compensating`` in the same commit (so a crash from then on unwinds); the
branches that may be cancelled are cancelled, the others are waited for, and
each completion after the turn is its own commit, so the finish times the
database gives are the completion order the unwinding follows.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import inspect
import time
from collections.abc import Callable, Mapping
from typing import Any

from saga._internal.codec import decode, encode_result
from saga._internal.definition import Saga
from saga._internal.engine import reconcile, records, unwind
from saga._internal.engine.attempts import attempts, recorded
from saga._internal.engine.carried import Carried
from saga._internal.engine.decisions import Complete, Cursor, GiveUp, RunStep, past_pivot
from saga._internal.engine.decisions import pivot_may_have_acted as may_have_acted
from saga._internal.engine.effects import (
    DRAINING,
    WAIT,
    Branch,
    CancelInFlight,
    CodeRefs,
    Finished,
    Flow,
    Launch,
    Load,
    ReadHistory,
    Waited,
    hand_back,
    write,
)
from saga._internal.engine.fault_points import fault
from saga._internal.engine.frontier import Frontier
from saga._internal.engine.targets import Declared, Target
from saga._internal.errors import INFRASTRUCTURE_ERRORS, SagaFailed, SagaHandedBack
from saga._internal.policy import RetryPolicy
from saga._internal.ports import Event, SagaRecord, StepRecord, StepWrite
from saga._internal.status import SagaStatus, StepKind, StepStatus

STOPPED = "stopped: cancel requested or deadline passed"


class Phase(enum.Enum):
    """Where a forward run stands; it changes only by ``Phase.after`` (``_NEXT``)."""

    GOING = "going"  # steps start as they become ready
    CANCELLING = "cancelling"  # a stop was asked: nothing new starts, then it unwinds
    PAUSING = "pausing"  # paused: nothing new starts, then it is handed back, not unwound
    FAILING = "failing"  # a step failed; the turn waits for a pivot in flight to end
    TURNED = "turned"  # the failure and the turn to compensating are recorded

    def after(self, cue: Cue) -> Phase:
        """The phase ``cue`` leads to; a cue the table does not hold is a bug."""
        return _NEXT[self, cue]


class Cue(enum.Enum):
    STOP_ASKED = "a cancel request or a passed deadline, no pivot having acted"
    PAUSED = "an operator paused the saga, or a step's retries ran out (on_exhausted)"
    FAILED = "a step failed for good"
    TURN_RECORDED = "the saga turned compensating in the failure's commit"
    PIVOT_PASSED = "the pivot in flight when the stop came succeeded: forward only"


_NEXT = {
    (Phase.GOING, Cue.STOP_ASKED): Phase.CANCELLING,
    (Phase.GOING, Cue.PAUSED): Phase.PAUSING,
    (Phase.GOING, Cue.FAILED): Phase.FAILING,
    (Phase.FAILING, Cue.TURN_RECORDED): Phase.TURNED,
    (Phase.CANCELLING, Cue.PIVOT_PASSED): Phase.GOING,
}


class Forward:
    """One forward run of a declarative saga's remaining steps."""

    def __init__(
        self,
        saga: Saga,
        record: SagaRecord,
        payload_limit: int,
        resolver: CodeRefs,
        budgets: Mapping[str, int] | None = None,
    ) -> None:
        self.saga, self.record = saga, record
        self.paused_why = ""
        self.payload_limit, self.resolver = payload_limit, resolver
        self.frontier = Frontier(saga, record, budgets)
        self.carried = Carried()
        self.running: set[str] = set()
        self.phase = Phase.GOING
        self.failure: tuple[str, BaseException | str] | None = None  # once FAILING
        # The process is stopping: no new step starts, the saga is handed back (apart
        # from the phase: a failure or a stop request still unwinds).
        self.draining = False
        self.not_run: list[str] = []
        self.completed: list[str] = []
        self.did_not_happen: set[str] = set()  # reconciled: the attempt in doubt did not act

    def run(self, started: list[RunStep]) -> Flow[SagaRecord]:
        """Carry the saga forward; ``started`` steps are already durably started.
        Returns the completed record, or raises ``SagaFailed`` once it unwound."""
        if not started:  # carried on after a crash: ask about attempts in doubt first
            yield from self._reconcile()
        if started and self.record.stop:  # the commit that started them answered "stop"
            yield from self._asked_to_stop(self.record, cancel_in_flight=False)
            if self._stopping:  # a deadline passed while paused, say: they never run
                self.not_run.extend(run.name for run in started)
                started = []
        yield from self._launch(started)
        while True:
            if self._stopping and not self.running:
                if self._resumes_past_pivot():
                    continue
                raise (yield from self._stop())
            if not self._stopping:
                room = self.saga.max_concurrency - len(self.running)
                decision = self.frontier.ready(self._ahead(), self.running, room)
                if isinstance(decision, Complete):
                    return (yield from self._complete())
                if isinstance(decision, GiveUp):
                    yield from self._give_up(decision.name, self._given_up(decision))
                    continue
                if decision and not self.draining:
                    self.draining = yield DRAINING  # stopping: no new step starts here
                if self.draining:
                    if not self.running:
                        raise (yield from hand_back(self.record, *self.carried.take()))
                    yield from self._flush()  # what ended is durable while the rest ends
                elif decision or self.carried:
                    yield from self._launch((yield from self._start(decision)))
                if not self.running:
                    continue
            yield from self._collect_all((yield WAIT))

    def _reconcile(self) -> Flow[None]:
        """Ask the steps whose attempt is in doubt whether it happened: done, it is
        recorded succeeded and not run again; otherwise the answer is noted and the step
        runs again as it would have."""
        for step in reconcile.in_doubt(self.saga, self.record):
            answer = yield from reconcile.ask(self.saga, self.record, step, self.payload_limit)
            if answer.outcome == "done":
                limit = self.payload_limit
                self.record = yield from reconcile.recorded_done(self.record, step, answer, limit)
                self.frontier.succeeded(step.name)
                continue
            if answer.outcome == "not_done":
                self.did_not_happen.add(step.name)
            self.record = yield from reconcile.noted(self.record, step, answer)

    def _given_up(self, decision: GiveUp) -> BaseException | str:
        """Why a step whose attempts are used up failed: a text (its outcome unknown, so
        in doubt) unless its reconcile function said its last attempt did not happen."""
        if decision.name in self.did_not_happen:
            return reconcile.NotDone(f"{decision.why}; reconciled: it did not happen")
        return decision.why

    @property
    def _stopping(self) -> bool:
        return self.phase is not Phase.GOING

    def _ahead(self) -> SagaRecord:
        """The record as it will be once the carried writes are committed."""
        return self.carried.ahead(self.record)

    def _resumes_past_pivot(self) -> bool:
        """A stop request came while a pivot was in flight, and the pivot succeeded:
        the saga can only go forward now, so the request is ignored."""
        if self.phase is Phase.CANCELLING and past_pivot(self._ahead()):
            self.phase = self.phase.after(Cue.PIVOT_PASSED)
            return True
        return False

    def _start(self, steps: list[RunStep]) -> Flow[list[RunStep]]:
        """Commit the starts of ``steps`` with what the last completions left to write;
        the steps that may run now (none when the store answered "stop")."""
        before = self._ahead()
        starts, started = records.start_all(self.saga, before, steps)
        first = steps[0].name if steps else None
        yield from fault("before_start_commit", first)
        writes, events = self.carried.take()
        self.record = yield from write(self.record, [*writes, *starts], [*events, *started])
        yield from fault("after_start_commit", first)
        if self.record.stop:
            yield from self._asked_to_stop(before, cancel_in_flight=False)
        if self._stopping:  # started but never run: marked skipped when unwinding
            self.not_run.extend(step.name for step in steps)
            return []
        return steps

    def _launch(self, steps: list[RunStep]) -> Flow[None]:
        if steps:
            yield Launch(tuple(self._branch(step) for step in steps))
            self.running.update(step.name for step in steps)

    def _branch(self, run: RunStep) -> Branch:
        step = self.saga.by_name(run.name)
        assert step is not None
        cursor = Cursor(self.record)
        cancellable = (
            step.kind is StepKind.COMPENSATABLE and not step.transactional and is_async(step.fn)
        )
        limit, policy = self.payload_limit, step.retry
        if run.budget_from and policy.max_attempts is not None:  # a retry, or a resume
            policy = dataclasses.replace(policy, max_attempts=policy.max_attempts + run.budget_from)
        target = Declared(self.saga.name, self.saga.version, run.name, "action")
        flow = branch(cursor, run, policy, step.timeout, target, step.transactional, limit)
        return Branch(run.name, flow, cursor, cancellable)

    def _asked_to_stop(self, before: SagaRecord, cancel_in_flight: bool) -> Flow[None]:
        """The store answered "stop". Paused by an operator: nothing new starts, the steps
        in flight end, and the saga is handed back, past a pivot too. A cancel request or
        a passed deadline unwinds, unless a pivot may have acted (even unconfirmed, before
        a crash): then it goes forward only. Read once per answer, in the rare case."""
        if self._stopping:
            return
        stored: SagaRecord | None = yield Load(self.record.id)
        if stored is not None and stored.status is SagaStatus.PAUSED:
            self.phase, self.paused_why = self.phase.after(Cue.PAUSED), "operator pause"
        elif not may_have_acted(before):
            self.phase = self.phase.after(Cue.STOP_ASKED)  # the steps in flight end first
            if cancel_in_flight:
                yield CancelInFlight(STOPPED)

    def _collect_all(self, waited: Waited) -> Flow[None]:
        if waited.stop_requested:
            yield from self._asked_to_stop(self._ahead(), cancel_in_flight=True)
        # Each branch wrote only its own step: their states enter the record at once.
        self.record = records.ahead(self.record, [StepWrite(f.step) for f in waited.finished])
        for finished in waited.finished:
            self.running.discard(finished.name)
            yield from self._collect(finished)
            if self._stopping:
                yield from self._flush()

    def _collect(self, finished: Finished) -> Flow[None]:
        """Take a finished branch's outcome (its step's state is already in the record)."""
        name = finished.name
        self.completed.append(name)
        if finished.error is None and finished.step.status is StepStatus.SUCCEEDED:
            self.frontier.succeeded(name)  # transactional: recorded with its own writes
            return
        if finished.error is None:
            assert finished.encoded is not None
            # self.record holds this step's latest state; the carried writes are others'.
            write_, event = records.succeeded(self.record, name, finished.encoded)
            self.frontier.succeeded(name)
        elif not self._stopping:
            yield from self._give_up(name, finished.error)
            return
        else:
            write_, event = records.failed(self._ahead(), name, _text(finished.error))
        self.carried.add(write_, event)

    def _give_up(self, name: str, error: BaseException | str) -> Flow[None]:
        """Step ``name`` failed for good. If its retries ran out (an error its policy
        retries, or attempts that never returned) and it says ``on_exhausted="pause"``,
        it is recorded failed and the saga is parked ``paused`` once the steps in flight
        ended; otherwise the saga fails as ever (:meth:`_fail_first`)."""
        step = self.saga.by_name(name)
        # Used up: an error its policy retries, or attempts that never returned (even
        # those a reconcile function said did not happen).
        retried = isinstance(error, str | reconcile.NotDone) or (
            step is not None and step.retry.retries(error)
        )
        if not (retried and self.saga.pauses_when_exhausted(name)):
            yield from self._fail_first(name, error)
            return
        text = _text(error)
        self.carried.add(*records.failed(self._ahead(), name, text, isinstance(error, str)))
        self.phase = self.phase.after(Cue.PAUSED)
        self.paused_why = f"step {name!r} used up its retries: {text}"

    def _fail_first(self, name: str, error: BaseException | str) -> Flow[None]:
        """Record the first failure and turn ``compensating`` in one commit; cancel what
        may be cancelled. While a pivot may have acted the turn waits until the steps in
        flight ended: if the pivot succeeded, the saga can only end ``failed``."""
        self.phase, self.failure = self.phase.after(Cue.FAILED), (name, error)
        ahead = self._ahead()
        if may_have_acted(ahead):
            return
        yield CancelInFlight(f"cancelled: step {name!r} failed")
        text = _text(error)
        write_, event = records.failed(ahead, name, text, outcome_unknown=isinstance(error, str))
        turn = records.moved(self.record, SagaStatus.COMPENSATING, reason=f"step {name!r} failed")
        writes, events = self.carried.take()
        writes, events = [*writes, write_], [*events, event, turn]
        self.record = yield from write(self.record, writes, events, SagaStatus.COMPENSATING, text)
        self.phase = self.phase.after(Cue.TURN_RECORDED)

    def _flush(self) -> Flow[None]:
        """Commit what the last completion left to write (while stopping: one commit each)."""
        if self.carried:
            self.record = yield from write(self.record, *self.carried.take())

    def _complete(self) -> Flow[SagaRecord]:
        done = records.moved(self.record, SagaStatus.COMPLETED)
        yield from fault("before_final_commit")
        writes, events = self.carried.take()
        record = yield from write(self.record, writes, [*events, done], SagaStatus.COMPLETED)
        yield from fault("after_final_commit")
        return record

    def _park(self) -> Flow[SagaHandedBack]:
        """Everything in flight ended: record it with the saga ``paused`` and its lease
        given up (nothing compensated); return what to raise."""
        writes, events = self.carried.take()
        # Started in the commit that learnt of the pause, never run: the attempt stays
        # counted (resume gives the step its attempts again), and the history says why.
        reason = {"reason": "paused before it ran"}
        events += [Event("attempt_not_run", n, self._attempt(n), reason) for n in self.not_run]
        paused = records.moved(self.record, SagaStatus.PAUSED, reason=self.paused_why)
        self.record = yield from write(self.record, writes, [*events, paused], SagaStatus.PAUSED)
        return SagaHandedBack(self.record.id, SagaStatus.PAUSED, self.paused_why)

    def _attempt(self, name: str) -> int | None:
        step = self.record.step(name)
        return None if step is None else step.attempt

    def _stop(self) -> Flow[SagaFailed | SagaHandedBack]:
        """Everything in flight ended: record it, then unwind (or park the saga, paused);
        return what to raise."""
        if self.phase is Phase.PAUSING:
            return (yield from self._park())
        yield from self._flush()
        if self.saga.max_concurrency > 1:
            # Reloaded for the completion times the database recorded: parallel steps
            # are undone newest first by completion, not by start.
            reloaded = (yield Load(self.record.id)) or self.record
            self.record = records.in_completion_order(reloaded, self.completed)
        resolver = self.resolver
        if self.failure is None:
            return (yield from unwind.cancelled(resolver, self.record, self.saga, self.not_run))
        name, error = self.failure
        if self.phase is Phase.TURNED:
            failure = yield from unwind.unwound(resolver, self.record, self.saga, name)
        else:
            failure = yield from unwind.fail(resolver, self.record, name, error, self.saga)
        if isinstance(error, BaseException):
            failure.__cause__ = error
        return failure


def branch(
    cursor: Cursor,
    run: RunStep,
    policy: RetryPolicy,
    timeout: float | None,
    target: Target,
    transactional: bool,
    payload_limit: int,
) -> Flow[Finished]:
    """One step's attempts, as a branch: it ends with its outcome, an error included
    (a result that cannot be stored fails its step like any error)."""
    data = decode(cursor.record.input)
    try:
        result = yield from attempts(
            cursor,
            run.name,
            run.attempt,
            policy,
            timeout,
            target,
            data,
            transactional,
            payload_limit,
        )
        encoded = None
        if not transactional:
            encoded = encode_result(result, f"result of step {run.name!r}", payload_limit)
    except INFRASTRUCTURE_ERRORS:
        raise
    except Exception as error:  # collected by the forward flow, then unwound
        return Finished(recorded(cursor.record, run.name), None, error, time.monotonic())
    return Finished(recorded(cursor.record, run.name), encoded, None, time.monotonic(), result)


def cancelled(branch: Branch, why: str, at: float) -> Finished:
    """How a cancelled branch ended: a failed attempt (it may have acted), ``at`` its
    place in the completion order."""
    return Finished(recorded(branch.cursor.record, branch.name), None, why, at)


def is_async(action: Callable[..., Any]) -> bool:
    """Whether ``action`` is a coroutine function (seen through ``functools.partial``)."""
    while isinstance(action, functools.partial):
        action = action.func
    return inspect.iscoroutinefunction(action)


def _text(error: BaseException | str) -> str:
    return error if isinstance(error, str) else records.describe(error)


def retried_budgets(saga: Saga, record: SagaRecord) -> Flow[dict[str, int]]:
    """Where an operator's retry began the fresh budget of each step still running past
    the attempts its own policy allows (``budget_from`` on the retry's start of it), so
    that a saga resumed after a crash mid-retry keeps that budget. The history is read
    only for such a step: a saga never retried by an operator costs nothing more."""
    spent = {s.name for s in record.steps if s.status is StepStatus.RUNNING and _spent(saga, s)}
    if not spent:
        return {}
    budgets: dict[str, int] = {}
    for event in (yield ReadHistory(record.id)):
        begun = (event.detail or {}).get("budget_from")
        if event.kind == "step_started" and event.step in spent and isinstance(begun, int):
            budgets[event.step] = begun  # the latest retry's start wins
    return budgets


def _spent(saga: Saga, step: StepRecord) -> bool:
    declared = saga.by_name(step.name)
    limit = None if declared is None else declared.retry.max_attempts
    return limit is not None and step.attempt >= limit
