"""The state of a context-manager saga and the plan of each of its calls.

``with coord.saga(name, key=...) as s: s.step(fn, ...)``: each ``s.step`` stores
the import paths of its function and compensation and its JSON arguments, so
that any process can compensate the saga. Re-entering the block with the same
key continues the same saga: steps already done return their recorded results
without running again. :mod:`saga._internal.engine.scope_flows` holds what the calls do.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections import Counter
from typing import Any

from saga._internal.codec import KEYLESS, MAX_KEY_BYTES, check_name, decode, encode
from saga._internal.engine import records
from saga._internal.engine.attempts import StepResults
from saga._internal.engine.decisions import GiveUp, next_attempt
from saga._internal.engine.effects import CodeRefs
from saga._internal.errors import (
    INFRASTRUCTURE_ERRORS,
    DefinitionError,
    InputMismatchError,
    OperationRefusedError,
    SagaFailed,
)
from saga._internal.failure import recorded_failure
from saga._internal.policy import DEFAULT_STEP_RETRY, RetryPolicy, check_step_settings
from saga._internal.ports import Event, SagaRecord, StepRecord, StepWrite
from saga._internal.status import SagaStatus, StepKind, StepStatus
from saga._internal.typed import result_type_of, revive


class _CompletedInputMismatch(InputMismatchError, SagaFailed):
    """A completed context-manager saga's block re-entered with other calls or arguments.

    An ``InputMismatchError``, as a declarative rerun with other input gets. It is
    also the ``SagaFailed`` (status ``completed``) that this case raised before, so
    that code written against that keeps catching it; catch ``InputMismatchError``.
    """

    def __init__(self, saga_id: str, message: str) -> None:
        SagaFailed.__init__(self, saga_id, SagaStatus.COMPLETED, None, message)


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
    result_type: Any = None


def step_call(
    fn: Any,
    *args: Any,
    compensate: Any = None,
    transactional: bool = False,
    retry: RetryPolicy | None = None,
    timeout: float | None = None,
    step_name: str | None = None,
    result_type: Any = None,
    **kwargs: Any,
) -> StepCall:
    """The arguments of ``s.step`` and ``s.call`` in both scopes, written once here (see
    :mod:`saga._internal.signature`): ``fn(*args, **kwargs)`` is the step,
    ``compensate(result, *args, **kwargs)`` undoes it; ``transactional``, ``retry``,
    ``timeout``, ``step_name`` and ``result_type`` as a declarative step's."""
    if retry is not None or timeout is not None:  # most calls give neither: no cost then
        check_step_settings(f"step {step_name or getattr(fn, '__name__', fn)!r}", retry, timeout)
    return StepCall(
        fn, args, kwargs, compensate, transactional, retry, timeout, step_name, result_type
    )


@dataclasses.dataclass(frozen=True, slots=True)
class PlannedStep:
    """What an ``s.step(...)`` call must do: run ``template`` as attempt ``attempt``."""

    template: StepRecord
    attempt: int
    policy: RetryPolicy


class ScopeCore:
    """What the sync and async context-manager sagas share: their state and the checks
    and plans of their calls, everything but I/O (the flows are in ``scope_flows``)."""

    def __init__(
        self,
        owner: str,
        refs: CodeRefs,
        payload_limit: int,
        name: str,
        key: str | None,
        deadline: float | None = None,
    ) -> None:
        check_name(name, "saga name")  # refused on every backend alike, before any write
        if key is not None:
            check_name(key, "key", MAX_KEY_BYTES, KEYLESS)
        self.owner = owner
        self.refs = refs
        self.deadline = deadline
        self.payload_limit = payload_limit
        self.name = name
        self.key = key
        self.id = str(uuid.uuid4())
        self.record: SagaRecord | None = None
        self.calls = 0
        self.names: Counter[str] = Counter()
        self.taken: set[str] = set()
        self.failed_step: str | None = None
        self.failure: SagaFailed | None = None  # what the unwinding of s.parallel raised
        self.holding: int | None = None  # the token of the lease's Hold
        self.result: Any = None

    @property
    def status(self) -> SagaStatus | None:
        return None if self.record is None else self.record.status

    @property
    def results(self) -> dict[str, Any]:
        """Results of the steps done so far, by step name."""
        return {} if self.record is None else dict(StepResults(self.record))

    def continues(self, existing: SagaRecord | None) -> bool:
        """Take over what an earlier run with this key recorded; True if it must be claimed
        (to continue it, or, if a crash interrupted its unwinding, to finish that)."""
        if existing is None:
            return False
        self.id = existing.id
        if existing.kind != "imperative":
            raise OperationRefusedError(
                existing.id, f"saga {self.name!r} key {self.key!r} is a declarative saga"
            )
        if existing.status is SagaStatus.COMPLETED:
            self.record = existing
            return False
        if existing.status not in (SagaStatus.RUNNING, SagaStatus.COMPENSATING):
            raise recorded_failure(existing)  # as the first run raised it, rebuilt
        return True  # running: continue it; compensating (a crash mid-unwind): finish that

    def plan(self, call: StepCall) -> PlannedStep | None:
        """Check and record the call; None when the step already succeeded (see ``result``)."""
        fn, compensate = call.fn, call.compensate
        action_ref = self.refs.reference(fn, "step function")
        undo_ref = None if compensate is None else self.refs.reference(compensate, "compensation")
        base = fn.__name__ if call.step_name is None else call.step_name
        check_name(base, "step name")  # before numbering: a second blank name would be "#2"
        name = self.next_name(base)
        check_name(name, "step name")  # numbered, a name at the limit passes it
        arguments = encode(
            {"args": list(call.args), "kwargs": call.kwargs},
            f"arguments of step {name!r}",
            self.payload_limit,
        )
        self.calls += 1
        recorded = self.replayed(self.calls, name, arguments.digest, action_ref)
        if recorded is not None and recorded.status is StepStatus.SUCCEEDED:
            self.result = revive(
                decode(recorded.result),
                result_type_of(fn, call.result_type),
                f"result of step {name!r}",
            )
            return None
        self.refuse_unless_running()
        template = StepRecord(
            name=name,
            seq=self.calls,
            status=StepStatus.PENDING,
            attempt=0,
            kind=StepKind.COMPENSATABLE,
            transactional=call.transactional,
            action_ref=action_ref,
            compensation_ref=undo_ref,
            args=arguments.text,
            input_digest=arguments.digest,
        )
        attempt = 1 if recorded is None else recorded.attempt + 1
        return PlannedStep(template, attempt, call.retry or DEFAULT_STEP_RETRY)

    def gave_up(self, planned: PlannedStep) -> str | None:
        """Why the step may not run again: attempts count across crashes."""
        if self.record is None:
            return None
        name = planned.template.name
        run = next_attempt(name, planned.policy, self.record.step(name))
        if not isinstance(run, GiveUp):
            return None
        self.failed_step = name
        return run.why

    def new_record(self) -> SagaRecord:
        return SagaRecord(
            id=self.id,
            name=self.name,
            key=self.key,
            kind="imperative",
            status=SagaStatus.RUNNING,
            input=None,
            version=None,
            owner=self.owner,
            epoch=1,
            deadline=self.deadline,
        )

    def start_writes(self, *group: PlannedStep) -> tuple[list[StepWrite], list[Event]]:
        starts: list[StepWrite] = []
        events: list[Event] = []
        for planned in group:
            start = records.start(self.record, planned.template, planned.attempt)
            starts.append(start)
            events.extend(records.started_event(start))
        return starts, events

    def unwinds(self, error: BaseException | None) -> bool:
        """Whether leaving the block must unwind the saga."""
        if self.record is None:  # nothing recorded, no saga: the error propagates as it is
            return False
        if error is None:
            return self.failed_step is not None
        if not isinstance(error, Exception):  # KeyboardInterrupt & co: leave it to recovery
            return False
        return not isinstance(error, (*INFRASTRUCTURE_ERRORS, SagaFailed))

    def settled(self) -> SagaFailed | None:
        """The failure to raise without touching the store, when nothing is left to unwind."""
        record = self.record
        if record is None:  # nothing was recorded, so nothing to undo
            return SagaFailed(self.id, SagaStatus.COMPENSATED, self.failed_step)
        if self.failure is not None:  # s.parallel unwound the saga already: what that said
            return self.failure
        if record.status is not SagaStatus.RUNNING:
            return SagaFailed(record.id, record.status, self.failed_step)
        return None

    def next_name(self, base: str) -> str:
        # Names stay distinct within a saga (no index enforces it since schema 0003): a
        # repeated name is numbered, skipping any number an explicit name already took.
        self.names[base] += 1
        name = base if self.names[base] == 1 else f"{base}#{self.names[base]}"
        while name in self.taken:
            self.names[base] += 1
            name = f"{base}#{self.names[base]}"
        self.taken.add(name)
        return name

    def replayed(
        self, seq: int, name: str, input_digest: str, action_ref: str
    ) -> StepRecord | None:
        """The recorded step this call continues, checked to be the same call."""
        if self.record is None:
            return None
        recorded = next((s for s in self.record.steps if s.seq == seq), None)
        same = recorded is not None and (
            (recorded.name, recorded.input_digest, recorded.action_ref)
            == (name, input_digest, action_ref)
        )
        if self.record.status is SagaStatus.COMPLETED and not same:
            # The key stands for the calls it completed with: refused as a declarative
            # rerun with other input is (nothing ran, nothing is left to unwind).
            raise _CompletedInputMismatch(
                self.id,
                f"saga {self.name!r} key {self.key!r} completed with other calls or arguments "
                f"(call {seq}, {name!r}, differs); use a new key for new input",
            )
        if recorded is None or same:
            return recorded
        raise DefinitionError(
            f"saga {self.id}: call {seq} is {name!r} ({action_ref}) with these arguments, "
            f"but the saga recorded {recorded.name!r} ({recorded.action_ref}) with others; "
            "the block must make the same calls in the same order when it is re-entered"
        )

    def refuse_unless_running(self) -> None:
        if self.record is not None and self.record.status is not SagaStatus.RUNNING:
            raise OperationRefusedError(
                self.id, f"saga {self.id} is {self.record.status.value}; no new step can start"
            )
        if self.failed_step is not None:
            raise OperationRefusedError(
                self.id, f"saga {self.id} is unwinding since step {self.failed_step!r} failed"
            )
