"""Several context-manager steps at once: ``s.parallel(s.call(...), s.call(...))``.

The calls of a group are checked first, in order (importable functions,
JSON arguments: a bad one is refused before anything runs), then their
starts are made durable in one commit, then they all run at once: in worker
threads for ``with coord.saga(...)``, as tasks for ``async with``. Each
completion is its own commit. The first failure is recorded with the saga
turning ``compensating``, in one commit; the calls still in flight are
waited for (in an async saga, those whose function is ``async`` are
cancelled and recorded failed); then every call that may have started, and
every step before the group, is compensated, newest first by completion, and
the first error is raised from ``s.parallel`` (leaving the block then raises
``SagaFailed`` from it, as after a failed ``s.step``).

Re-entering the block after a crash replays a group like single steps: the
calls that succeeded return their recorded results, the others run again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from typing import TYPE_CHECKING, Any

from saga import engine, faults
from saga.codec import encode
from saga.engine import Cursor
from saga.engine.effects import Action
from saga.engine.forward import is_async
from saga.errors import INFRASTRUCTURE_ERRORS, ConfigurationError
from saga.policy import RetryPolicy
from saga.ports import Event, StepRecord, StepWrite
from saga.status import SagaStatus

if TYPE_CHECKING:
    from saga.aio_scope import AsyncSagaScope
    from saga.scope import PlannedStep, SagaScope, ScopeCore


@dataclasses.dataclass(frozen=True, slots=True)
class StepCall:
    """One call of a parallel group, as ``s.call(fn, *args, compensate=..., **kwargs)``
    describes it; nothing runs until ``s.parallel(...)`` gets it."""

    fn: Any
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    compensate: Any = None
    transactional: bool = False
    retry: RetryPolicy | None = None
    timeout: float | None = None
    step_name: str | None = None


def bound(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Action:
    """``fn(*args, **kwargs)`` as a step action; an async ``fn`` stays a coroutine
    function, so the async driver awaits it on the loop (and can time it out)."""
    if is_async(fn):

        async def run_async(_context: Any) -> Any:
            return await fn(*args, **kwargs)

        return run_async

    def run(_context: Any) -> Any:
        return fn(*args, **kwargs)

    return run


@dataclasses.dataclass
class Member:
    """A call of the group that must run: where its result goes, its step's latest record."""

    index: int
    planned: PlannedStep
    call: StepCall
    cursor: Cursor | None = None
    cancelled_at: float | None = None

    @property
    def name(self) -> str:
        return self.planned.template.name

    def step(self) -> StepRecord:
        assert self.cursor is not None
        step = self.cursor.record.step(self.name)
        assert step is not None, self.name
        return step


Change = tuple[list[StepWrite], list[Event], SagaStatus | None, str | None]


@dataclasses.dataclass
class Done:
    """How a member's attempts ended: an encoded result, or an error (or a reason)."""

    result: Any
    encoded: Any
    error: BaseException | str | None
    ended: float


class Group:
    """One ``s.parallel(...)``: the decisions, shared by the sync and async scopes."""

    def __init__(self, scope: ScopeCore, calls: Sequence[StepCall]) -> None:
        if not calls:
            raise ConfigurationError("s.parallel() needs at least one s.call(...)")
        self.scope = scope
        self.results: list[Any] = [None] * len(calls)
        self.members: list[Member] = []
        self.failure: tuple[str, BaseException | str] | None = None
        self.order: list[str] = []  # members' names as their ends were seen
        for index, call in enumerate(calls):
            if not isinstance(call, StepCall):
                raise ConfigurationError(
                    f"s.parallel() takes s.call(fn, ...) values, not {type(call).__name__}"
                )
            planned = scope._plan(
                call.fn,
                call.args,
                call.kwargs,
                call.compensate,
                call.transactional,
                call.retry,
                call.step_name,
            )
            if planned is None:  # succeeded in an earlier run of the block
                self.results[index] = scope._result
            else:
                self.members.append(Member(index, planned, call))

    def planned(self) -> list[PlannedStep]:
        return [member.planned for member in self.members]

    def gave_up(self) -> tuple[str, str] | None:
        """A member that used all its attempts across crashes, and why."""
        for member in self.members:
            reason = self.scope._gave_up(member.planned)
            if reason is not None:
                return member.name, reason
        return None

    def started(self) -> None:
        """The starts are durable: each member follows its step from here."""
        assert self.scope._record is not None
        for member in self.members:
            member.cursor = Cursor(self.scope._record)

    def completed(self, member: Member, done: Done) -> Change | None:
        """What to commit now that ``member`` ended (``None``: it already is committed)."""
        record = self.scope._record
        assert record is not None
        record = self.scope._record = engine.with_step(record, member.step())
        name = member.name
        self.order.append(name)
        if done.error is None:
            self.results[member.index] = done.result
            if member.planned.template.transactional:  # recorded with its own writes
                return None
            write, event = engine.succeeded(record, name, done.encoded)
            return [write], [event], None, None
        text = done.error if isinstance(done.error, str) else engine.describe(done.error)
        write, event = engine.failed(
            record, name, text, outcome_unknown=isinstance(done.error, str)
        )
        if self.failure is not None:
            return [write], [event], None, None
        self.failure = (name, done.error)
        turn = engine.moved(record, SagaStatus.COMPENSATING, reason=f"step {name!r} failed")
        return [write], [event, turn], SagaStatus.COMPENSATING, text

    def first_error(self) -> BaseException:
        assert self.failure is not None
        name, error = self.failure
        self.scope._failed_step = name
        return error if isinstance(error, BaseException) else RuntimeError(error)


# -- threads: ``with coord.saga(...)`` -------------------------------------------------------


def run_group(scope: SagaScope, calls: Sequence[StepCall]) -> list[Any]:
    """``s.parallel(...)`` of a sync context-manager saga: the calls run in threads."""
    group = Group(scope, calls)
    if not group.members:
        return group.results
    gave_up = group.gave_up()
    if gave_up is not None:
        assert scope._record is not None
        raise scope.driver.run(scope.flows.fail(scope._record, *gave_up, None))
    scope._begin(*group.planned())
    group.started()
    with ThreadPoolExecutor(len(group.members), thread_name_prefix=f"saga-{scope.name}") as pool:
        futures: dict[Future[Done], Member] = {
            pool.submit(_attempts, scope, member): member for member in group.members
        }
        for future in as_completed(futures):  # each completion is its own commit
            member = futures[future]
            change = group.completed(member, future.result())  # infrastructure errors raise
            if change is not None:
                assert scope._record is not None
                scope._record = scope.driver.run(scope.flows.write(scope._record, *change))
            if group.failure is None:
                faults.point("after_success_commit", member.name)
    if group.failure is not None:
        _unwind(scope, group)
        raise group.first_error()
    return group.results


def _attempts(scope: SagaScope, member: Member) -> Done:
    assert member.cursor is not None
    call, planned = member.call, member.planned
    try:
        result = scope.driver.run(
            scope.flows.attempts(
                member.cursor,
                member.name,
                planned.attempt,
                planned.policy,
                call.timeout,
                bound(call.fn, call.args, call.kwargs),
                transactional=planned.template.transactional,
            )
        )
        encoded = encode(result, f"result of step {member.name!r}", scope.payload_limit)
    except INFRASTRUCTURE_ERRORS:
        raise
    except Exception as error:  # recorded by the caller's thread
        return Done(None, None, error, time.monotonic())
    return Done(result, encoded, None, time.monotonic())


def _unwind(scope: SagaScope, group: Group) -> None:
    """Compensate everything that may have acted (finish times reloaded: newest first)."""
    assert scope._record is not None
    assert group.failure is not None
    store = scope.coordinator.store
    record = engine.in_completion_order(store.load(scope._record.id) or scope._record, group.order)
    scope._failure = scope.driver.run(scope.flows.unwound(record, None, group.failure[0]))
    scope._record = store.load(record.id) or record


# -- tasks: ``async with coord.saga(...)`` ----------------------------------------------------


async def run_group_async(scope: AsyncSagaScope, calls: Sequence[StepCall]) -> list[Any]:
    """``s.parallel(...)`` of an async context-manager saga: the calls run as tasks."""
    group = Group(scope, calls)
    if not group.members:
        return group.results
    gave_up = group.gave_up()
    if gave_up is not None:
        assert scope._record is not None
        raise await scope.driver.run(scope.flows.fail(scope._record, *gave_up, None))
    await scope._begin(*group.planned())
    group.started()
    tasks = {
        asyncio.create_task(_attempts_async(scope, member), name=f"saga-step-{member.name}"): member
        for member in group.members
    }
    pending = set(tasks)
    reason = "cancelled"
    try:
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            ended = [(tasks[task], _done(task, tasks[task], reason)) for task in done]
            for member, outcome in sorted(ended, key=lambda pair: pair[1].ended):
                change = group.completed(member, outcome)
                if change is not None:
                    assert scope._record is not None
                    scope._record = await scope.driver.run(
                        scope.flows.write(scope._record, *change)
                    )
                if group.failure is None:
                    faults.point("after_success_commit", member.name)
                elif reason == "cancelled":
                    reason = f"cancelled: step {group.failure[0]!r} failed"
                    _cancel(pending, tasks)
    finally:
        for task in pending:  # leaving early: a lost lease, a dead database
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
    if group.failure is not None:
        await _unwind_async(scope, group)
        raise group.first_error()
    return group.results


async def _attempts_async(scope: AsyncSagaScope, member: Member) -> Done:
    assert member.cursor is not None
    call, planned = member.call, member.planned
    try:
        result = await scope.driver.run(
            scope.flows.attempts(
                member.cursor,
                member.name,
                planned.attempt,
                planned.policy,
                call.timeout,
                bound(call.fn, call.args, call.kwargs),
                transactional=planned.template.transactional,
            ),
            shielded=True,
        )
        encoded = encode(result, f"result of step {member.name!r}", scope.payload_limit)
    except INFRASTRUCTURE_ERRORS:
        raise
    except asyncio.CancelledError:
        member.cancelled_at = time.monotonic()  # its place in the completion order
        raise
    except Exception as error:  # recorded by the group's loop
        return Done(None, None, error, time.monotonic())
    return Done(result, encoded, None, time.monotonic())


def _done(task: asyncio.Task[Done], member: Member, reason: str) -> Done:
    if task.cancelled():  # a cancelled call may have acted: failed, then compensated
        return Done(None, None, reason, member.cancelled_at or time.monotonic())
    return task.result()


def _cancel(pending: set[asyncio.Task[Done]], tasks: dict[asyncio.Task[Done], Member]) -> None:
    """Cancel the calls in flight whose function is async; threads cannot be stopped,
    and a transactional call's outcome must commit with its own writes."""
    for task in pending:
        call = tasks[task].call
        if is_async(call.fn) and not call.transactional:
            task.cancel()


async def _unwind_async(scope: AsyncSagaScope, group: Group) -> None:
    assert scope._record is not None
    assert group.failure is not None
    store = scope.coordinator.store
    loaded = await store.load(scope._record.id) or scope._record
    record = engine.in_completion_order(loaded, group.order)
    scope._failure = await scope.driver.run(scope.flows.unwound(record, None, group.failure[0]))
    scope._record = await store.load(record.id) or record
