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

import dataclasses
from collections.abc import Sequence
from typing import Any

from saga._internal.engine import records
from saga._internal.engine.decisions import Cursor
from saga._internal.engine.effects import Finished
from saga._internal.engine.scope import PlannedStep, ScopeCore, StepCall
from saga._internal.errors import ConfigurationError
from saga._internal.ports import Event, StepWrite
from saga._internal.status import SagaStatus

Change = tuple[list[StepWrite], list[Event], SagaStatus | None, str | None]


@dataclasses.dataclass
class Member:
    """A call of the group that must run: where its result goes, its step's latest record."""

    index: int
    planned: PlannedStep
    call: StepCall
    cursor: Cursor | None = None

    @property
    def name(self) -> str:
        return self.planned.template.name


class Group:
    """One ``s.parallel(...)``: its members and what each completion commits."""

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
            planned = scope.plan(call)
            if planned is None:  # succeeded in an earlier run of the block
                self.results[index] = scope.result
            else:
                self.members.append(Member(index, planned, call))

    def planned(self) -> list[PlannedStep]:
        return [member.planned for member in self.members]

    def gave_up(self) -> tuple[str, str] | None:
        """A member that used all its attempts across crashes, and why."""
        for member in self.members:
            reason = self.scope.gave_up(member.planned)
            if reason is not None:
                return member.name, reason
        return None

    def member(self, name: str) -> Member:
        return next(member for member in self.members if member.name == name)

    def completed(self, member: Member, done: Finished) -> Change | None:
        """What to commit now that ``member`` ended (``None``: it already is committed)."""
        record = self.scope.record
        assert record is not None
        record = self.scope.record = records.with_step(record, done.step)
        name = member.name
        self.order.append(name)
        if done.error is None:
            self.results[member.index] = done.result
            if member.planned.template.transactional:  # recorded with its own writes
                return None
            assert done.encoded is not None
            write, event = records.succeeded(record, name, done.encoded)
            return [write], [event], None, None
        text = done.error if isinstance(done.error, str) else records.describe(done.error)
        write, event = records.failed(
            record, name, text, outcome_unknown=isinstance(done.error, str)
        )
        if self.failure is not None:
            return [write], [event], None, None
        self.failure = (name, done.error)
        turn = records.moved(record, SagaStatus.COMPENSATING, reason=f"step {name!r} failed")
        return [write], [event, turn], SagaStatus.COMPENSATING, text

    def first_error(self) -> BaseException:
        assert self.failure is not None
        name, error = self.failure
        self.scope.failed_step = name
        return error if isinstance(error, BaseException) else RuntimeError(error)
