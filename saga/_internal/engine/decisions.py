"""What happens next in a saga: pure decisions over its definition and recorded state.

Nothing here does I/O or builds a record; :mod:`saga._internal.engine.records` builds
the records these decisions call for, and :mod:`saga._internal.engine.forward` and
:mod:`saga._internal.engine.unwind` are the flows that chain them.
"""

from __future__ import annotations

import dataclasses
import math
import types
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Literal, Protocol

from saga._internal.definition import Saga, Step
from saga._internal.failure import failing_step
from saga._internal.policy import RetryPolicy
from saga._internal.ports import SagaRecord, StepRecord, undone
from saga._internal.status import PIVOT_ACTED, SagaStatus, StepKind, StepStatus


@dataclasses.dataclass
class Cursor:
    """The latest durable record of a saga, advanced by the writes of a step's retries."""

    record: SagaRecord


@dataclasses.dataclass(frozen=True, slots=True)
class RunStep:
    """Run attempt ``attempt`` of step ``name``; its retry budget began after attempt
    ``budget_from`` (0 but after an operator's retry)."""

    name: str
    attempt: int
    budget_from: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class Complete:
    """Every step succeeded."""


@dataclasses.dataclass(frozen=True, slots=True)
class GiveUp:
    """Step ``name`` used all its attempts (across crashes) without returning."""

    name: str
    attempts: int

    @property
    def why(self) -> str:
        return f"gave up after {self.attempts} attempts that never returned"


def next_attempt(
    name: str, policy: RetryPolicy, recorded: StepRecord | None, budget_from: int = 0
) -> RunStep | GiveUp:
    """Step ``name``'s next attempt, or ``GiveUp`` when its policy allows no more: the
    attempts recorded count, whichever process made them (a crash mid-attempt included),
    apart from the ``budget_from`` made before an operator's retry gave a fresh budget.
    A step pending after attempts of its own was set to run again by ``retry --from``:
    its budget begins after them."""
    attempt = 1 if recorded is None else recorded.attempt + 1
    if recorded is not None and recorded.status is StepStatus.PENDING:
        budget_from = recorded.attempt
    if policy.allows(attempt - budget_from):
        return RunStep(name, attempt, budget_from)
    assert recorded is not None
    return GiveUp(name, recorded.attempt)


_NO_BUDGETS: Mapping[str, int] = types.MappingProxyType({})

NextStep = RunStep | Complete | GiveUp
"""What ``next_forward`` decides."""


def next_forward(saga: Saga, record: SagaRecord) -> NextStep:
    """The next thing to do going forward, in the definition's order."""
    decision = ready(saga, record, (), limit=1)
    return decision[0] if isinstance(decision, list) else decision


def ready(
    saga: Saga, record: SagaRecord, running: Collection[str], limit: int | None = None
) -> list[RunStep] | Complete | GiveUp:
    """Steps whose prerequisites all succeeded and that are not running yet.

    ``Complete`` when every step succeeded; ``GiveUp`` when a ready step has
    used all its attempts; otherwise up to ``limit`` steps to start (an empty
    list means: wait for a running step).
    """
    done = {s.name for s in record.steps if s.status is StepStatus.SUCCEEDED}
    if len(done) == len(saga.steps):
        return Complete()
    deps = saga.dependencies()
    candidates = (
        step
        for step in saga.order()
        if step.name not in done
        and step.name not in running
        and all(d in done for d in deps[step.name])
    )
    return attempts(candidates, record, limit)


def attempts(
    ready: Iterable[Step],
    record: SagaRecord,
    limit: int | None,
    budgets: Mapping[str, int] = _NO_BUDGETS,
) -> list[RunStep] | GiveUp:
    """The next attempts of up to ``limit`` of the ``ready`` steps (taken in their order,
    lazily); ``GiveUp`` for the first of them that used all its attempts. ``budgets``:
    where an operator's retry began a step's fresh budget (see ``next_attempt``)."""
    found: list[RunStep] = []
    for step in ready:
        if limit is not None and len(found) >= limit:
            break  # limit 0 (no room left) starts nothing
        recorded = record.step(step.name)
        run = next_attempt(step.name, step.retry, recorded, budgets.get(step.name, 0))
        if isinstance(run, GiveUp):
            return run
        found.append(run)
    return found


class _StepState(Protocol):
    """What the rules below read of a step: a ``StepRecord`` or an admin ``StepView``."""

    @property
    def kind(self) -> StepKind: ...

    @property
    def status(self) -> StepStatus: ...


class SagaState(Protocol):
    """What the recovery rule reads of a saga: a ``SagaRecord`` or an admin ``SagaView``,
    so that ``saga recover --dry-run`` predicts with the very rule recovery follows."""

    @property
    def status(self) -> SagaStatus: ...

    @property
    def cancel_requested(self) -> bool: ...

    @property
    def steps(self) -> Sequence[_StepState]: ...


Route = Literal["forward", "unwind", "turn"]
"""Which way recovery takes a claimed saga: on, keep unwinding, or turn and unwind."""


def recovery_route(state: SagaState, saga: Saga | None, compensate: bool) -> Route:
    """Which way a claimed, unfinished saga goes (``saga``: its definition, if declarative
    and known here; ``compensate``: the operator asked to unwind it).

    Compensating sagas keep compensating. A running declarative saga goes
    forward unless told to compensate (``on_crash``, ``--compensate``, a
    cancel request); once its pivot may have acted (succeeded, or started and
    never reported back) it can only go forward, whatever it was told. A
    running context-manager saga is compensated: only its own code could
    continue it.
    """
    if state.status is SagaStatus.COMPENSATING:
        return "unwind"
    if saga is not None and pivot_may_have_acted(state):
        return "forward"
    wants_forward = not compensate and not state.cancel_requested
    if saga is not None and wants_forward and saga.on_crash == "resume":
        return "forward"
    return "turn"


def past_pivot(record: SagaState) -> bool:
    """Whether a pivot step succeeded: from then on the saga only goes forward."""
    return any(s.kind is StepKind.PIVOT and s.status is StepStatus.SUCCEEDED for s in record.steps)


def pivot_may_have_acted(record: SagaState) -> bool:
    """Whether a pivot succeeded, started and never reported back (a crash mid-pivot),
    or was given up without its outcome ever being learnt (``in_doubt``).

    Either way its irreversible effect may exist, so nothing may be unwound:
    recovery goes forward, re-running an unconfirmed pivot to learn its outcome.
    """
    return any(s.kind is StepKind.PIVOT and s.status in PIVOT_ACTED for s in record.steps)


def pivot_in_doubt(record: SagaRecord) -> StepRecord | None:
    """The pivot that was given up without its outcome being learnt, if any."""
    for step in record.steps:
        if step.kind is StepKind.PIVOT and step.status is StepStatus.IN_DOUBT:
            return step
    return None


def no_unwinding(record: SagaRecord, error: BaseException | str) -> str | None:
    """Why a saga whose step just failed must end ``failed`` instead of unwinding, or None.

    Past its pivot it can only go forward. A pivot that never returned (its
    attempts ran out across crashes: ``error`` is why it was given up, not an
    exception it raised) may have acted, so nothing may be unwound either.
    """
    if past_pivot(record):
        return "failed after the pivot"
    if isinstance(error, str) and pivot_may_have_acted(record):
        return "the pivot never returned: it may have acted"
    return None


def undo_stack(record: SagaRecord) -> list[StepRecord]:
    """Steps still to compensate, newest first by completion.

    Every step that may have acted is included (succeeded, in flight, failed),
    except a failed transactional step (its transaction rolled back) and steps
    that are never compensated (pivot, retriable). A step still in flight, or
    finished but not yet reloaded from the store, counts as the newest; ties
    go by start order. Either way a step is undone before the steps it
    depended on, since it started after they had finished.
    """
    # A failed or running transactional step is left out: its transaction never committed.
    return sorted(undone(record), key=_completion, reverse=True)


def _completion(step: StepRecord) -> tuple[float, int]:
    finished = math.inf if step.finished_at is None else step.finished_at
    return (finished, step.seq)


def stop_reason(record: SagaRecord) -> str:
    """Why the store asked a saga (as loaded) to stop at its step boundary."""
    return "cancel requested" if record.cancel_requested else "deadline passed"


def unwound_status(record: SagaRecord) -> SagaStatus:
    """How a saga ends once everything is undone."""
    return SagaStatus.CANCELLED if record.cancel_requested else SagaStatus.COMPENSATED


def failed_step(record: SagaRecord) -> str | None:
    """The step whose failure made the saga unwind, if any (see ``failure.failing_step``)."""
    step = failing_step(record)
    return None if step is None else step.name
