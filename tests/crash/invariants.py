"""What must hold after any crash and recovery, checked against the store and the ledger.

* every saga is terminal; none is left running or compensating;
* completed: every step succeeded and its effect is applied, nothing was undone;
* compensated / cancelled: no effect remains applied, every compensatable step is
  compensated (or skipped: a stop came before it ran, and it was never called),
  nothing at or past a pivot was undone;
* per step: the effect was applied at most once and undone at most once, and every
  action call came before every compensation call;
* compensations ran newest first; attempt numbers only grow and never exceed the
  policy's ``max_attempts``;
* a zombie writes nothing: a call under an older epoch than a call before it (an
  owner that stalled past its lease while a step was under way, and went on once
  another process had claimed the saga) changed nothing, the idempotency key saw
  to it. The order checks above leave such calls out; nothing else may be late.
"""

from __future__ import annotations

from collections.abc import Callable

from saga import RetryPolicy, SagaStatus, SagaView, StepStatus
from saga._internal.ports import EventRecord
from saga.testing.invariants import history_problems
from tests.crash.ledger import Call, Ledger

MAX_STEP_ATTEMPTS = 3  # saga's default RetryPolicy, which the crash sagas use
MAX_UNDO_ATTEMPTS = 5
UNDO_RETRY = RetryPolicy(max_attempts=MAX_UNDO_ATTEMPTS, retry_on=(Exception,))
"""The crash sagas' compensation policy, given explicitly (``undo_retry`` and the
coordinators' ``compensation_retry``): a short budget, so that a compensation that
kills every attempt is given up within the test, whatever the library's default."""
_UNWOUND = (SagaStatus.COMPENSATED, SagaStatus.CANCELLED)


def check_saga(
    saga: SagaView,
    book: Ledger,
    steps: list[str],
    kind_of: Callable[[str], str] = lambda _step: "compensatable",
) -> None:
    """Check one saga (declared with ``steps``, in order) against its calls in ``book``."""
    where = f"saga {saga.id} ({saga.name}, {saga.status.value})"
    assert saga.status.is_terminal, f"{where} is not terminal"
    assert [s.name for s in saga.steps] == steps[: len(saga.steps)], f"{where}: steps out of order"
    applied = {step for saga_id, step in book.applied if saga_id == saga.id}
    if saga.status is SagaStatus.COMPLETED:
        _check_completed(saga, book, steps, applied, where)
    elif saga.status in _UNWOUND:
        _check_unwound(saga, book, kind_of, applied, where)
    zombies = _zombie_calls(book.of(saga.id))
    assert not [c for c in zombies if c.effective], (
        f"{where}: a call under a superseded epoch had an effect: {zombies}"
    )
    current = Ledger(tuple(c for c in book.of(saga.id) if c not in zombies), book.applied)
    for step in saga.steps:
        calls = current.of(saga.id, step.name)
        _check_step_calls(calls, step.attempt, f"{where} step {step.name}")
    _check_undo_order(saga, current, where)


def _zombie_calls(calls: list[Call]) -> list[Call]:
    """Calls (in order) made under an older epoch than a call before them."""
    latest = 0
    zombies = []
    for call in calls:
        if call.epoch < latest:
            zombies.append(call)
        latest = max(latest, call.epoch)
    return zombies


def _check_completed(
    saga: SagaView, book: Ledger, steps: list[str], applied: set[str], where: str
) -> None:
    assert [s.status for s in saga.steps] == [StepStatus.SUCCEEDED] * len(steps), (
        f"{where}: steps {[(s.name, s.status.value) for s in saga.steps]}"
    )
    assert applied == set(steps), f"{where}: applied {sorted(applied)}, expected all of {steps}"
    assert not book.of(saga.id, kind="undo"), f"{where}: something was undone"


def _check_unwound(
    saga: SagaView, book: Ledger, kind_of: Callable[[str], str], applied: set[str], where: str
) -> None:
    assert not applied, f"{where}: effects left applied: {sorted(applied)}"
    for step in saga.steps:
        if step.status is StepStatus.SKIPPED:  # recorded as started, stopped before it ran
            assert not book.of(saga.id, step.name), f"{where}: {step.name} skipped, yet called"
        elif kind_of(step.name) == "compensatable":
            assert step.status is StepStatus.COMPENSATED, f"{where}: {step.name} {step.status}"
        else:
            assert not book.of(saga.id, step.name, "undo"), f"{where}: {step.name} was undone"
            assert step.status is StepStatus.FAILED, f"{where}: {step.name} {step.status}"


def _check_step_calls(calls: list[Call], recorded_attempt: int, where: str) -> None:
    done = [c for c in calls if c.kind == "do"]
    undone = [c for c in calls if c.kind == "undo"]
    assert sum(c.effective for c in done) <= 1, f"{where}: applied more than once"
    assert sum(c.effective for c in undone) <= 1, f"{where}: undone more than once"
    if done and undone:
        assert done[-1].id < undone[0].id, f"{where}: an action ran after its compensation"
    _check_attempts([c.attempt for c in done], MAX_STEP_ATTEMPTS, f"{where} action")
    _check_attempts([c.attempt for c in undone], MAX_UNDO_ATTEMPTS, f"{where} compensation")
    assert recorded_attempt <= MAX_STEP_ATTEMPTS, f"{where}: attempt {recorded_attempt} recorded"
    assert all(c.attempt <= recorded_attempt for c in done), (
        f"{where}: an attempt ran that was never recorded (recorded {recorded_attempt})"
    )


def _check_attempts(attempts: list[int], limit: int, where: str) -> None:
    assert attempts == sorted(set(attempts)), f"{where}: attempt numbers reused: {attempts}"
    assert all(1 <= a <= limit for a in attempts), f"{where}: attempts {attempts} over {limit}"


def _check_undo_order(saga: SagaView, book: Ledger, where: str) -> None:
    seq = {s.name: s.seq for s in saga.steps}
    order = [seq[c.step] for c in book.of(saga.id, kind="undo")]
    assert order == sorted(order, reverse=True), f"{where}: undone out of order (seq {order})"


def check_history(saga: SagaView, events: list[EventRecord]) -> None:
    """The history agrees with the saga, as when each event commits with its change
    (saga.testing's check, the one ``crash_matrix`` runs: see its docstring)."""
    problems = history_problems(saga, events)
    assert not problems, f"saga {saga.id} ({saga.name}, {saga.status.value}) history: {problems}"
