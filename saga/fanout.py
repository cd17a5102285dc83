"""Parallel steps for the thread driver: independent ready steps run at once.

The main thread owns the saga's record and makes every start durable before
submitting a step to the pool; worker threads only run actions (and commit
their own retries, which touch only their step's row). A failure stops new
starts and is recorded at once, with the saga turning ``compensating`` (so a
crash from then on unwinds); the steps still in flight are waited for (a
thread cannot be stopped), each completion is committed on its own so the
database's finish times give the completion order, then everything that may
have started is compensated, newest first by completion.
"""

from __future__ import annotations

import dataclasses
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Any

from saga import engine, faults
from saga.codec import decode, encode
from saga.definition import Saga
from saga.errors import INFRASTRUCTURE_ERRORS, PayloadError
from saga.frontier import Frontier
from saga.ports import Event, SagaRecord, StepRecord, StepWrite
from saga.status import SagaStatus, StepStatus

if TYPE_CHECKING:
    from saga.runner import Runner


@dataclasses.dataclass
class _Branch:
    name: str
    attempt: int


@dataclasses.dataclass
class FanOut:
    """One parallel run of a declarative saga's remaining steps."""

    runner: Runner
    saga: Saga
    record: SagaRecord
    carried: list[StepWrite] = dataclasses.field(default_factory=list)
    carried_events: list[Event] = dataclasses.field(default_factory=list)
    failure: tuple[str, BaseException | str] | None = None
    turned: bool = False
    cancelled: bool = False
    not_run: list[str] = dataclasses.field(default_factory=list)
    completed: list[str] = dataclasses.field(default_factory=list)
    frontier: Frontier = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.frontier = Frontier(self.saga, self.record)

    def run(self, started: list[engine.RunStep]) -> SagaRecord:
        """Carry the saga forward; ``started`` steps are already durably started."""
        limit = self.saga.max_concurrency
        with ThreadPoolExecutor(limit, thread_name_prefix=f"saga-{self.saga.name}") as pool:
            running: dict[Future[_Outcome], _Branch] = {}
            self._submit_all(pool, running, started)
            while True:
                if self._stopping and not running:
                    if self._resumes_past_pivot():
                        continue
                    raise self._stop()
                if not self._stopping:
                    if not running and self._finished():
                        return self._complete()
                    self._advance(pool, running)
                    if not running:
                        continue
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                # Steps collected together commit together (they ran at the same
                # time, so neither depended on the other). Once stopping, each
                # completion is its own commit: the database's finish times then
                # give the completion order that unwinding follows.
                # result() re-raises infrastructure errors (lost lease, dead database).
                finished = sorted(done, key=lambda f: f.result().ended)
                # Each branch wrote only its own step: their states enter the record at once.
                self.record = engine.ahead(
                    self.record, [StepWrite(f.result().step) for f in finished]
                )
                for future in finished:
                    self._collect(running.pop(future), future.result())
                    if self._stopping:
                        self._flush()
                if not self._stopping:
                    self._advance(pool, running)

    @property
    def _stopping(self) -> bool:
        return self.failure is not None or self.cancelled

    def _resumes_past_pivot(self) -> bool:
        """A stop request came while a pivot was in flight, and the pivot succeeded:
        the saga can only go forward now, so the request is ignored."""
        if self.failure is None and self.cancelled and engine.past_pivot(self._ahead()):
            self.cancelled = False
            return True
        return False

    def _finished(self) -> bool:
        return self.frontier.complete

    def _advance(self, pool: ThreadPoolExecutor, running: dict[Future[_Outcome], _Branch]) -> None:
        """Commit what finished together with the starts of the steps it made ready."""
        names = {branch.name for branch in running.values()}
        room = self.saga.max_concurrency - len(running)
        decision = self.frontier.ready(self._ahead(), names, room)
        if isinstance(decision, engine.GiveUp):
            self._fail_first(decision.name, f"gave up after {decision.attempts} attempts")
            return
        steps = decision if isinstance(decision, list) else []
        if steps or self.carried:
            self._submit_all(pool, running, self._start(steps))

    def _submit_all(
        self,
        pool: ThreadPoolExecutor,
        running: dict[Future[_Outcome], _Branch],
        steps: list[engine.RunStep],
    ) -> None:
        for step in steps:
            running[self._submit(pool, step)] = _Branch(step.name, step.attempt)

    def _ahead(self) -> SagaRecord:
        """The record as it will be once the carried writes are committed."""
        return engine.ahead(self.record, self.carried)

    def _start(self, steps: list[engine.RunStep]) -> list[engine.RunStep]:
        before = self._ahead()
        starts, started = engine.start_all(self.saga, before, steps)
        events = [*self.carried_events, *started]
        first = steps[0].name if steps else None
        faults.point("before_start_commit", first)
        self.record = self.runner.write(self.record, [*self.carried, *starts], events)
        faults.point("after_start_commit", first)
        self.carried, self.carried_events = [], []
        if self.record.stop and not engine.pivot_may_have_acted(before):
            self.cancelled = True  # nothing new starts; in-flight steps finish first
            self.not_run.extend(step.name for step in steps)  # marked skipped when unwinding
            return []
        return steps

    def _submit(self, pool: ThreadPoolExecutor, step: engine.RunStep) -> Future[_Outcome]:
        declared = self.saga.by_name(step.name)
        assert declared is not None
        cursor = engine.Cursor(self.record)
        data = decode(self.record.input)

        def branch() -> _Outcome:
            try:
                result = self.runner.attempts(
                    cursor,
                    step.name,
                    step.attempt,
                    declared.retry,
                    declared.timeout,
                    declared.fn,
                    data,
                    declared.transactional,
                )
            except INFRASTRUCTURE_ERRORS:
                raise
            except Exception as error:  # handed to the main thread
                return _Outcome(_latest(cursor, step.name), None, error, time.monotonic())
            return _Outcome(_latest(cursor, step.name), result, None, time.monotonic())

        return pool.submit(branch)

    def _collect(self, branch: _Branch, outcome: _Outcome) -> None:
        """Take a finished branch's outcome (its step's state is already in the record)."""
        self.completed.append(branch.name)
        if outcome.error is not None:
            self._branch_failed(branch.name, outcome.error)
            return
        if outcome.step.status is StepStatus.SUCCEEDED:  # transactional: already recorded
            self.frontier.succeeded(branch.name)
            return
        try:
            encoded = encode(
                outcome.result, f"result of step {branch.name!r}", self.runner.payload_limit
            )
        except PayloadError as error:  # a result that cannot be stored fails its step
            self._branch_failed(branch.name, error)
            return
        # self.record holds this step's latest state; the carried writes are other steps'.
        write, event = engine.succeeded(self.record, branch.name, encoded)
        self.carried.append(write)
        self.carried_events.append(event)
        self.frontier.succeeded(branch.name)

    def _branch_failed(self, name: str, error: BaseException) -> None:
        if not self._stopping:
            self._fail_first(name, error)
            return
        write, event = engine.failed(self._ahead(), name, engine.describe(error))
        self.carried.append(write)
        self.carried_events.append(event)

    def _fail_first(self, name: str, error: BaseException | str) -> None:
        """Record the first failure and turn the saga ``compensating`` in one commit.

        While a pivot may have acted the turn waits until the steps in flight
        ended: if the pivot succeeded, the saga can only end ``failed``.
        """
        self.failure = (name, error)
        ahead = self._ahead()
        if engine.pivot_may_have_acted(ahead):
            return
        text = error if isinstance(error, str) else engine.describe(error)
        write, event = engine.failed(ahead, name, text, outcome_unknown=isinstance(error, str))
        turn = engine.moved(self.record, SagaStatus.COMPENSATING, reason=f"step {name!r} failed")
        writes, events = [*self.carried, write], [*self.carried_events, event, turn]
        self.carried, self.carried_events = [], []
        self.record = self.runner.write(self.record, writes, events, SagaStatus.COMPENSATING, text)
        self.turned = True

    def _flush(self) -> None:
        """Commit what the last completion left to write (while stopping: one commit each)."""
        if self.carried:
            self.record = self.runner.write(self.record, self.carried, self.carried_events)
            self.carried, self.carried_events = [], []

    def _complete(self) -> SagaRecord:
        done = engine.moved(self.record, SagaStatus.COMPLETED)
        events = [*self.carried_events, done]
        return self.runner.write(self.record, self.carried, events, SagaStatus.COMPLETED)

    def _stop(self) -> BaseException:
        """Everything in flight ended: record it, then unwind; return what to raise."""
        self._flush()
        # Reloaded for the completion times the database recorded: parallel
        # steps are undone newest first by completion, not by start.
        reloaded = self.runner.store.load(self.record.id) or self.record
        self.record = engine.in_completion_order(reloaded, self.completed)
        if self.failure is not None:
            name, error = self.failure
            if self.turned:
                failure = self.runner._unwound(self.record, self.saga, name)
            else:
                failure = self.runner.fail(self.record, name, error, self.saga)
            if isinstance(error, BaseException):
                failure.__cause__ = error
            return failure
        return self.runner.cancelled(self.record, self.saga, self.not_run)


@dataclasses.dataclass(frozen=True, slots=True)
class _Outcome:
    """How one branch ended: its step's latest record, and a result or an error."""

    step: StepRecord
    result: Any
    error: BaseException | None
    ended: float


def _latest(cursor: engine.Cursor, name: str) -> StepRecord:
    step = cursor.record.step(name)
    assert step is not None
    return step
