"""One step's attempts: each retry made durable before it runs, tenacity deciding.

tenacity's own state machine (``Retrying.iter``) decides whether and how long to
wait before the next attempt; the flow yields the wait as a ``Sleep`` instead of
sleeping, so the thread driver sleeps and the asyncio driver awaits, with one
retry loop for both.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator, Mapping
from typing import Any

import tenacity

from saga._internal.codec import decode
from saga._internal.context import StepContext
from saga._internal.engine import records
from saga._internal.engine.decisions import Cursor
from saga._internal.engine.effects import (
    Call,
    Flow,
    Recorded,
    Sleep,
    Tell,
    Transact,
    write,
)
from saga._internal.engine.fault_points import fault
from saga._internal.engine.targets import Target
from saga._internal.policy import RetryPolicy
from saga._internal.ports import Event, SagaRecord, StepRecord
from saga._internal.result_types import Read, lenient_result, typed_result
from saga._internal.status import StepStatus


class Retries:
    """tenacity's decision after each failed attempt: how long to wait, or give up."""

    def __init__(self, policy: RetryPolicy, attempts_used: int) -> None:
        self._retrying = policy.retrying(attempts_used)
        self._retrying.begin()
        self._state = tenacity.RetryCallState(self._retrying, None, (), {})
        self._retrying.iter(self._state)  # the first attempt: always made

    def after(self, error: BaseException) -> float:
        """The wait before the next attempt, once an attempt failed with ``error``;
        raises ``error`` when the policy gives up (tenacity re-raises it)."""
        self._state.set_exception((type(error), error, error.__traceback__))
        decision = self._retrying.iter(self._state)
        assert isinstance(decision, tenacity.DoSleep), decision
        self._state.prepare_for_next_attempt()
        return float(decision)


def attempts(
    cursor: Cursor,
    name: str,
    attempt: int,
    policy: RetryPolicy,
    timeout: float | None,
    target: Target,
    data: Any = None,
    transactional: bool = False,
    payload_limit: int = 0,
) -> Flow[Any]:
    """Run ``target`` until it succeeds or ``policy`` gives up; each retry durable first
    (attempt ``attempt`` already is). A transactional action's success commits with its
    writes (its result bounded by ``payload_limit``): ``cursor.record`` then shows it.
    The first attempt runs outside tenacity, so that the usual case (it succeeds) costs
    no retry machinery; its error is handed to tenacity, which decides."""
    number, retries = attempt, None
    while True:
        began = time.monotonic()
        try:
            return (
                yield from _attempt(
                    cursor, name, number, timeout, target, data, payload_limit, transactional
                )
            )
        except Exception as error:
            failure = error
        took = time.monotonic() - began  # how long the attempt ran, apart from the wait
        retries = retries or Retries(policy, attempt - 1)
        number = yield from _next_attempt(cursor, name, number, failure, took, retries)


def _next_attempt(
    cursor: Cursor, name: str, number: int, failure: Exception, took: float, retries: Retries
) -> Flow[int]:
    """Attempt ``number`` failed: raise ``failure`` if the policy gives up, else record
    the failure, wait, and make the next attempt's start durable; its number."""
    delay = retries.after(failure)
    yield retry_scheduled(cursor.record, name, number, failure, delay)
    # Durable before the wait: while it lasts, the history says the attempt failed,
    # why, and when the next is due, rather than showing a step in doubt.
    failed = records.attempt_failed(name, number, records.describe(failure), took, delay)
    cursor.record = yield from write(cursor.record, (), (failed,))
    yield Sleep(delay)
    start = records.start(cursor.record, recorded(cursor.record, name), number + 1)
    cursor.record = yield from write(cursor.record, [start], records.started_event(start))
    return number + 1


def retry_scheduled(
    record: SagaRecord,
    name: str,
    attempt: int,
    error: BaseException,
    delay: float,
    compensating: bool = False,
) -> Tell:
    """Tell the listeners that attempt ``attempt`` (of step ``name``'s compensation, if
    ``compensating``) failed and another follows after ``delay`` seconds: a decision, not
    a record (a step's failed attempt is recorded next, as ``attempt_failed``; a
    compensation's with the next attempt's start)."""
    detail: dict[str, object] = {"error": records.describe(error), "delay": round(delay, 6)}
    if compensating:
        detail["compensating"] = True
    return Tell(record, (Event("retry_scheduled", name, attempt, detail),), durable=False)


def _attempt(
    cursor: Cursor,
    name: str,
    number: int,
    timeout: float | None,
    target: Target,
    data: Any,
    payload_limit: int,
    transactional: bool,
) -> Flow[Any]:
    """Attempt ``number`` of step ``name``'s action (its start is already durable)."""
    context = context_for(cursor.record, name, number, data)
    if transactional:
        outcome = Recorded(cursor.record, name, payload_limit=payload_limit)
        result = yield from in_transaction(cursor, context, target, outcome)
    else:
        result = yield Call(target, context, timeout)
    yield from fault("after_action", name)
    return result


def in_transaction(
    cursor: Cursor, context: StepContext, target: Target, outcome: Recorded
) -> Flow[Any]:
    """Run ``target`` with ``context.session`` in the transaction that records ``outcome``
    (its success, or its compensation done); advance ``cursor``."""
    result, stop, change = yield Transact(target, context, outcome)
    cursor.record = records.apply(cursor.record, change, stop)
    return result


def context_for(record: SagaRecord, name: str, attempt: int, data: Any) -> StepContext:
    """What attempt ``attempt`` of step ``name`` is told about itself."""
    return StepContext(
        saga_id=record.id,
        saga_name=record.name,
        step=name,
        attempt=attempt,
        epoch=record.epoch,
        data=data,
        results=StepResults(record),
    )


def undo_result(record: SagaRecord, name: str) -> Read:
    """Step ``name``'s forward result as its compensation gets it: typed, else the JSON as
    stored with the reason (a type changed since it was recorded never stops an unwinding)."""
    step = recorded(record, name)
    return lenient_result(record, step, decode(step.result))


def undo_context(record: SagaRecord, name: str, result: Read) -> StepContext:
    """What a compensation of step ``name`` is told: its forward ``result`` as well."""
    step = recorded(record, name)
    return dataclasses.replace(
        context_for(record, name, step.undo_attempt, decode(record.input)),
        result=result.value,
        result_error=None if result.error is None else str(result.error),
        compensating=True,
    )


class StepResults(Mapping[str, Any]):
    """``ctx.results``: a read-only mapping that decodes a result only when asked for it,
    so a step of a 10,000-step saga does not decode 10,000 results it never reads."""

    def __init__(self, record: SagaRecord) -> None:
        self._record = record

    def _done(self, name: str) -> StepRecord | None:
        step = self._record.step(name)
        if step is None or step.status is not StepStatus.SUCCEEDED or step.result is None:
            return None
        return step

    def __getitem__(self, name: str) -> Any:
        step = self._done(name)
        if step is None:
            raise KeyError(name)
        return typed_result(self._record, step)

    def __iter__(self) -> Iterator[str]:
        return (s.name for s in self._record.steps if self._done(s.name) is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return repr(dict(self))


def recorded(record: SagaRecord, name: str) -> StepRecord:
    """Step ``name`` as ``record`` holds it (it must be recorded)."""
    step = record.step(name)
    assert step is not None, name
    return step
