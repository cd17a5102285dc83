"""A Hypothesis state machine over the pure engine (saga/engine/, with saga/engine/rules.py).

The machine drives one saga the way the runner does, but only through the
engine's pure functions: it starts the saga, lets steps succeed, fail
(retryably or for good) and compensations succeed or fail, crashes the
process, recovers (resuming or compensating), and acts as an operator
(compensate, resume, cancel). Every change is a :class:`Commit` built by
the engine and applied with ``engine.apply``, as the store would. After
every rule it checks:

* only legal transitions happened (saga and step statuses, checked against
  the state machine in saga/status.py);
* compensations completed newest first;
* nothing at or past a pivot was undone, and nothing at all once a pivot succeeded;
* no step's attempt count ever exceeds its ``max_attempts``;
* replaying every commit with ``apply()`` from the first record gives the
  current state;
* a finished saga is refused by every operator action and holds no lease.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from saga import OperationRefusedError, RetryPolicy, Saga, SagaStatus, StepKind, StepStatus
from saga._internal import engine
from saga._internal.codec import encode
from saga._internal.engine import rules
from saga._internal.ports import Commit, Event, SagaRecord, StepWrite, guard_broken
from saga._internal.status import check_saga_move, check_step_move
from tests.faults import figures

pytestmark = pytest.mark.faults

ACTIVE = (SagaStatus.RUNNING, SagaStatus.COMPENSATING)
UNDO_POLICY = RetryPolicy(max_attempts=2, retry_on=(Exception,))


def _noop(ctx: Any) -> None:
    del ctx


def _definition(count: int, pivot: int | None, attempts: list[int], on_crash: Any) -> Saga:
    saga = Saga("faults-engine-property", on_crash=on_crash)
    for number in range(1, count + 1):
        is_pivot, retriable = number == pivot, pivot is not None and number > pivot
        retry = None if retriable else RetryPolicy(max_attempts=attempts[number - 1])
        step = saga.step(name=f"s{number}", pivot=is_pivot, retriable=retriable, retry=retry)
        declared = step(_noop)
        if not is_pivot and not retriable:
            declared.compensation(retry=UNDO_POLICY)(_noop)
    saga.validate()
    return saga


class EngineMachine(RuleBasedStateMachine):
    """One saga, driven through the engine's decisions; invariants after every rule."""

    saga: Saga
    first: SagaRecord
    durable: SagaRecord

    @initialize(
        count=st.integers(1, 4),
        pivot=st.none() | st.integers(1, 4),
        attempts=st.lists(st.integers(1, 3), min_size=4, max_size=4),
        on_crash=st.sampled_from(["resume", "compensate"]),
    )
    def start(self, count: int, pivot: int | None, attempts: list[int], on_crash: Any) -> None:
        pivot = pivot if pivot is not None and pivot <= count else None
        self.saga = _definition(count, pivot, attempts, on_crash)
        record, change, started = rules.new_saga(self.saga, None, "{}", "owner")
        assert [run.name for run in started] == ["s1"]
        self.first = record
        self.commits: list[Commit] = []
        self.durable = record
        self.seen: list[SagaRecord] = [record]  # every durable state, oldest first
        self._apply(change)
        self.alive = True
        self.fresh = False
        self.undone: list[int] = []
        figures.count("engine examples")

    # -- carrying out decisions, as the runner does ----------------------------------------

    def _apply(self, change: Commit) -> None:
        before, self.durable = self.durable, engine.apply(self.durable, change)
        self.commits.append(change)
        self.seen.append(self.durable)
        _check_moves(before, self.durable)
        for step in self.durable.steps:
            old = before.step(step.name)
            if step.status is StepStatus.COMPENSATED and (old is None or old.status != step.status):
                self.undone.append(step.seq)

    def _write(
        self,
        writes: list[StepWrite],
        events: list[Event],
        status: SagaStatus | None = None,
        error: str | None = None,
    ) -> None:
        self._apply(engine.commit(self.durable, writes, events, status, error))

    def _advance(self, ahead: SagaRecord, carried: list[StepWrite], events: list[Event]) -> None:
        """What comes after a step's success (or a resume): the next start, or the end."""
        decision = engine.next_forward(self.saga, ahead)
        if isinstance(decision, engine.Complete):
            done = engine.moved(self.durable, SagaStatus.COMPLETED)
            self._write(carried, [*events, done], SagaStatus.COMPLETED)
            return
        if isinstance(decision, engine.GiveUp):
            if carried:
                self._write(carried, events)
            self._fail(decision.name, "gave up")
            return
        declared = self.saga.by_name(decision.name)
        assert declared is not None
        template = engine.template(ahead, declared.name, declared.kind, declared.transactional)
        start = engine.start(ahead, template, decision.attempt)
        self._write([*carried, start], [*events, *engine.started_event(start)])
        if self.durable.cancel_requested and not engine.past_pivot(self.durable):
            reason = engine.stop_reason(self.durable)
            self._write([], [rules.turn(self.durable, reason)], SagaStatus.COMPENSATING)

    def _fail(self, name: str, error: BaseException | str) -> None:
        """``error``: what the step raised, or (a str) why it was given up without returning."""
        text = error if isinstance(error, str) else str(error)
        gave_up = isinstance(error, str)  # never returned: its outcome is unknown
        write, event = engine.failed(self.durable, name, text, outcome_unknown=gave_up)
        no_way_back = engine.no_unwinding(self.durable, error) is not None
        status = SagaStatus.FAILED if no_way_back else SagaStatus.COMPENSATING
        moved = engine.moved(self.durable, status, reason="step failed")
        self._write([write], [event, moved], status, text)

    def _running(self) -> list[str]:
        return [s.name for s in self.durable.steps if s.status is StepStatus.RUNNING]

    def _claim(self) -> None:
        """The store's claim: epoch + 1 for a new owner (not a commit)."""
        self.durable = dataclasses.replace(
            self.durable, epoch=self.durable.epoch + 1, owner="recoverer"
        )
        self.alive = True

    # -- rules --------------------------------------------------------------------------------

    def _forward_step(self) -> bool:
        status = self.durable.status
        return self.alive and status is SagaStatus.RUNNING and bool(self._running())

    @precondition(_forward_step)
    @rule()
    def step_succeeds(self) -> None:
        name = self._running()[0]
        result = encode({"name": name}, "result")
        write, event = engine.succeeded(self.durable, name, result)
        ahead = engine.apply(self.durable, engine.commit(self.durable, [write]))
        self._advance(ahead, [write], [event])
        figures.count("engine rules")

    @precondition(_forward_step)
    @rule(for_good=st.booleans())
    def step_fails(self, for_good: bool) -> None:
        name = self._running()[0]
        declared = self.saga.by_name(name)
        recorded = self.durable.step(name)
        assert declared is not None
        assert recorded is not None
        retried = declared.kind is StepKind.RETRIABLE or not for_good
        if retried and declared.retry.allows(recorded.attempt + 1):
            # As the engine does: the failed attempt in a commit of its own before the
            # wait, then the next attempt's start.
            failed = engine.attempt_failed(name, recorded.attempt, "boom", 0.0, 1.0)
            self._write([], [failed])
            start = engine.start(self.durable, recorded, recorded.attempt + 1)
            self._write([start], list(engine.started_event(start)))
        else:
            self._fail(name, RuntimeError("boom"))
        figures.count("engine rules")

    @precondition(lambda self: self.alive and self.durable.status is SagaStatus.COMPENSATING)
    @rule(succeeds=st.booleans())
    def compensation(self, succeeds: bool) -> None:
        stack = engine.undo_stack(self.durable)
        if not stack:
            status = engine.unwound_status(self.durable)
            self._write([], [engine.moved(self.durable, status)], status)
            return
        top = stack[0]
        declared = self.saga.by_name(top.name)
        assert declared is not None
        assert declared.kind is StepKind.COMPENSATABLE
        used = 0 if self.fresh else top.undo_attempt
        if declared.undo_retry.allows(used + 1):
            write, event = engine.undo_started(self.durable, top.name)
            self._write([write], [event])
            used += 1
            if succeeds:
                write, event = engine.undone(self.durable, top.name)
                self._write([write], [event])
                figures.count("engine rules")
                return
        if not declared.undo_retry.allows(used + 1):
            write, event = engine.undo_failed(self.durable, top.name, "undo failed")
            moved = engine.moved(self.durable, SagaStatus.FAILED, reason="compensation failed")
            self._write([write], [event, moved], SagaStatus.FAILED, "undo failed")
        figures.count("engine rules")

    @precondition(lambda self: self.alive and self.durable.status in ACTIVE)
    @rule()
    def crash(self) -> None:
        self.alive = False
        self.fresh = False
        figures.count("engine rules")

    @precondition(lambda self: not self.alive and self.durable.status in ACTIVE)
    @rule(compensate=st.booleans())
    def recover(self, compensate: bool) -> None:
        self._claim()
        route = engine.recovery_route(self.durable, self.saga, compensate)
        if route == "forward":
            self._advance(self.durable, [], [])
        elif route == "turn":
            self._write([], [rules.turn(self.durable, "recovery")], SagaStatus.COMPENSATING)
        figures.count("engine rules")

    @precondition(lambda self: not self.alive or self.durable.status not in ACTIVE)
    @rule(action=st.sampled_from(["compensate", "resume", "cancel"]))
    def operator(self, action: str) -> None:
        refuse = {
            "compensate": rules.refuse_compensate,
            "resume": rules.refuse_resume,
            "cancel": rules.refuse_cancel,
        }[action]
        try:
            refuse(self.durable)
        except OperationRefusedError:
            status = self.durable.status
            # A running saga may only be refused a compensate, or a cancel once its pivot
            # may have acted (it can only go forward).
            may_refuse = action == "compensate" or (
                action == "cancel" and engine.pivot_may_have_acted(self.durable)
            )
            assert status is not SagaStatus.RUNNING or may_refuse
            return
        assert self.durable.status not in (SagaStatus.COMPLETED, SagaStatus.COMPENSATED)
        self._carry_out(action)
        figures.count("engine rules")

    def _carry_out(self, action: str) -> None:
        """An operator's verb once its claim went through, as the coordinator does it."""
        if action == "cancel":
            self.durable = dataclasses.replace(self.durable, cancel_requested=True)
        elif action == "resume":
            self._claim()
            self._advance(self.durable, [], [])
        else:
            self._claim()
            self.fresh = self.durable.status is SagaStatus.FAILED
            if self.durable.status is not SagaStatus.COMPENSATING:
                turn = rules.turn(self.durable, "operator compensate")
                self._write([], [turn], SagaStatus.COMPENSATING)

    @precondition(lambda self: not self.alive or self.durable.status not in ACTIVE)
    @rule(action=st.sampled_from(["compensate", "resume", "cancel"]), age=st.integers(1, 12))
    def operator_on_a_stale_read(self, action: str, age: int) -> None:
        """An operator decided on the saga as it was ``age`` commits ago (the owner moved
        on since); the store lets the claim through only if the verb's guard still holds
        of the saga as it is now, as ``SqlSagaStore.claim`` checks it inside the claim."""
        read = self.seen[max(0, len(self.seen) - 1 - age)]
        refuse, guard = {
            "compensate": (rules.refuse_compensate, rules.compensate_guard(read)),
            "resume": (rules.refuse_resume, rules.resume_guard(read)),
            "cancel": (rules.refuse_cancel, rules.cancel_guard()),
        }[action]
        try:
            refuse(read)
        except OperationRefusedError:
            return
        claimable = self.durable.status in (*ACTIVE, SagaStatus.FAILED)
        if not claimable or guard_broken(self.durable, guard) is not None:
            figures.count("engine stale operator claims refused")
            return
        self._carry_out(action)  # decided on the stale read: only the guard stands between
        figures.count("engine stale operator claims let through")

    def teardown(self) -> None:
        if hasattr(self, "durable"):
            figures.count(
                f"engine state-machine runs ending with the saga {self.durable.status.value}"
            )

    # -- invariants ---------------------------------------------------------------------------

    @invariant()
    def commits_replay_to_the_same_state(self) -> None:
        replayed = self.first
        for change in self.commits:
            replayed = engine.apply(replayed, change)
        assert _state(replayed) == _state(self.durable)

    @invariant()
    def attempts_never_exceed_max_attempts(self) -> None:
        for step in self.durable.steps:
            declared = self.saga.by_name(step.name)
            assert declared is not None
            assert declared.retry.allows(step.attempt), f"{step.name}: attempt {step.attempt}"

    @invariant()
    def compensations_complete_newest_first(self) -> None:
        assert self.undone == sorted(self.undone, reverse=True), self.undone
        assert len(self.undone) == len(set(self.undone)), "a step was compensated twice"

    @invariant()
    def nothing_at_or_past_a_pivot_is_undone(self) -> None:
        undoing = (StepStatus.COMPENSATING, StepStatus.COMPENSATED)
        for step in self.durable.steps:
            if step.kind is not StepKind.COMPENSATABLE:
                assert step.status not in undoing, f"{step.name} ({step.kind.value}) undone"
        if engine.pivot_may_have_acted(self.durable):  # succeeded, in flight or in doubt
            assert all(s.status not in undoing for s in self.durable.steps)
            assert self.durable.status not in (SagaStatus.COMPENSATED, SagaStatus.CANCELLED)

    @invariant()
    def a_finished_saga_holds_no_lease(self) -> None:
        if self.durable.status.is_finished:
            assert self.durable.owner is None
            assert self.commits[-1].release


def _state(record: SagaRecord) -> tuple[object, ...]:
    """What commits decide: statuses, error and steps (claims and cancel requests aside)."""
    return (record.status, record.error, record.steps)


def _check_moves(before: SagaRecord, after: SagaRecord) -> None:
    """Raise ``IllegalTransitionError`` unless every change is a legal move."""
    check_saga_move(after.id, before.status, after.status)
    for step in after.steps:
        old = before.step(step.name)
        if old is None:
            assert step.status is StepStatus.RUNNING, f"{step.name} appeared {step.status}"
        elif old.status is not step.status:
            check_step_move(step.name, old.status, step.status)
        elif step.status is StepStatus.RUNNING:
            assert step.attempt >= old.attempt


EngineMachine.TestCase.settings = settings(
    max_examples=80,
    stateful_step_count=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_the_engine_keeps_its_invariants_whatever_happens = EngineMachine.TestCase
