"""What the calls of a context-manager saga do, as flows: one copy for both scopes.

``SagaScope`` (threads) and ``AsyncSagaScope`` (asyncio) only plan a call
(``ScopeCore``) and run the flow this module gives for it with their driver.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from saga._internal.engine import records, rules, unwind
from saga._internal.engine.decisions import Cursor, RunStep
from saga._internal.engine.effects import (
    WAIT,
    Branch,
    CancelInFlight,
    Claim,
    CodeRefs,
    Create,
    Find,
    Flow,
    Hold,
    Launch,
    LetGo,
    Load,
    Tell,
    write,
)
from saga._internal.engine.fault_points import fault
from saga._internal.engine.forward import branch, is_async
from saga._internal.engine.group import Group, Member
from saga._internal.engine.scope import PlannedStep, ScopeCore, StepCall
from saga._internal.engine.targets import Target
from saga._internal.errors import OperationRefusedError, SagaFailed
from saga._internal.failure import raise_from_block
from saga._internal.ports import Event, SagaRecord
from saga._internal.status import SagaStatus


class ScopeFlows:
    """The flows of one context-manager saga (its state is ``core``)."""

    def __init__(self, core: ScopeCore, resolver: CodeRefs) -> None:
        self.core = core
        self.resolver = resolver

    def enter(self) -> Flow[SagaRecord | None]:
        """Entering the block: with a key an earlier run used, take over what it recorded,
        claimed if it must continue. Answers the saga if a crash left it compensating
        (the scope finishes that unwinding and raises), else None."""
        core = self.core
        if core.key is None:
            return None
        existing = yield Find(core.name, core.key)
        if not core.continues(existing):
            return None
        assert existing is not None
        event = Event("lease_claimed", detail={"why": "re-entered"})
        guard = rules.continue_guard()  # not one that failed since it was read
        record: SagaRecord = yield Claim(existing.id, core.owner, event, guard)
        core.record = record
        yield Tell(record, (event,))
        if record.status is SagaStatus.COMPENSATING:
            return record
        core.holding = yield Hold(record, lasting=True)
        return None

    def call(self, call: StepCall, target: Target) -> Flow[Any]:
        """``s.step(...)``: plan the call; its recorded result if a run before this one
        did it, else run it (``target``: the function the face handed its driver) as the
        next step."""
        core = self.core
        planned = core.plan(call)
        if planned is None:
            return core.result
        return (yield from self.step(planned, target, call.timeout))

    def leave(self, error: BaseException | None) -> Flow[None]:
        """Leaving the block: the saga completed, or (with ``error``, or after a failed
        step) unwound and ``SagaFailed`` raised. The shell lets go of the lease after it,
        whatever happened (a task cancelled meanwhile included)."""
        core = self.core
        if error is None and core.failed_step is None:
            yield from self.complete()
        elif core.unwinds(error):
            raise_from_block((yield from self.unwind(error)), error)

    def step(self, planned: PlannedStep, target: Target, timeout: float | None) -> Flow[Any]:
        """``s.step(...)``: make its start durable, run its attempts, record its success."""
        core = self.core
        reason = core.gave_up(planned)
        if reason is not None:
            assert core.record is not None
            name = planned.template.name
            raise (yield from unwind.fail(self.resolver, core.record, name, reason, None))
        yield from self._begin(planned)
        return (yield from self._run(planned, target, timeout))

    def _begin(self, *group: PlannedStep) -> Flow[None]:
        """Make the start of the step(s) durable (creating the saga with the first ones)."""
        core = self.core
        starts, events = core.start_writes(*group)
        first = group[0].template.name
        yield from fault("before_start_commit", first)
        if core.record is None:
            yield from self._create(starts, events)
        else:
            core.record = yield from write(core.record, starts, events)
        yield from fault("after_start_commit", first)
        assert core.record is not None
        if core.record.stop:
            names = [p.template.name for p in group]
            raise (yield from unwind.cancelled(self.resolver, core.record, None, names))

    def _create(self, starts: list[Any], events: list[Event]) -> Flow[None]:
        core = self.core
        record = core.new_record()
        change = records.commit(record, starts, [Event("saga_started"), *events])
        stored, created = yield Create(record, change)
        if not created:
            raise OperationRefusedError(
                stored.id,
                f"saga {core.name!r} key {core.key!r} was started by another process meanwhile",
            )
        core.record = records.apply(record, change)
        core.holding = yield Hold(core.record, lasting=True)

    def _run(self, planned: PlannedStep, target: Target, timeout: float | None) -> Flow[Any]:
        core = self.core
        assert core.record is not None
        name = planned.template.name
        cursor = Cursor(core.record)
        transactional = planned.template.transactional
        run = RunStep(name, planned.attempt)
        flow = branch(
            cursor, run, planned.policy, timeout, target, transactional, core.payload_limit
        )
        finished = yield from flow
        core.record = cursor.record
        if finished.error is not None:  # a result that cannot be stored fails it too
            core.failed_step = name
            assert isinstance(finished.error, BaseException)
            raise finished.error
        if not transactional:  # else recorded with its own writes
            assert finished.encoded is not None
            write_, event = records.succeeded(core.record, name, finished.encoded)
            core.record = yield from write(core.record, [write_], [event])
        yield from fault("after_success_commit", name)
        return finished.result

    def parallel(
        self, calls: Sequence[StepCall], targets: Sequence[Target | None]
    ) -> Flow[list[Any]]:
        """``s.parallel(...)``: the calls' starts in one commit, then all at once; each
        completion its own commit (see :mod:`saga._internal.engine.group`). ``targets``:
        what runs each call (the functions the face handed its driver, in order)."""
        core = self.core
        group = Group(core, calls)
        if not group.members:
            return group.results
        gave_up = group.gave_up()
        if gave_up is not None:
            assert core.record is not None
            raise (yield from unwind.fail(self.resolver, core.record, *gave_up, None))
        yield from self._begin(*group.planned())
        yield Launch(tuple(self._branch(member, targets[member.index]) for member in group.members))
        left = len(group.members)
        while left:
            waited = yield WAIT
            for finished in waited.finished:
                left -= 1
                yield from self._completed(group, group.member(finished.name), finished)
        if group.failure is not None:
            yield from self._unwind_group(group)
            raise group.first_error()
        return group.results

    def _branch(self, member: Member, target: Target | None) -> Branch:
        core = self.core
        assert core.record is not None
        assert target is not None  # a member is a call: the face handed its function
        call, planned = member.call, member.planned
        member.cursor = Cursor(core.record)
        run = RunStep(member.name, planned.attempt)
        flow = branch(
            member.cursor,
            run,
            planned.policy,
            call.timeout,
            target,
            planned.template.transactional,
            core.payload_limit,
        )
        cancellable = is_async(call.fn) and not call.transactional
        return Branch(member.name, flow, member.cursor, cancellable)

    def _completed(self, group: Group, member: Member, finished: Any) -> Flow[None]:
        """Commit what a member's end calls for; on the first failure, cancel what may be
        cancelled (async calls: a thread cannot be stopped, and a transactional call's
        outcome must commit with its own writes)."""
        core = self.core
        failed_before = group.failure is not None
        change = group.completed(member, finished)
        if change is not None:
            assert core.record is not None
            core.record = yield from write(core.record, *change)
        if group.failure is None:
            yield from fault("after_success_commit", member.name)
        elif not failed_before:
            yield CancelInFlight(f"cancelled: step {group.failure[0]!r} failed")

    def _unwind_group(self, group: Group) -> Flow[None]:
        """Compensate everything that may have acted (finish times reloaded: newest first)."""
        core = self.core
        assert core.record is not None
        assert group.failure is not None
        loaded = (yield Load(core.record.id)) or core.record
        record = records.in_completion_order(loaded, group.order)
        core.failure = yield from unwind.unwound(self.resolver, record, None, group.failure[0])
        core.record = (yield Load(record.id)) or record

    def let_go(self) -> Flow[None]:
        """Stop keeping the saga's lease alive (the block ended)."""
        if self.core.holding is not None:
            token, self.core.holding = self.core.holding, None
            yield LetGo(token)

    def complete(self) -> Flow[None]:
        """Leaving the block normally: the saga completed."""
        core = self.core
        record = core.record
        if record is None or record.status is not SagaStatus.RUNNING:
            return
        done = records.moved(record, SagaStatus.COMPLETED)
        yield from fault("before_final_commit")
        core.record = yield from write(record, [], [done], SagaStatus.COMPLETED)
        yield from fault("after_final_commit")

    def unwind(self, error: BaseException | None) -> Flow[SagaFailed]:
        """Leaving the block with an error (or after a failed step): unwind; what to raise."""
        core = self.core
        settled = core.settled()
        if settled is not None:
            return settled
        record = core.record
        assert record is not None
        if core.failed_step is not None:
            failing = error or "failed"
            return (yield from unwind.fail(self.resolver, record, core.failed_step, failing, None))
        reason = records.describe(error) if error else "block failed"
        turn = records.moved(record, SagaStatus.COMPENSATING, reason=reason)
        record = yield from write(record, [], [turn], SagaStatus.COMPENSATING, reason)
        try:
            record = yield from unwind.unwind(self.resolver, record, None)
        except SagaFailed as failure:
            return failure
        return SagaFailed(record.id, record.status, None)
