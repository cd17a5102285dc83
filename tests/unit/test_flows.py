"""The engine's flows driven by hand: replies fed in, the effects that come out asserted.

No store, no thread, no event loop: this is what "sans-I/O" buys. Each test plays
the driver, answering every effect itself, and checks the exact sequence of
effects and the records they carry.
"""

from __future__ import annotations

import contextlib
import dataclasses
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from saga import RetryPolicy, Saga, SagaFailed, SagaHandedBack, SagaStatus, StepStatus
from saga._internal import engine
from saga._internal.drivers.functions import Functions
from saga._internal.engine import effects, rules
from saga._internal.engine.attempts import attempts
from saga._internal.engine.fault_points import FAULT_POINTS
from saga._internal.engine.forward import STOPPED, Forward
from saga._internal.engine.targets import Given
from saga._internal.ports import SagaRecord
from saga._internal.refs import Resolver
from saga._internal.versions import Registry

Answer = Callable[[effects.Effect], Any]


@pytest.fixture(autouse=True)
def fault_points_in_use(monkeypatch: pytest.MonkeyPatch) -> None:
    """As in a crash test: the engine yields its fault points (the sequences below show
    where each falls); :func:`test_without_fault_points_in_use_none_is_yielded` checks
    that a process using none sees none."""
    monkeypatch.setattr(FAULT_POINTS, "on", True)


class HandDriver:
    """Answers effects with ``answer``; runs branches one after the other, in the order
    launched, and keeps every effect seen (branch effects included)."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.seen: list[effects.Effect] = []
        self.finished: list[effects.Finished] = []
        self.stop_requested = False

    def run(self, flow: effects.Flow[Any]) -> Any:
        reply: Any = None
        error: Exception | None = None
        while True:
            try:
                effect = flow.send(reply) if error is None else flow.throw(error)
            except StopIteration as done:
                return done.value
            self.seen.append(effect)
            reply, error = None, None
            try:
                reply = self._answer(effect)
            except Exception as raised:  # noqa: BLE001 - thrown into the flow, as drivers do
                error = raised

    def _answer(self, effect: effects.Effect) -> Any:
        if isinstance(effect, effects.Launch):
            self.finished += [self.run(branch.flow) for branch in effect.branches]
            return None
        if isinstance(effect, effects.Wait):
            finished, self.finished = self.finished, []
            stop, self.stop_requested = self.stop_requested, False
            return effects.Waited(finished, stop)
        return self.answer(effect)

    def kinds(self) -> list[str]:
        """The effects seen, as ``Kind`` or ``Kind:detail``."""
        return [_kind(effect) for effect in self.seen]


def _kind(effect: effects.Effect) -> str:
    name = type(effect).__name__
    if isinstance(effect, effects.Fault):
        return f"{name}:{effect.point}:{effect.step}"
    if isinstance(effect, effects.Write):
        status = effect.change.status.value if effect.change.status else "-"
        return f"{name}:{status}:{'+'.join(s.step.name for s in effect.change.steps)}"
    if isinstance(effect, effects.Call):
        return f"{name}:{effect.context.step}"
    return name


REGISTRY = Registry()
FUNCTIONS = Functions(REGISTRY, Resolver(()))
"""The hand driver's functions: what a ``Call`` names is looked up as a driver does."""


def plain(effect: effects.Effect) -> Any:
    """The answers of a store that never asks to stop and actions that return 1."""
    if isinstance(effect, effects.Write):
        return False
    if isinstance(effect, effects.Call):
        return FUNCTIONS.action(effect.target)(effect.context)
    return None


@pytest.fixture
def hand() -> Iterator[Callable[[Callable[[Any], Any]], Given]]:
    """Hands a function to the hand driver (as a block's face does) for the test."""
    with contextlib.ExitStack() as stack:

        def handed(fn: Callable[[Any], Any]) -> Given:
            (target,) = stack.enter_context(FUNCTIONS.given([fn]))
            assert target is not None
            return target

        yield handed


def two_step_saga(fail_second: bool = False) -> Saga:
    saga = Saga(f"flows-{uuid.uuid4().hex[:8]}")

    @saga.step
    def reserve(ctx: Any) -> int:
        return 1

    @reserve.compensation
    def release(ctx: Any) -> None:
        return None

    @saga.step(retry=RetryPolicy(max_attempts=1))
    def charge(ctx: Any) -> int:
        if fail_second:
            raise ValueError("card declined")
        return 2

    saga.validate()
    REGISTRY.add(saga)
    return saga


def started(saga: Saga) -> tuple[SagaRecord, list[engine.RunStep]]:
    record, change, first = rules.new_saga(saga, None, "null", "hand")
    return engine.apply(record, change), first


def forward(saga: Saga, record: SagaRecord, first: list[engine.RunStep]) -> effects.Flow[Any]:
    """The forward flow alone (the engine wraps it in a Hold of the lease)."""
    return Forward(saga, record, 1 << 20, Resolver(())).run(list(first))


def test_a_sequential_saga_commits_each_success_with_the_next_start() -> None:
    saga = two_step_saga()
    record, first = started(saga)
    driver = HandDriver(plain)
    done = driver.run(forward(saga, record, first))
    assert done.status is SagaStatus.COMPLETED
    assert driver.kinds() == [
        "Launch",
        "Call:reserve",
        "Fault:after_action:reserve",
        "Wait",
        "Draining",  # is this process stopping? (no: the next step starts)
        "Fault:before_start_commit:charge",
        "Write:-:reserve+charge",  # reserve's success travels with charge's start
        "Fault:after_start_commit:charge",
        "Launch",
        "Call:charge",
        "Fault:after_action:charge",
        "Wait",
        "Fault:before_final_commit:None",
        "Write:completed:charge",
        "Fault:after_final_commit:None",
    ]


def test_without_fault_points_in_use_none_is_yielded(monkeypatch: pytest.MonkeyPatch) -> None:
    saga = two_step_saga(fail_second=True)
    with_points = HandDriver(plain)
    with pytest.raises(SagaFailed):
        with_points.run(forward(saga, *started(saga)))
    monkeypatch.setattr(FAULT_POINTS, "on", False)
    without = HandDriver(plain)
    with pytest.raises(SagaFailed):
        without.run(forward(saga, *started(saga)))
    assert any(kind.startswith("Fault:") for kind in with_points.kinds())
    assert without.kinds() == [k for k in with_points.kinds() if not k.startswith("Fault:")]


def test_a_failed_step_turns_the_saga_then_unwinds_newest_first() -> None:
    saga = two_step_saga(fail_second=True)
    record, first = started(saga)
    driver = HandDriver(plain)
    with pytest.raises(SagaFailed) as raised:
        driver.run(forward(saga, record, first))
    assert raised.value.status is SagaStatus.COMPENSATED
    assert raised.value.failed_step == "charge"
    kinds = driver.kinds()
    turn = kinds.index("Write:compensating:charge")
    assert kinds[turn - 1] == "CancelInFlight"  # in-flight siblings may be cancelled first
    assert kinds[turn + 1 :] == [
        "Fault:before_unwind:None",
        "Draining",  # a stopping process would hand the saga back before this undo
        "Fault:before_undo:reserve",
        "Write:-:reserve",  # the compensation's start, durable before it runs
        "Call:reserve",
        "Fault:after_undo:reserve",
        "Fault:before_final_commit:None",
        "Write:compensated:reserve",  # its end rides with the saga's
        "Fault:after_undo_commit:reserve",
        "Fault:after_final_commit:None",
    ]
    turned = driver.seen[turn]
    assert isinstance(turned, effects.Write)
    assert turned.change.steps[0].step.status is StepStatus.FAILED
    final = driver.seen[-3]
    assert isinstance(final, effects.Write)
    assert [w.step.status for w in final.change.steps] == [StepStatus.COMPENSATED]
    assert [e.kind for e in final.change.events] == ["compensation_done", "saga_compensated"]


def test_a_compensation_s_end_rides_with_the_next_one_s_start() -> None:
    saga = Saga(f"flows-{uuid.uuid4().hex[:8]}")
    for name in ("first", "second"):
        saga.step(name=name)(lambda ctx: 1).compensation(lambda ctx: None)
    saga.step(name="third", retry=RetryPolicy(max_attempts=1))(_refused)
    saga.validate()
    REGISTRY.add(saga)
    driver = HandDriver(plain)
    with pytest.raises(SagaFailed):
        driver.run(forward(saga, *started(saga)))
    writes = [e for e in driver.seen if isinstance(e, effects.Write)]
    unwinding = writes[[w.change.status for w in writes].index(SagaStatus.COMPENSATING) + 1 :]
    assert [_commit(w) for w in unwinding] == [
        [("second", "compensating", "compensation_started")],
        [
            ("second", "compensated", "compensation_done"),  # durable with the next start
            ("first", "compensating", "compensation_started"),
        ],
        [("first", "compensated", "compensation_done"), (None, "compensated", "saga_compensated")],
    ]


def _refused(ctx: Any) -> None:
    raise ValueError("refused")


def _commit(effect: effects.Write) -> list[tuple[str | None, str, str]]:
    """A commit as (step, the status it writes, the event) pairs, in order; the saga's
    own event names its new status."""
    statuses = {w.step.name: w.step.status.value for w in effect.change.steps}
    saga_status = effect.change.status.value if effect.change.status else "-"
    return [(e.step, statuses.get(e.step or "", saga_status), e.kind) for e in effect.change.events]


def test_a_draining_process_hands_back_instead_of_starting_the_next_step() -> None:
    saga = two_step_saga()
    record, first = started(saga)

    def answer(effect: effects.Effect) -> Any:  # the process is stopping
        return True if isinstance(effect, effects.Draining) else plain(effect)

    driver = HandDriver(answer)
    with pytest.raises(SagaHandedBack) as raised:
        driver.run(forward(saga, record, first))
    assert raised.value.status is SagaStatus.RUNNING
    assert driver.kinds() == [
        "Launch",
        "Call:reserve",
        "Fault:after_action:reserve",
        "Wait",
        "Draining",
        "Write:-:reserve",  # reserve's success, with the lease given up
    ]
    handed = driver.seen[-1]
    assert isinstance(handed, effects.Write)
    assert handed.change.release is True
    assert handed.change.status is None  # still running: the next owner goes on
    assert [event.kind for event in handed.change.events] == ["step_succeeded", "lease_released"]


def test_a_stop_asked_for_while_steps_run_cancels_them_and_unwinds() -> None:
    saga = two_step_saga()
    record, first = started(saga)
    driver = HandDriver(plain)
    driver.stop_requested = True  # the lease renewal saw a cancel request

    def answer(effect: effects.Effect) -> Any:  # the store: which stop it was
        if isinstance(effect, effects.Load):
            return dataclasses.replace(record, cancel_requested=True)
        return plain(effect)

    driver.answer = answer
    with pytest.raises(SagaFailed) as raised:
        driver.run(forward(saga, record, first))
    assert raised.value.status is SagaStatus.CANCELLED
    cancel = next(e for e in driver.seen if isinstance(e, effects.CancelInFlight))
    assert cancel.why == STOPPED
    assert "Launch" not in driver.kinds()[1:]  # nothing new started after the stop


def test_a_failed_attempt_is_durable_before_the_wait_and_the_retry_before_it_runs(
    hand: Callable[[Callable[[Any], Any]], Given],
) -> None:
    saga = two_step_saga()
    record, _ = started(saga)
    calls: list[int] = []

    def flaky(context: Any) -> str:
        calls.append(context.attempt)
        if len(calls) == 1:
            raise ConnectionError("reset by peer")
        return "ok"

    cursor = engine.Cursor(record)
    policy = RetryPolicy(max_attempts=2, initial_delay=0.25, jitter=0)
    driver = HandDriver(plain)
    result = driver.run(attempts(cursor, "reserve", 1, policy, None, hand(flaky)))
    assert result == "ok"
    assert calls == [1, 2]
    told, failure, sleep, retry = driver.seen[1:5]
    # The listeners hear of the retry before the wait: a decision, not a record.
    assert isinstance(told, effects.Tell)
    assert not told.durable
    (scheduled,) = told.events
    assert (scheduled.kind, scheduled.step, scheduled.attempt) == ("retry_scheduled", "reserve", 1)
    assert scheduled.detail == {"error": "ConnectionError: reset by peer", "delay": 0.25}
    # The failure is recorded before the wait, in a commit of its own: the history says
    # it failed, how long it ran and when the next attempt is due while the wait lasts.
    assert isinstance(failure, effects.Write)
    assert failure.change.steps == ()
    (failed,) = failure.change.events
    assert (failed.kind, failed.step, failed.attempt) == ("attempt_failed", "reserve", 1)
    assert failed.detail is not None
    assert failed.detail["error"] == "ConnectionError: reset by peer"
    assert failed.detail["delay"] == 0.25
    assert failed.detail["took"] >= 0
    assert sleep == effects.Sleep(0.25)  # tenacity's decision, yielded, not slept
    assert isinstance(retry, effects.Write)
    (restarted,) = retry.change.events
    assert (restarted.kind, restarted.attempt) == ("step_started", 2)


def test_an_error_tenacity_does_not_retry_ends_the_attempts_at_once(
    hand: Callable[[Callable[[Any], Any]], Given],
) -> None:
    saga = two_step_saga()
    record, _ = started(saga)

    def broken(context: Any) -> None:
        raise ValueError("no")

    driver = HandDriver(plain)
    flow = attempts(engine.Cursor(record), "reserve", 1, RetryPolicy(), None, hand(broken))
    with pytest.raises(ValueError, match="no"):
        driver.run(flow)
    assert driver.kinds() == ["Call:reserve"]  # no sleep, no write: nothing retried
