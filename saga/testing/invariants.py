"""What must hold for any saga after any crash and recovery, read from the store alone.

:func:`problems` checks a saga as stored and its history:

* it is terminal and did not give up (``completed``, ``compensated`` or
  ``cancelled``; ``failed`` means a compensation kept failing);
* completed: every step succeeded and nothing was compensated;
* compensated / cancelled: no compensatable step is left succeeded, running or
  in doubt (each is compensated, skipped, or failed without a compensation);
  a pivot, or a step after it, is never unwound;
* no compensation started for a step that never started; compensations ran
  newest first;
* the attempts are counted: one ``step_started`` per recorded attempt
  (1..attempt), one ``compensation_started`` per compensation attempt, one
  ``compensation_done`` exactly when the step is compensated; the history
  begins with ``saga_started``, ends with the final status, and its epochs
  never go back.

``saga.testing.crash_matrix`` runs these after every case; saga's own crash
suite (tests/crash) runs them too, next to its checks against its effect ledger.
"""

from __future__ import annotations

from collections.abc import Sequence

from saga._internal.ports import EventRecord
from saga._internal.status import SagaStatus, StepKind, StepStatus
from saga._internal.views import SagaView, StepView

FINAL = (SagaStatus.COMPLETED, SagaStatus.COMPENSATED, SagaStatus.CANCELLED)
_UNWOUND = (SagaStatus.COMPENSATED, SagaStatus.CANCELLED)
_LEFT_ALONE = (StepStatus.COMPENSATED, StepStatus.SKIPPED, StepStatus.PENDING, StepStatus.FAILED)
"""What a compensatable step of an unwound saga may be: undone, or never acted on record
(a failed step has no result to undo unless it has a compensation, which then ran)."""


def problems(saga: SagaView, events: Sequence[EventRecord], *, ordered: bool = True) -> list[str]:
    """Every invariant ``saga`` and its history break (empty: all hold).

    ``ordered=False`` leaves out "newest first" (parallel steps finish in any order).
    """
    found = _status_problems(saga)
    found += _compensation_problems(saga, events, ordered)
    found += history_problems(saga, events)
    return found


def _status_problems(saga: SagaView) -> list[str]:
    if saga.status not in FINAL:
        why = " (a compensation kept failing)" if saga.status is SagaStatus.FAILED else ""
        return [f"saga ended {saga.status.value}{why}"]
    if saga.status is SagaStatus.COMPLETED:
        bad = [_state(s) for s in saga.steps if s.status is not StepStatus.SUCCEEDED]
        return [f"completed, yet steps {', '.join(bad)}"] if bad else []
    found = []
    for step in saga.steps:
        if step.kind is StepKind.COMPENSATABLE and step.status not in _LEFT_ALONE:
            found.append(f"{saga.status.value}, yet step {_state(step)} was not compensated")
    return found


def _compensation_problems(
    saga: SagaView, events: Sequence[EventRecord], ordered: bool
) -> list[str]:
    found = []
    started: set[str] = set()
    undone: list[str] = []
    for event in events:
        if event.kind == "step_started" and event.step is not None:
            started.add(event.step)
        elif event.kind == "compensation_started" and event.step is not None:
            if event.step not in started:
                found.append(f"compensation of {event.step} started, yet the step never did")
            if event.step not in undone:
                undone.append(event.step)
    if saga.status is SagaStatus.COMPLETED and undone:
        found.append(f"completed, yet compensated {', '.join(undone)}")
    kinds = {s.name: s for s in saga.steps}
    for name in undone:
        step = kinds.get(name)
        if step is not None and step.kind is not StepKind.COMPENSATABLE:
            found.append(f"step {name} ({step.kind.value}) was unwound")
    seqs = [kinds[name].seq for name in undone if name in kinds]
    if ordered and seqs != sorted(seqs, reverse=True):
        found.append(f"compensations out of order (newest first expected): {', '.join(undone)}")
    return found


def history_problems(saga: SagaView, events: Sequence[EventRecord]) -> list[str]:
    """The history agrees with the saga, as when each event commits with its change."""
    kinds = [e.kind for e in events]
    found = []
    if kinds[:1] != ["saga_started"]:
        found.append(f"history begins {kinds[:1]}")
    if kinds[-1:] != [f"saga_{saga.status.value}"]:
        found.append(f"history ends {kinds[-1:]}, the saga is {saga.status.value}")
    epochs = [e.epoch for e in events if e.epoch is not None]
    if epochs != sorted(epochs):
        found.append(f"epochs go back: {epochs}")
    for step in saga.steps:
        found += _attempt_problems(step, events)
    return found


def _attempt_problems(step: StepView, events: Sequence[EventRecord]) -> list[str]:
    found = []
    mine = [e for e in events if e.step == step.name]
    starts = [e.attempt for e in mine if e.kind == "step_started"]
    if starts != list(range(1, step.attempt + 1)):
        found.append(f"{step.name}: attempt {step.attempt} recorded, started {starts}")
    undos = [e.attempt for e in mine if e.kind == "compensation_started"]
    if undos != list(range(1, step.compensation_attempt + 1)):
        found.append(
            f"{step.name}: compensation attempt {step.compensation_attempt}, started {undos}"
        )
    done = sum(e.kind == "compensation_done" for e in mine)
    if done != (step.status is StepStatus.COMPENSATED):
        found.append(f"{step.name}: {done} compensation_done events, step {step.status.value}")
    return found


def _state(step: StepView) -> str:
    return f"{step.name} {step.status.value}"
